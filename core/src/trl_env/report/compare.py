"""Paired comparison of two runs on the seeds they share: B - A per seed, per env and overall.

Pairing on the seed removes the between-seed variance (some games are simply harder), so the
interval is that of the mean paired difference, not of a difference of two independent means.
A seed played several times in one file (repeated evals, a training run's groups) counts once,
with its mean reward.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .load import Source
from .stats import MeanCI, mean_ci


@dataclass
class Paired:
    """The paired differences of one group of shared seeds."""

    env: str
    mean_a: float
    mean_b: float
    diff: MeanCI
    wins: int  # seeds where B scored higher
    ties: int
    losses: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
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
        }


@dataclass
class Comparison:
    """Per env (sorted) and overall paired results, and the seeds only one side played."""

    groups: list[Paired]
    overall: Paired
    pairs: list[tuple[str, str, float, float]]  # env, seed, reward A, reward B
    only_a: int
    only_b: int


def _per_seed(source: Source, use_env: bool) -> dict[tuple[str, str], tuple[str, float]]:
    """(env or "", seed) -> (env label, mean reward) over the records that have a reward."""
    rewards: dict[tuple[str, str], list[float]] = {}
    labels: dict[tuple[str, str], str] = {}
    for rec in source.records:
        if rec["reward"] is None:
            continue
        key = (rec["env"] if use_env else "", rec["seed"])
        rewards.setdefault(key, []).append(rec["reward"])
        labels.setdefault(key, rec["env"])
    return {k: (labels[k], statistics.fmean(v)) for k, v in rewards.items()}


def _paired(env: str, pairs: list[tuple[float, float]]) -> Paired:
    diffs = [b - a for a, b in pairs]
    return Paired(
        env,
        statistics.fmean(a for a, _ in pairs),
        statistics.fmean(b for _, b in pairs),
        mean_ci(diffs),
        sum(d > 0 for d in diffs),
        sum(d == 0 for d in diffs),
        sum(d < 0 for d in diffs),
    )


def compare(a: Source, b: Source) -> Comparison:
    """Pair ``a`` and ``b`` by seed (and by env when every record of both names its env)."""
    use_env = all(r["env"] for r in a.records) and all(r["env"] for r in b.records)
    seeds_a, seeds_b = _per_seed(a, use_env), _per_seed(b, use_env)
    shared = sorted(seeds_a.keys() & seeds_b.keys())
    if not shared:
        raise UsageError(
            f"{a.path} and {b.path} share no seeds with a reward, so there is nothing to pair; "
            "compare evals of the same env on the same seeds."
        )
    pairs = []
    for key in shared:
        env = seeds_a[key][0] or seeds_b[key][0]
        pairs.append((env, key[1], seeds_a[key][1], seeds_b[key][1]))
    by_env: dict[str, list[tuple[float, float]]] = {}
    for env, _, ra, rb in pairs:
        by_env.setdefault(env, []).append((ra, rb))
    return Comparison(
        groups=[_paired(env, v) for env, v in sorted(by_env.items())],
        overall=_paired("all", [(ra, rb) for _, _, ra, rb in pairs]),
        pairs=pairs,
        only_a=len(seeds_a.keys() - seeds_b.keys()),
        only_b=len(seeds_b.keys() - seeds_a.keys()),
    )


def verdict(p: Paired) -> str:
    """Which run is ahead, in words, when the interval says so."""
    if p.diff.low is None or p.diff.high is None:
        return "too few seeds for an interval"
    if p.diff.low > 0:
        return "B higher"
    if p.diff.high < 0:
        return "A higher"
    return "no clear difference"
