"""Figures a reader wants first: episodes, mean reward with its interval, statuses, turns,
success; overall, per env, per curriculum stage and per training step."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .stats import MeanCI, mean_ci

# Optional per-episode counters of eval records, summed when present.
COUNTERS = (
    "sampled_tokens",
    "inserted_tokens",
    "env_seconds",
    "sanitized_chars",
    "capped_chars",
    "bridge_mismatches",
    "noncanonical_turns",
)


def rewards(records: list[dict[str, Any]]) -> list[float]:
    return [r["reward"] for r in records if r["reward"] is not None]


@dataclass(frozen=True)
class Rate:
    """Successes among the episodes whose env said whether they succeeded."""

    successes: int
    n: int

    @property
    def rate(self) -> float:
        return self.successes / self.n

    def to_dict(self) -> dict[str, float | int]:
        return {"successes": self.successes, "n": self.n, "rate": self.rate}


def success_rate(records: list[dict[str, Any]]) -> Rate | None:
    """None when no record says (envs without a ``success`` extra, older records)."""
    known = [r["success"] for r in records if r["success"] is not None]
    return Rate(sum(known), len(known)) if known else None


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and means over normalized records (see :func:`~.load.normalize`)."""
    turns = [r["turns"] for r in records if r["turns"] is not None]
    totals: dict[str, float] = {}
    for name in COUNTERS:
        values = [r[name] for r in records if isinstance(r.get(name), int | float)]
        if values:
            totals[name] = sum(values)
    return {
        "episodes": len(records),
        "reward": mean_ci(rewards(records)),
        "status": dict(Counter(r["status"] for r in records).most_common()),
        "turns_mean": statistics.fmean(turns) if turns else None,
        "turns_median": statistics.median(turns) if turns else None,
        "turns_max": max(turns) if turns else None,
        "success": success_rate(records),
        "totals": totals,
    }


# The figures of a set of episodes, by the same keys wherever they are shown: `trl-env eval`'s
# summary and --json, a training run's summary.json and closing table, `view` and `compare`.
# Every mean is over episodes (never a mean of batch means, which weighs a small batch's episodes
# more); `reward_low`/`reward_high` bound the mean reward's 95% t interval (None below two).
# TensorBoard and the step lines log the same per-episode means under `rollout/[LABEL/]env_reward`,
# `.../success` and `.../turns` (TRL owns the plain `reward`).
FIGURES = ("episodes", "reward", "reward_low", "reward_high", "success", "turns", "status")
# Drift counters, summed: how far a pipeline that re-tokenizes the text would have drifted from
# the ids actually used (trl-env itself never re-tokenizes, so they cost it nothing).
DRIFT = ("bridge_mismatches", "noncanonical_turns")
TOKENS = ("sampled_tokens", "inserted_tokens")


def figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The :data:`FIGURES` of ``records`` (eval or training records), with the token counts and
    drift counters summed: :func:`summarize`'s figures (what ``view`` shows) as plain values."""
    s = summarize(records)
    reward: MeanCI = s["reward"]
    rate: Rate | None = s["success"]
    totals = s["totals"]
    return {
        "episodes": s["episodes"],
        "reward": None if reward.n == 0 else reward.mean,
        "reward_low": reward.low,
        "reward_high": reward.high,
        "success": None if rate is None else rate.rate,
        "turns": s["turns_mean"],
        "status": s["status"],
        **{name: totals.get(name) for name in (*TOKENS, *DRIFT)},
    }


def by_env(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`figures` of each env's records (records without an env count as "")."""
    return {env: figures(recs) for env, recs in group_by(records, _env_key).items()}


def _env_key(rec: dict[str, Any]) -> str:
    return str(rec.get("env") or "")


def windows(records: list[dict[str, Any]], size: int) -> dict[str, dict[str, Any]]:
    """Figures of the first, best and last ``size`` training steps that played episodes, each
    with the (1-based) training steps its episodes were trained in.

    "best" is the window of consecutive steps with the highest per-episode mean reward: what a
    run reached, which the last window hides when the reward rises and falls back.
    """
    steps = group_by([r for r in records if r.get("step") is not None], _step_key)
    keys = list(steps)
    if not keys:
        return {}
    size = max(1, min(size, len(keys)))

    def window(lo: int) -> dict[str, Any]:
        span = keys[lo : lo + size]
        recs = [r for k in span for r in steps[k]]
        return {"steps": [int(span[0]), int(span[-1])], **figures(recs)}

    spans = [window(lo) for lo in range(len(keys) - size + 1)]
    best = max(spans, key=lambda w: -math.inf if w["reward"] is None else w["reward"])
    return {"first": spans[0], "best": best, "last": spans[-1]}


def evaluations(held_out: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Figures of the first and last held-out evaluation (``--eval-every``), each with the
    number of training steps done before it."""
    steps = group_by([r for r in held_out if r.get("step") is not None], _done_key)
    if not steps:
        return {}
    first, last = next(iter(steps)), list(steps)[-1]
    return {
        "first": {"step": int(first), **figures(steps[first])},
        "last": {"step": int(last), **figures(steps[last])},
    }


def group_by(
    records: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        groups[key(rec)].append(rec)
    return dict(sorted(groups.items()))


def per_step(records: list[dict[str, Any]]) -> list[tuple[int, MeanCI]]:
    """Mean reward of each training step, with its interval over that step's episodes."""
    steps = group_by([r for r in records if r["step"] is not None], _step_key)
    return [(int(k), mean_ci(rewards(v))) for k, v in steps.items()]


def step_of(rec: dict[str, Any]) -> int | None:
    """The step a record is shown at, counted as the CLI's lines, the closing table and
    TensorBoard count: a training episode at the (1-based) step it was trained in (its logged
    ``step`` is the steps done when it was played), a held-out one at the steps done before it
    ("after step N"). None for a record of no step (``trl-env eval``)."""
    step = rec.get("step")
    if step is None:
        return None
    return int(step) if rec.get("split") == "eval" else int(step) + 1


def _step_key(rec: dict[str, Any]) -> str:
    return f"{step_of(rec):012d}"  # sorts as a number


def _done_key(rec: dict[str, Any]) -> str:
    return f"{rec['step']:012d}"  # the steps done before a held-out evaluation


def per_step_by_env(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, MeanCI]]]:
    """:func:`per_step` of each env's records: one reward curve per env of a mixed run."""
    return {env: per_step(recs) for env, recs in group_by(records, lambda r: r["env"]).items()}


def has_stages(records: list[dict[str, Any]]) -> bool:
    return any(r["stage"] is not None for r in records)


def per_stage(records: list[dict[str, Any]]) -> dict[tuple[str, int | None], list[dict[str, Any]]]:
    """Records by (env, curriculum stage); stage None holds an env's episodes without one."""
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        groups[(rec["env"], rec["stage"])].append(rec)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][0], _stage_order(kv[0][1]))))


def _stage_order(stage: int | None) -> int:
    return -1 if stage is None else stage


def stage_options(records: list[dict[str, Any]]) -> str:
    """The env options a stage set, as ``key=value`` text; distinct settings joined by `` | ``."""
    texts = [
        " ".join(f"{k}={json.dumps(v)}" for k, v in r["stage_options"].items())
        for r in records
        if r["stage_options"]
    ]
    return " | ".join(dict.fromkeys(texts))


def stage_per_step(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """Per env with a curriculum, the highest stage it played at each training step."""
    out: dict[str, list[tuple[int, int]]] = {}
    staged = [r for r in records if r["stage"] is not None and r["step"] is not None]
    for env, recs in group_by(staged, lambda r: r["env"]).items():
        steps = group_by(recs, _step_key)
        out[env] = [(int(k), max(r["stage"] for r in v)) for k, v in steps.items()]
    return out


def status_shares(records: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per status that occurs, its share of each step's episodes."""
    steps = group_by([r for r in records if r["step"] is not None], _step_key)
    names = [s for s, _ in Counter(r["status"] for r in records).most_common()]
    return {
        name: [(int(k), sum(r["status"] == name for r in v) / len(v)) for k, v in steps.items()]
        for name in names
    }


def run_key(rec: dict[str, Any]) -> str:
    """One text per distinct ``run`` metadata (records appended by several evals differ)."""
    return json.dumps(rec["run"], sort_keys=True) if rec["run"] else ""


def runs(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """The distinct ``run`` metadata of the records, in order of appearance, with counts."""
    counts: Counter[str] = Counter()
    first: dict[str, dict[str, Any]] = {}  # as written, keys in their order
    for rec in records:
        if rec["run"]:
            key = run_key(rec)
            counts[key] += 1
            first.setdefault(key, rec["run"])
    return [(first[k], n) for k, n in counts.items()]


def run_label(run: dict[str, Any]) -> str:
    """A short name for a run: model, processor, env and time when known."""
    parts = [str(run[k]) for k in ("model", "processor", "env") if run.get(k)]
    if run.get("time"):
        parts.append(str(run["time"]))
    return " / ".join(parts) or "run"
