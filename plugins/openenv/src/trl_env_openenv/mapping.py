"""Text <-> OpenEnv data: a reply to an action, an observation to text, a seed to reset."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .errors import OpenEnvOptionError
from .options import Options

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_DECIMAL = re.compile(r"[0-9]{1,18}")


class InvalidAction(ValueError):
    """The agent's reply cannot be turned into an action; the message is shown to the agent."""


def action_payload(text: str, options: Options) -> dict[str, Any]:
    """The JSON action sent to the server for the agent's reply ``text``."""
    if options.action_format == "field":
        return {**options.action_defaults, options.action_field: text}
    parsed = _json_object(text)
    if isinstance(parsed, dict):
        return {**options.action_defaults, **parsed}
    if options.action_format == "auto":
        return {**options.action_defaults, options.action_field: text}
    raise InvalidAction(f"reply with one JSON object giving the action ({parsed})")


def _json_object(text: str) -> dict[str, Any] | str:
    """The JSON object in ``text`` (a ```json fence around it is fine), or why there is none."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if not isinstance(value, dict):
        return f"got a JSON {type(value).__name__}, not an object"
    return value


def _content(observation: dict[str, Any]) -> dict[str, Any]:
    """``observation`` as OpenEnv 0.3 servers send it: 0.10 servers also put the observation's
    ``metadata`` in it, ``{}`` when the env sets none; an empty one is left out, so the agent
    sees the same text from a server of either release (a non-empty one stays, by its name)."""
    if observation.get("metadata") == {}:
        return {k: v for k, v in observation.items() if k != "metadata"}
    return observation


def observation_text(observation: dict[str, Any], options: Options) -> str:
    """The text the agent sees for ``observation`` (the server's dict, without reward and done)."""
    observation = _content(observation)
    if options.observation_field is not None:
        return _as_text(_field(observation, options.observation_field))
    # One text field (an echo env's reply, a game's board) is the text itself; else show it all.
    if len(observation) == 1:
        (only,) = observation.values()
        if isinstance(only, str):
            return only
    return _as_text(observation)


def success_of(observation: dict[str, Any] | None, options: Options) -> bool | None:
    """The episode's success, from the last observation's ``success_field``; None without one.

    OpenEnv's wire format has no success flag (only observation, reward and done; an
    observation's ``metadata`` is sent by 0.10 servers only), so only an env whose observations
    carry a true/false field of their own can say, and the user names it.
    """
    if options.success_field is None or observation is None:
        return None
    value = _field(_content(observation), options.success_field, "success_field")
    if not isinstance(value, bool):
        raise OpenEnvOptionError(
            f"Option success_field={options.success_field!r} must name a true/false field of "
            f"the server's observations, but it holds {_as_text(value)[:80]!r}."
        )
    return value


def _field(observation: dict[str, Any], path: str, option: str = "observation_field") -> Any:
    value: Any = observation
    for i, key in enumerate(path.split(".")):
        if not isinstance(value, dict) or key not in value:
            where = ".".join(path.split(".")[:i]) or "the observation"
            keys = ", ".join(sorted(value)) if isinstance(value, dict) else type(value).__name__
            raise OpenEnvOptionError(
                f"Option {option}={path!r} does not fit the server's observations: "
                f"{where} has no field {key!r} (it has: {keys or 'no fields'})."
            )
        value = value[key]
    return value


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def reset_kwargs(seed: str, options: Options) -> dict[str, Any]:
    """Keyword arguments of the server's ``reset`` for trl-env ``seed``."""
    kwargs = dict(options.reset_args)
    if options.seed_mode == "int":
        kwargs[options.seed_key] = seed_to_int(seed)
    elif options.seed_mode == "str":
        kwargs[options.seed_key] = seed
    return kwargs


def seed_to_int(seed: str) -> int:
    """A stable non-negative int for a seed: itself when it is a number, else a hash of it.

    OpenEnv servers take ``seed: int``; trl-env seeds are strings such as ``train-3``. A hash
    (not Python's salted ``hash``) gives the same int in every process, so every member of a
    GRPO group starts from the same state.
    """
    if _DECIMAL.fullmatch(seed):
        return int(seed)
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:4], "big") & 0x7FFFFFFF
