"""``RolloutConfig``: every option of a batch of episodes, declared once.

Each field carries its help text in ``metadata["help"]``; the CLI flags, config-file keys, the
``--help`` defaults and the saved run config are generated from these declarations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from .backends.base import SamplingParams
from .errors import UsageError
from .redact import redact_text

DEFAULT_MAX_TURNS = 8


class Isolation(StrEnum):
    """The built-in places env code runs (``env_isolation`` also takes a plugin's host kind)."""

    THREAD = "thread"  # in this process, on a bounded pool of worker threads
    PROCESS = "process"  # each env in a worker process: survives crashes and GIL-bound code
    AUTO = "auto"  # what the env asks for (registry.declared_isolation), else thread


class FailedEpisodes(StrEnum):
    """What an episode failed by the infrastructure does to training."""

    MASK = "mask"  # left out: no tokens to train on, no reward in its group's baseline
    PENALIZE = "penalize"  # trained on with error_reward


class Credit(StrEnum):
    """Which tokens of an episode its outcome is credited to (docs/learning.md: the formula)."""

    EPISODE = "episode"  # GRPO's own: every token gets the advantage of the episode's reward
    TURN = "turn"  # each model turn gets the advantage of the rewards from that turn on


def _opt(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class RolloutConfig:
    """Limits, sampling and env isolation for a batch of episodes."""

    max_turns: int | None = _opt(
        None, "Turns per episode; default: the env's own max_turns, else 8."
    )
    max_new_tokens: int = _opt(256, "Tokens the model may write in one turn.")
    max_episode_tokens: int = _opt(
        4096, "Token budget of a whole episode, prompt included; never exceeded."
    )
    temperature: float = _opt(1.0, "Sampling temperature (0: greedy).")
    top_p: float = _opt(1.0, "Nucleus sampling mass (1: off).")
    top_k: int = _opt(0, "Sample among the k most likely tokens (0: off).")
    min_p: float = _opt(0.0, "Drop tokens below min_p times the top token's probability (0: off).")
    repetition_penalty: float = _opt(1.0, "Penalty on tokens already in the episode (1: off).")
    seed: int | None = _opt(
        None,
        "Seed of the sampling streams (one per episode and batch): the same seed replays a run "
        "whatever the env timings; default: not seeded.",
    )
    step_timeout: float | None = _opt(60.0, "Seconds an env call may take before it times out.")
    error_reward: float = _opt(
        0.0,
        "Reward of failed episodes that are trained on: the model's unparsable output, and "
        "infrastructure failures with failed_episodes=penalize.",
    )
    failed_episodes: FailedEpisodes = _opt(  # noqa: RUF009 - an enum member is immutable
        FailedEpisodes.MASK,
        "Episodes failed by the infrastructure (env crash or error, backend error, timeout): "
        "mask (left out of training: no tokens, no reward) or penalize (trained with "
        "error_reward).",
    )
    credit: Credit = _opt(  # noqa: RUF009 - an enum member is immutable
        Credit.EPISODE,
        "Credit of a model turn: episode (GRPO's: every turn gets the episode's advantage) or "
        "turn (the advantage of the rewards from that turn on, the env's reward read after "
        "each step; needs trl_env's CreditGRPOTrainer).",
    )
    env_special_tokens: bool = _opt(
        False,
        "Let env text (prompts, replies, tool results) become special tokens where it spells "
        "one; by default such strings stay plain text.",
    )
    system_prompt: str | None = _opt(None, "System prompt; default: the env's own.")
    max_env_chars: int = _opt(
        32_768, "Longest env text taken in one reply; longer text is cut with a visible marker."
    )
    env_isolation: str = _opt(
        Isolation.AUTO.value,
        "Where env code runs: thread (fast), process (survives crashes, hangs holding the GIL), "
        "or another registered env host kind (see `trl-env list`); auto: what the env asks for "
        "(textarena: process), else thread.",
    )
    env_workers: int = _opt(64, "Env calls that may run at once.")
    max_hung_workers: int = _opt(
        256,
        "Env threads stuck past their timeout (in one batch, or still stuck in the whole run) "
        "before the run stops; thread isolation.",
    )
    env_pass_env: tuple[str, ...] = _opt(
        (),
        "Environment variables env worker processes get beyond a safe allow-list (PATH, HOME, "
        "LANG, ...): secrets such as HF_TOKEN reach envs only when named here (repeatable NAME, or "
        "a comma list); process isolation.",
        flag="--env-pass-env",
        multiple=True,
    )
    env_user: str | None = _opt(
        None,
        "Run env worker processes as this user (a name or uid; the trainer must run as root); "
        "process isolation.",
    )
    env_max_episodes: int | None = _opt(
        None,
        "Episodes an env worker process plays before a fresh one replaces it (default: no "
        "limit); process isolation.",
    )

    env_servers: tuple[str, ...] = _opt(
        (),
        "Play the env's episodes on these `trl-env serve` servers (repeatable URL); each "
        "episode on one server, new ones on the server with the most free sessions.",
        flag="--env-server",
        multiple=True,
    )
    slot_timeout: float = _opt(
        300.0, "Seconds an episode waits for a free env server session before it fails."
    )

    def __post_init__(self) -> None:
        # one URL or name, a comma list, or a list of either (repeated flags, a config file)
        object.__setattr__(self, "env_servers", comma_list(self.env_servers))
        object.__setattr__(self, "env_pass_env", comma_list(self.env_pass_env))
        self._choice("failed_episodes", FailedEpisodes)
        self._choice("credit", Credit)
        if isinstance(self.env_isolation, Isolation):  # a kind's name is plain text
            object.__setattr__(self, "env_isolation", self.env_isolation.value)

    def _choice(self, name: str, kind: type[StrEnum]) -> None:
        """Field ``name`` as a member of ``kind``; another value is refused, naming the choices."""
        value = getattr(self, name)
        if isinstance(value, kind):
            return
        try:
            object.__setattr__(self, name, kind(value))
        except ValueError:
            choices = " or ".join(kind)
            raise UsageError(
                f"Invalid rollout option: {name} is {value!r}; choose {choices}."
            ) from None

    def validate(self) -> RolloutConfig:
        checks = [
            (self.max_turns is None or self.max_turns >= 1, "max_turns must be at least 1"),
            (self.max_new_tokens >= 1, "max_new_tokens must be at least 1"),
            (self.max_episode_tokens >= 2, "max_episode_tokens must be at least 2"),
            (self.temperature >= 0, "temperature must not be negative"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (self.top_k >= 0, "top_k must not be negative (0 turns it off)"),
            (0 <= self.min_p < 1, "min_p must be in [0, 1)"),
            (self.repetition_penalty > 0, "repetition_penalty must be positive"),
            (self.step_timeout is None or self.step_timeout > 0, "step_timeout must be positive"),
            (self.max_env_chars >= 1, "max_env_chars must be at least 1"),
            (
                isinstance(self.env_isolation, str) and bool(self.env_isolation),
                "env_isolation names a kind of env host (thread, process, or a plugin's)",
            ),
            (self.env_workers >= 1, "env_workers must be at least 1"),
            (self.slot_timeout >= 0, "slot_timeout must not be negative"),
            (self.max_hung_workers >= 0, "max_hung_workers must not be negative"),
            (
                self.env_max_episodes is None or self.env_max_episodes >= 1,
                "env_max_episodes must be at least 1",
            ),
        ]
        checks += [
            (
                _is_http_url(url),
                f"--env-server {redact_text(url)!r} is not an http:// or https:// URL",
            )
            for url in self.env_servers
        ]
        for spec in fields(self):  # NaN passes no comparison above but would pass a missing one
            value = getattr(self, spec.name)
            if isinstance(value, float) and not math.isfinite(value):
                checks.append((False, f"{spec.name} must be a finite number, not {value}"))
        for ok, message in checks:
            if not ok:
                raise UsageError(f"Invalid rollout option: {message}.")
        return self

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            self.temperature,
            self.top_p,
            self.top_k,
            self.min_p,
            self.repetition_penalty,
            self.seed,
        )


def comma_list(value: str | Iterable[str]) -> tuple[str, ...]:
    """``"A,B"``, ``["A", "B,C"]`` -> ``("A", "B", "C")``: a repeatable option's values."""
    items = [value] if isinstance(value, str) else list(value)
    return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number, or out of range
        return False


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def option_help() -> dict[str, tuple[Any, str]]:
    """``{name: (default, help)}`` of every rollout option, for CLIs and docs."""
    return {f.name: (f.default, f.metadata["help"]) for f in fields(RolloutConfig)}
