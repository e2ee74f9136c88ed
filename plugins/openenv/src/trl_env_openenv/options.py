"""The ``openenv`` environment's options, checked once when the env is created.

Values may arrive typed (Python callers, the CLI's typed ``--env-arg``) or as strings (config
files, older CLIs); both are accepted, and a bad value fails with the option's name.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from trl_env.redact import redact_text

from .auth import split_credentials, token_from
from .errors import OpenEnvOptionError

ACTION_FORMATS = ("field", "json", "auto")
SEED_MODES = ("int", "str", "none")
REWARD_MODES = ("sum", "last")
_SCHEMES = {"http": "http", "https": "https", "ws": "http", "wss": "https"}


@dataclass(frozen=True)
class Options:
    """Validated options; see the README's option table for what each one means."""

    url: str
    action_field: str = "message"
    action_format: str = "field"
    action_defaults: dict[str, Any] = field(default_factory=dict)
    observation_field: str | None = None
    success_field: str | None = None
    seed_mode: str = "int"
    seed_key: str = "seed"
    reset_args: dict[str, Any] = field(default_factory=dict)
    reward_mode: str = "sum"
    timeout: float = 60.0
    connect_timeout: float = 10.0
    retries: int = 4
    backoff: float = 0.5
    slot_timeout: float = 300.0
    max_reply_mb: float = 4.0
    max_backoff: float = 8.0
    token_env: str | None = None  # the variable holding this server's bearer token
    # taken out of ``url`` (which messages show), sent only as HTTP Basic auth: see .auth
    credentials: tuple[str, str] | None = field(default=None, repr=False, compare=False)
    token: str | None = field(default=None, repr=False, compare=False)  # read from token_env

    @classmethod
    def parse(cls, **raw: Any) -> Options:
        """Check and convert raw option values; raises :class:`OpenEnvOptionError`."""
        obs_field = raw.get("observation_field")
        success_field = raw.get("success_field")
        url, credentials = split_credentials(normalize_url(raw["url"]))
        token_env = raw.get("token_env") or None
        token = None
        if token_env is not None:
            token_env = _name("token_env", token_env)
            try:
                token = token_from(token_env)
            except ValueError as exc:
                raise OpenEnvOptionError(f"Option token_env: {exc}") from None
        return cls(
            url=url,
            credentials=credentials,
            token_env=token_env,
            token=token,
            action_field=_name("action_field", raw.get("action_field", "message")),
            action_format=_choice(
                "action_format", raw.get("action_format", "field"), ACTION_FORMATS
            ),
            action_defaults=_mapping("action_defaults", raw.get("action_defaults")),
            observation_field=None if not obs_field else _name("observation_field", obs_field),
            success_field=None if not success_field else _name("success_field", success_field),
            seed_mode=_choice("seed_mode", raw.get("seed_mode", "int"), SEED_MODES),
            seed_key=_name("seed_key", raw.get("seed_key", "seed")),
            reset_args=_mapping("reset_args", raw.get("reset_args")),
            reward_mode=_choice("reward_mode", raw.get("reward_mode", "sum"), REWARD_MODES),
            timeout=_positive("timeout", raw.get("timeout", 60.0)),
            connect_timeout=_positive("connect_timeout", raw.get("connect_timeout", 10.0)),
            retries=_count("retries", raw.get("retries", 4)),
            backoff=_positive("backoff", raw.get("backoff", 0.5), allow_zero=True),
            slot_timeout=_positive("slot_timeout", raw.get("slot_timeout", 300.0), allow_zero=True),
            max_reply_mb=_positive("max_reply_mb", raw.get("max_reply_mb", 4.0)),
        )

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): exponential, capped."""
        return min(self.backoff * 2**attempt, self.max_backoff)


def normalize_url(value: Any) -> str:
    """``http(s)://host:port[/prefix]`` from what a user may type (ws://, no scheme, a /ws tail)."""
    if not isinstance(value, str) or not value.strip():
        raise OpenEnvOptionError(
            f"Option url must be the address of an OpenEnv server such as http://127.0.0.1:8000, "
            f"not {value!r}."
        )
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    scheme = _SCHEMES.get(parts.scheme.lower())
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if scheme is None or not parts.hostname or not port_ok or parts.query or parts.fragment:
        raise OpenEnvOptionError(
            f"Option url must look like http://HOST:PORT (or https://, ws://, wss://), "
            f"not {redact_text(value)!r}."
        )
    path = parts.path.rstrip("/")
    # openenv's client appends /ws itself; a URL copied from a WebSocket log already has it.
    if path.endswith("/ws"):
        path = path[: -len("/ws")]
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def _name(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise OpenEnvOptionError(f"Option {option} must be a non-empty field name, not {value!r}.")
    return value.strip()


def _choice(option: str, value: Any, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        raise OpenEnvOptionError(
            f"Option {option} must be one of {', '.join(choices)}, not {value!r}."
        )
    return text


def _mapping(option: str, value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise OpenEnvOptionError(
                f"Option {option} must be a JSON object such as '{{\"key\": 1}}', "
                f"not {value!r} ({exc.msg})."
            ) from exc
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise OpenEnvOptionError(f"Option {option} must be a JSON object, not {value!r}.")
    return dict(value)


def _number(option: str, value: Any) -> float:
    if isinstance(value, bool):
        raise OpenEnvOptionError(f"Option {option} must be a number, not {value!r}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise OpenEnvOptionError(f"Option {option} must be a number, not {value!r}.") from None
    if not math.isfinite(number):
        raise OpenEnvOptionError(f"Option {option} must be a finite number, not {value!r}.")
    return number


def _positive(option: str, value: Any, *, allow_zero: bool = False) -> float:
    number = _number(option, value)
    if number < 0 or (number == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise OpenEnvOptionError(f"Option {option} must be {bound}, not {value!r}.")
    return number


def _count(option: str, value: Any) -> int:
    number = _number(option, value)
    if number < 0 or number != int(number):
        raise OpenEnvOptionError(f"Option {option} must be a whole number >= 0, not {value!r}.")
    return int(number)
