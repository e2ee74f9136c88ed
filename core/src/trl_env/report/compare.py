"""Paired comparison of two runs on the seeds they share: B - A per seed, per env and overall.

Pairing on the seed removes the between-seed variance (some games are simply harder), so the
interval is that of the mean paired difference, not of a difference of two independent means.
A seed played several times in one file (repeated evals, a training run's groups) counts once,
with its mean reward. When both runs had curricula, a seed pairs only with the same seed at the
same stage (a bigger board is another game), and each (env, stage) is a group of its own.

Beside the paired difference, each group carries each side's own figures over all its episodes
of that group (:func:`~.summary.figures`: per-episode means with their intervals), the numbers
``view``, ``eval`` and a training run's ``summary.json`` show for the same episodes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .load import Source
from .stats import MeanCI, mean_ci
from .summary import Rate, figures, has_stages

Key = tuple[str, int | None, str]  # env ("" when not paired on it), stage (or None), seed


@dataclass
class Played:
    """One side's episodes of one seed: env label, stage, mean reward and success counts."""

    env: str
    stage: int | None
    reward: float
    successes: int
    known: int  # episodes whose env said whether they succeeded


@dataclass
class Paired:
    """The paired differences of one group of shared seeds."""

    env: str
    stage: int | None
    mean_a: float
    mean_b: float
    diff: MeanCI
    wins: int  # seeds where B scored higher
    ties: int
    losses: int
    success_a: Rate | None  # over the paired seeds' episodes; None when no episode says
    success_b: Rate | None
    # each side's figures over all its episodes of the group, shared seeds or not
    figures_a: dict[str, Any] = field(default_factory=dict)
    figures_b: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        env = self.env or "(unnamed)"
        return env if self.stage is None else f"{env} · stage {self.stage}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "stage": self.stage,
            "n": self.diff.n,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "mean_diff": self.diff.mean,
            "low": self.diff.low,
            "high": self.diff.high,
            "stdev": self.diff.stdev,
            "b_higher": self.wins,
            "ties": self.ties,
            "a_higher": self.losses,
            "success_a": self.success_a.to_dict() if self.success_a else None,
            "success_b": self.success_b.to_dict() if self.success_b else None,
            "a": self.figures_a,
            "b": self.figures_b,
        }


@dataclass
class Comparison:
    """Per env (sorted), per (env, stage) and overall paired results, and the seeds only one
    side played."""

    groups: list[Paired]
    stages: list[Paired]  # empty unless both runs had curricula
    overall: Paired
    pairs: list[tuple[str, str, float, float]]  # env, seed, reward A, reward B
    only_a: int
    only_b: int


def _per_seed(records: list[dict[str, Any]], use_env: bool, use_stage: bool) -> dict[Key, Played]:
    """Each seed's episodes that have a reward, by :data:`Key`."""
    played: dict[Key, list[dict[str, Any]]] = {}
    for rec in records:
        if rec["reward"] is not None:
            key = (rec["env"] if use_env else "", rec["stage"] if use_stage else None, rec["seed"])
            played.setdefault(key, []).append(rec)
    out = {}
    for key, recs in played.items():
        known = [r["success"] for r in recs if r["success"] is not None]
        out[key] = Played(
            recs[0]["env"],
            key[1],
            statistics.fmean(r["reward"] for r in recs),
            sum(known),
            len(known),
        )
    return out


def _rate(played: list[Played]) -> Rate | None:
    known = sum(p.known for p in played)
    return Rate(sum(p.successes for p in played), known) if known else None


def _paired(env: str, stage: int | None, pairs: list[tuple[Played, Played]]) -> Paired:
    diffs = [b.reward - a.reward for a, b in pairs]
    return Paired(
        env,
        stage,
        statistics.fmean(a.reward for a, _ in pairs),
        statistics.fmean(b.reward for _, b in pairs),
        mean_ci(diffs),
        sum(d > 0 for d in diffs),
        sum(d == 0 for d in diffs),
        sum(d < 0 for d in diffs),
        _rate([a for a, _ in pairs]),
        _rate([b for _, b in pairs]),
    )


def held_out_change(held_out: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One run's last held-out evaluation against its first, paired by env and seed: the mean
    of the per-seed differences with its 95% t interval, and how many seeds rose, tied and fell.
    None with fewer than two evaluations. A seeded run's evaluations draw the same random
    numbers (docs/reproducibility.md), so a seed's difference is the model's change."""
    steps = sorted({r["step"] for r in held_out if r.get("step") is not None})
    if len(steps) < 2:
        return None
    first, last = (
        _per_seed([r for r in held_out if r.get("step") == step], True, False)
        for step in (steps[0], steps[-1])
    )
    shared = sorted(first.keys() & last.keys(), key=repr)
    if not shared:
        return None
    p = _paired("", None, [(first[k], last[k]) for k in shared])
    return {
        "from_step": steps[0],
        "to_step": steps[-1],
        **p.diff.to_dict(),
        "higher": p.wins,
        "equal": p.ties,
        "lower": p.losses,
    }


def episodes(source: Source, held_out: bool) -> list[dict[str, Any]]:
    """The records to pair: a training run's training episodes, or with ``held_out`` those of
    its last held-out evaluation (an eval file's records either way)."""
    if not held_out or not source.is_run:
        return source.records
    if not source.held_out:
        raise UsageError(
            f"{source.path} has no held-out episodes (train with --eval-every N to play them)."
        )
    steps = [r["step"] for r in source.held_out if r["step"] is not None]
    last = max(steps, default=None)
    return [r for r in source.held_out if r["step"] == last]


def compare(a: Source, b: Source, *, held_out: bool = False) -> Comparison:
    """Pair ``a`` and ``b`` by seed (and by env when every record of both names its env, and by
    curriculum stage when both had one); ``held_out``: see :func:`episodes`."""
    recs_a, recs_b = episodes(a, held_out), episodes(b, held_out)
    use_env = all(r["env"] for r in recs_a) and all(r["env"] for r in recs_b)
    use_stage = has_stages(recs_a) and has_stages(recs_b)
    seeds_a, seeds_b = _per_seed(recs_a, use_env, use_stage), _per_seed(recs_b, use_env, use_stage)
    shared = sorted(
        seeds_a.keys() & seeds_b.keys(), key=lambda k: (k[0], -1 if k[1] is None else k[1], k[2])
    )
    if not shared:
        raise UsageError(
            f"{a.path} and {b.path} share no seeds with a reward, so there is nothing to pair; "
            "compare evals of the same env on the same seeds."
        )
    matched = []
    for key in shared:
        pa, pb = seeds_a[key], seeds_b[key]
        pa.env = pb.env = pa.env or pb.env  # one side of an old file may not name it
        matched.append((key, pa, pb))
    by_env: dict[str, list[tuple[Played, Played]]] = {}
    by_stage: dict[tuple[str, int], list[tuple[Played, Played]]] = {}
    for key, pa, pb in matched:
        by_env.setdefault(pa.env, []).append((pa, pb))
        if key[1] is not None:
            by_stage.setdefault((pa.env, key[1]), []).append((pa, pb))
    label_a = _labeller(seeds_a, use_env, use_stage)
    label_b = _labeller(seeds_b, use_env, use_stage)

    def group(
        env: str, stage: int | None, pairs: list[tuple[Played, Played]], every: bool = False
    ) -> Paired:
        paired = _paired(env, stage, pairs)
        paired.figures_a = figures(recs_a if every else _members(recs_a, label_a, env, stage))
        paired.figures_b = figures(recs_b if every else _members(recs_b, label_b, env, stage))
        return paired

    return Comparison(
        groups=[group(env, None, v) for env, v in sorted(by_env.items())],
        stages=[group(env, stage, v) for (env, stage), v in sorted(by_stage.items())],
        overall=group("all", None, [(pa, pb) for _, pa, pb in matched], every=True),
        pairs=[(pa.env, key[2], pa.reward, pb.reward) for key, pa, pb in matched],
        only_a=len(seeds_a.keys() - seeds_b.keys()),
        only_b=len(seeds_b.keys() - seeds_a.keys()),
    )


def _labeller(
    seeds: dict[Key, Played], use_env: bool, use_stage: bool
) -> Callable[[dict[str, Any]], tuple[str, int | None]]:
    """The (env, stage) group of a record: its env label, or when the runs are paired on the
    seed alone, the label its seed was grouped under."""

    def label(rec: dict[str, Any]) -> tuple[str, int | None]:
        key = (rec["env"] if use_env else "", rec["stage"] if use_stage else None, rec["seed"])
        played = seeds.get(key)
        return (played.env if played else rec["env"], key[1])

    return label


def _members(
    records: list[dict[str, Any]],
    label: Callable[[dict[str, Any]], tuple[str, int | None]],
    env: str,
    stage: int | None,
) -> list[dict[str, Any]]:
    """The records of group (env, stage); stage None: all of the env's."""
    return [r for r in records if label(r)[0] == env and (stage is None or label(r)[1] == stage)]


def verdict(p: Paired) -> str:
    """Which run is ahead, in words, when the interval says so."""
    if p.diff.low is None or p.diff.high is None:
        return "too few seeds for an interval"
    if p.diff.low > 0:
        return "B higher"
    if p.diff.high < 0:
        return "A higher"
    return "no clear difference"
