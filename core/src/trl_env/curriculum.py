"""Curricula: env options that follow a schedule, by training step or by the env's recent reward.

A :class:`Curriculum` is a list of stages, each a set of env options laid over the env's own
options, and the rule that moves an env to its next stage. :class:`Progress` is where each env of
a run stands; it is saved in every checkpoint and restored on ``--resume``, so a resumed run
continues the schedule instead of starting it again.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .errors import UsageError


class Advance(StrEnum):
    """What moves an env to its next stage."""

    STEP = "step"  # the training step reaches the stage's entry in ``steps``
    REWARD = "reward"  # the mean reward of the env's last ``window`` episodes reaches ``threshold``


@dataclass(frozen=True)
class Curriculum:
    """Stages of env options (stage 0 first) and when to move on."""

    stages: tuple[Mapping[str, Any], ...]
    by: Advance = Advance.REWARD
    threshold: float = 0.5
    window: int = 32
    steps: tuple[int, ...] = ()  # by step: the step at which each stage after the first begins

    def __post_init__(self) -> None:
        if not isinstance(self.by, Advance):
            object.__setattr__(self, "by", _advance(self.by))
        object.__setattr__(self, "stages", tuple(dict(s) for s in self.stages))
        object.__setattr__(self, "steps", tuple(self.steps))
        problem = self._problem()
        if problem:
            raise UsageError(f"Invalid curriculum: {problem}.")

    def _problem(self) -> str:
        if len(self.stages) < 2:
            return "it needs at least two stages (a list of option sets under `stages`)"
        if not all(isinstance(s, dict) and s for s in self.stages):
            return "each stage is a non-empty mapping of env options, e.g. {boxes: 2}"
        if self.by is Advance.STEP:
            if len(self.steps) != len(self.stages) - 1:
                return (
                    f"by step, `steps` gives the step where each stage after the first begins: "
                    f"{len(self.stages) - 1} steps for {len(self.stages)} stages, not "
                    f"{len(self.steps)}"
                )
            steps = list(self.steps)
            if any(not isinstance(s, int) or s < 1 for s in steps) or steps != sorted(set(steps)):
                return f"`steps` must be increasing positive integers, not {list(self.steps)}"
        elif self.window < 1:
            return f"window is {self.window}; it must be at least 1 episode"
        return ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Curriculum:
        """From a config file's ``curriculum:`` mapping; unknown keys are refused by name."""
        known = {"stages", "by", "threshold", "window", "steps"}
        if not isinstance(data, Mapping):
            raise UsageError(f"The curriculum of {where} must be a mapping (stages, by, ...).")
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(
                f"Unknown curriculum key {unknown[0]!r} for {where}; "
                f"known: {', '.join(sorted(known))}."
            )
        try:
            return cls(
                stages=tuple(data.get("stages") or ()),
                by=data.get("by", Advance.REWARD),
                threshold=float(data.get("threshold", 0.5)),
                window=int(data.get("window", 32)),
                steps=tuple(data.get("steps") or ()),
            )
        except UsageError as exc:
            raise UsageError(f"{str(exc).rstrip('.')} (in {where}).") from None
        except (TypeError, ValueError) as exc:
            raise UsageError(f"Invalid curriculum for {where}: {exc}.") from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stages": [dict(s) for s in self.stages], "by": self.by.value}
        if self.by is Advance.STEP:
            out["steps"] = list(self.steps)
        else:
            out.update(threshold=self.threshold, window=self.window)
        return out


def _advance(value: Any) -> Advance:
    try:
        return Advance(value)
    except ValueError:
        raise UsageError(
            f"Invalid curriculum: `by` is {value!r}; choose {Advance.STEP.value!r} or "
            f"{Advance.REWARD.value!r}."
        ) from None


@dataclass
class _Track:
    """Where one env stands: its stage, and its rewards at that stage (the window)."""

    curriculum: Curriculum
    stage: int = 0
    recent: deque[float] = field(default_factory=deque)


class Progress:
    """The stage of every env with a curriculum; what a checkpoint saves and a resume restores."""

    def __init__(self, curricula: Mapping[str, Curriculum]) -> None:
        self.tracks = {
            name: _Track(c, recent=deque(maxlen=c.window)) for name, c in curricula.items()
        }
        self.history: list[dict[str, Any]] = []  # one entry per stage change: step, env, stage

    def __bool__(self) -> bool:
        return bool(self.tracks)

    def stage(self, env: str) -> int | None:
        track = self.tracks.get(env)
        return track.stage if track else None

    def options(self, env: str) -> dict[str, Any]:
        """The env options of ``env``'s current stage (empty when it has no curriculum)."""
        track = self.tracks.get(env)
        return dict(track.curriculum.stages[track.stage]) if track else {}

    def at_step(self, step: int) -> list[str]:
        """Move step-scheduled envs to the stage ``step`` is in; the envs that moved."""
        moved = []
        for name, track in self.tracks.items():
            if track.curriculum.by is not Advance.STEP:
                continue
            stage = sum(step >= s for s in track.curriculum.steps)
            if stage != track.stage:
                self._move(name, track, stage, step)
                moved.append(name)
        return moved

    def observe(self, rewards: Iterable[tuple[str, int | None, float]], step: int) -> list[str]:
        """Take the rewards of finished training episodes as ``(env, stage, reward)``; move each
        reward-scheduled env whose window is full and whose mean reached its threshold. Rewards
        of an earlier stage (episodes that began before a move) are not counted."""
        for name, stage, reward in rewards:
            track = self.tracks.get(name)
            if track is not None and stage == track.stage:
                track.recent.append(reward)
        moved = []
        for name, track in self.tracks.items():
            c = track.curriculum
            if c.by is not Advance.REWARD or track.stage == len(c.stages) - 1:
                continue
            if len(track.recent) == c.window and statistics.fmean(track.recent) >= c.threshold:
                self._move(name, track, track.stage + 1, step)
                moved.append(name)
        return moved

    def _move(self, name: str, track: _Track, stage: int, step: int) -> None:
        track.stage = stage
        track.recent.clear()
        self.history.append({"step": step, "env": name, "stage": stage})

    def state(self) -> dict[str, Any]:
        """A JSON-able snapshot (stages, reward windows, history)."""
        return {
            "stages": {n: t.stage for n, t in self.tracks.items()},
            "recent": {n: list(t.recent) for n, t in self.tracks.items()},
            "history": list(self.history),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state` of a checkpoint; envs it does not know keep stage 0."""
        for name, track in self.tracks.items():
            stage = state.get("stages", {}).get(name)
            if isinstance(stage, int) and 0 <= stage < len(track.curriculum.stages):
                track.stage = stage
                track.recent.clear()
                track.recent.extend(float(r) for r in state.get("recent", {}).get(name, []))
        self.history = [dict(h) for h in state.get("history", []) if isinstance(h, Mapping)]
