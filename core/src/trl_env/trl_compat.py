"""TRL's moving parts, imported in one place: the supported range and the async GRPO names.

TRL moves its async GRPO trainer as it matures. Through 1.17 it lives in
``trl.experimental.async_grpo`` (``async_grpo_config``, ``async_grpo_trainer``,
``async_rollout_worker``...). TRL 1.18's release notes say those submodules are gone:
``AsyncGRPOConfig`` and ``AsyncGRPOTrainer`` are imported from ``trl``, the rollout loop lives in
``trl.trainer.async_grpo_trainer``, and ``from trl.experimental.async_grpo import ...`` still works
with a ``FutureWarning`` until 2.0. Nothing else in trl-env names a TRL module of that trainer:
it asks here, which tries the stable place first and the experimental one second, and builds its
samples from its own dataclass where TRL's ``RolloutSample`` cannot be imported.

Reading the range needs no import of trl (``importlib.metadata``), so the CLI can check it before
anything heavy loads.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from .errors import UsageError

__all__ = [
    "EXCLUDED",
    "LOWEST",
    "NEXT_UNSUPPORTED",
    "REQUIREMENT",
    "RolloutSample",
    "async_grpo",
    "async_grpo_module",
    "check_trl",
    "installed_trl",
    "sample_class",
    "trl_problem",
    "truncation_bias",
    "turn_credit_problem",
]

# The lowest release `make compat` ran against, and the first release trl-env does not claim:
# 1.14-1.16 are tested; 1.17-1.19 are the documented forward path (docs/compatibility.md).
LOWEST = (1, 14)
NEXT_UNSUPPORTED = (1, 20)
# Releases inside the range that failed `make compat`: TRL 1.15.0's GRPOTrainer scores tokens
# with a Triton kernel it cannot load without Triton (a CPU machine), so no step trains there.
EXCLUDED = ((1, 15),)
# What core/pyproject.toml declares (a test checks that the two agree).
REQUIREMENT = "trl>={}.{}{},<{}.{}".format(
    *LOWEST, "".join(f",!={a}.{b}.*" for a, b in EXCLUDED), *NEXT_UNSUPPORTED
)

# Where each name has lived, newest first (the stable home of TRL 1.18+, then the experimental).
_TRAINER_HOMES = ("trl", "trl.experimental.async_grpo")
_LOOP_HOMES = ("trl.trainer.async_grpo_trainer", "trl.experimental.async_grpo.async_grpo_trainer")
_SAMPLE_HOMES = (
    "trl.trainer.async_grpo_trainer",
    "trl.experimental.async_grpo.async_rollout_worker",
)


@dataclass
class RolloutSample:
    """One trained sequence, with the fields of TRL's ``RolloutSample`` (1.14-1.17): TRL's
    trainer reads them by attribute, so this stands in where TRL's class cannot be imported."""

    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    input_ids: Any  # prompt + completion ids
    completion_mask: Any  # 1 on sampled tokens, 0 on context and env tokens
    old_log_probs: Any  # the sampled logprobs, 0 where masked
    advantage: float
    model_version: int  # the policy version when the group was dispatched
    group_id: int
    metrics: dict[str, float]
    enqueued_at: float | None = None


_FIELDS = tuple(f.name for f in dataclasses.fields(RolloutSample))


def _minor(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string ("1.18.0rc1" -> (1, 18)); None if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def installed_trl() -> str | None:
    """The installed TRL's version (read from its metadata, trl not imported); None if absent."""
    try:
        return metadata.version("trl")
    except metadata.PackageNotFoundError:
        return None


def trl_problem(version: str | None) -> str | None:
    """One sentence when ``version`` of TRL is outside what trl-env supports; None when inside."""
    if version is None:
        return None  # a missing trl is said by the command that needs it
    minor = _minor(version)
    if minor is not None and LOWEST <= minor < NEXT_UNSUPPORTED and minor not in EXCLUDED:
        return None
    spec = REQUIREMENT.removeprefix("trl")
    return (
        f"trl-env 0.2 supports TRL {spec}, and TRL {version} is installed: "
        f'pip install "trl{spec}" (docs/compatibility.md lists what was tested).'
    )


# From this release on, TRL scores sampled tokens under the top-k/top-p/min-p truncation they
# were drawn with, replaying the kept set (TRL issue 6789); before it, under the full softmax.
TRUNCATION_REPLAYED = (1, 17)


def truncation_bias(version: str | None, sampling: dict[str, Any]) -> str | None:
    """One sentence when ``sampling`` truncates the distribution (``top_p`` < 1, ``top_k`` > 0,
    ``min_p`` > 0) and TRL ``version`` scores tokens under the full one; None otherwise."""
    minor = _minor(version) if version else None
    if minor is None or minor >= TRUNCATION_REPLAYED:
        return None
    on = {"top_p": lambda v: v < 1, "top_k": lambda v: v > 0, "min_p": lambda v: v > 0}
    given = [f"{k}={sampling[k]}" for k, cut in on.items() if sampling.get(k) and cut(sampling[k])]
    if not given:
        return None
    return (
        f"{' and '.join(given)} samples from a truncated distribution (the logprobs returned "
        f"are that distribution's), but TRL {version} scores the tokens under the full one, so "
        "the policy gradient and its importance ratio (below 1 even on-policy) are biased; "
        "TRL 1.17 replays the truncation (TRL issue 6789), or sample without top_p, top_k and "
        "min_p."
    )


def check_trl() -> None:
    """Raise a one-sentence :class:`UsageError` when the installed TRL is out of range."""
    problem = trl_problem(installed_trl())
    if problem:
        raise UsageError(problem)


def _module(home: str) -> Any:
    """TRL's module ``home``, or None where this TRL has no such module; a :class:`UsageError`
    naming the package when the module is there but needs one that is not installed (TRL
    1.14-1.15's async GRPO imports aiohttp, from its ``vllm`` extra)."""
    try:
        return importlib.import_module(home)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == "trl" or missing.startswith("trl."):
            return None  # moved or removed in this TRL's layout
        raise UsageError(
            f"TRL {installed_trl()}'s {home} needs {missing}, which is not installed "
            f"(pip install {missing})."
        ) from exc
    except ImportError:  # a name moved between TRL's modules
        return None


def _first(homes: tuple[str, ...], *names: str) -> tuple[Any, ...] | None:
    """``names`` from the first module of ``homes`` that has them all; None when none has."""
    for home in homes:
        module = _module(home)
        if module is None:
            continue
        found = [getattr(module, name, None) for name in names]
        if all(item is not None for item in found):
            return tuple(found)
    return None


def async_grpo() -> tuple[Any, Any]:
    """``(AsyncGRPOConfig, AsyncGRPOTrainer)``: from ``trl`` (1.18+), else the experimental
    package; a :class:`UsageError` when this TRL has neither, or takes no rollout worker."""
    found = _first(_TRAINER_HOMES, "AsyncGRPOConfig", "AsyncGRPOTrainer")
    if found is None:
        raise UsageError(
            f"TRL {installed_trl()} has no AsyncGRPOTrainer (neither `from trl import` nor "
            "trl.experimental.async_grpo); train without --async or install a TRL that has it."
        )
    config, trainer = found
    if "rollout_worker" not in inspect.signature(trainer).parameters:
        raise UsageError(
            f"TRL {installed_trl()}'s AsyncGRPOTrainer takes no rollout_worker, through which "
            "trl-env feeds it episodes; train without --async, or with TRL 1.14-1.17."
        )
    return config, trainer


def async_grpo_module() -> Any:
    """The module of TRL's async rollout loop (the queue dataset, batchers and collator)."""
    for home in _LOOP_HOMES:
        module = _module(home)
        if module is not None and hasattr(module, "RolloutQueueDataset"):
            return module
    raise UsageError(f"TRL {installed_trl()} has no async GRPO rollout loop.")


# What credit per turn (trl_env.training.credit) takes from GRPOTrainer, 1.14-1.16 read: it
# wraps the first two, and the loss must take a (B, T) advantage as it is (a one-dimensional
# one is unsqueezed there, a guard its source spells `advantages.dim()`).
_CREDIT_METHODS = ("_calculate_rewards", "_generate_and_score_completions", "_compute_loss")
_PER_TOKEN_GUARD = "advantages.dim()"


def turn_credit_problem(trainer: type) -> str | None:
    """One sentence when this TRL's GRPOTrainer (``trainer`` or its subclass) cannot take an
    advantage per token as trl-env's credit per turn gives it; None when it can, as far as its
    methods and the loss's source tell."""
    missing = [name for name in _CREDIT_METHODS if not callable(getattr(trainer, name, None))]
    if missing:
        return (
            f"credit='turn' needs GRPOTrainer.{missing[0]}, which TRL {installed_trl()} does not "
            "have; train with credit='episode' (docs/compatibility.md)."
        )
    try:
        source = inspect.getsource(getattr(trainer, "_compute_loss"))  # noqa: B009 - any type
    except (OSError, TypeError):  # no source to read (a frozen install): the methods must do
        return None
    if _PER_TOKEN_GUARD not in source:
        return (
            f"credit='turn' needs a GRPOTrainer loss that takes an advantage per token, and TRL "
            f"{installed_trl()}'s does not; train with credit='episode' (docs/compatibility.md)."
        )
    return None


@functools.cache
def sample_class() -> type[Any]:
    """TRL's ``RolloutSample`` where it can be imported with the fields trl-env fills (all of
    them required or defaulted as known), else :class:`RolloutSample` of this module."""
    try:
        found = _first(_SAMPLE_HOMES, "RolloutSample")
    except UsageError:  # TRL's module needs a missing package: the trainer's import says which
        found = None
    if found is not None:
        cls = found[0]
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            fields = {f.name: f for f in dataclasses.fields(cls)}
            required = {
                name
                for name, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            }
            if required <= set(_FIELDS) <= set(fields):
                return cls
    return RolloutSample
