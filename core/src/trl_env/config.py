"""``RolloutConfig``: every option of a batch of episodes, declared once.

Each field carries its help text in ``metadata["help"]``; the CLI flags, config-file keys, the
``--help`` defaults and the saved run config are generated from these declarations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from .backends.base import SamplingParams
from .errors import UsageError

DEFAULT_MAX_TURNS = 8


class Isolation(StrEnum):
    """Where env code runs."""

    THREAD = "thread"  # in this process, on a bounded pool of worker threads
    PROCESS = "process"  # each env in a worker process: survives crashes and GIL-bound code


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
    seed: int | None = _opt(None, "Seed of the sampling random stream; default: not seeded.")
    step_timeout: float | None = _opt(60.0, "Seconds an env call may take before it times out.")
    error_reward: float = _opt(0.0, "Reward of episodes that end in error or timeout.")
    system_prompt: str | None = _opt(None, "System prompt; default: the env's own.")
    max_env_chars: int = _opt(
        32_768, "Longest env text taken in one reply; longer text is cut with a visible marker."
    )
    env_isolation: Isolation = _opt(  # noqa: RUF009 - an enum member is immutable
        Isolation.THREAD,
        "Where env code runs: thread (fast) or process (survives crashes, hangs holding the GIL).",
    )
    env_workers: int = _opt(64, "Env calls that may run at once.")
    max_hung_workers: int = _opt(
        256, "Env workers stuck past their timeout that may be replaced before the run stops."
    )

    def __post_init__(self) -> None:
        if not isinstance(self.env_isolation, Isolation):
            try:
                object.__setattr__(self, "env_isolation", Isolation(self.env_isolation))
            except ValueError:
                choices = ", ".join(i.value for i in Isolation)
                raise UsageError(
                    f"Invalid rollout option: env_isolation is {self.env_isolation!r}; "
                    f"choose one of {choices}."
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
            (self.env_workers >= 1, "env_workers must be at least 1"),
            (self.max_hung_workers >= 0, "max_hung_workers must not be negative"),
        ]
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


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def option_help() -> dict[str, tuple[Any, str]]:
    """``{name: (default, help)}`` of every rollout option, for CLIs and docs."""
    return {f.name: (f.default, f.metadata["help"]) for f in fields(RolloutConfig)}
