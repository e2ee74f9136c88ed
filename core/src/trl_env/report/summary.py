"""Figures a reader wants first: episodes, mean reward with its interval, statuses, turns."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
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
        "totals": totals,
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
    steps = group_by([r for r in records if r["step"] is not None], lambda r: f"{r['step']:012d}")
    return [(int(k), mean_ci(rewards(v))) for k, v in steps.items()]


def status_shares(records: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per status that occurs, its share of each step's episodes."""
    steps = group_by([r for r in records if r["step"] is not None], lambda r: f"{r['step']:012d}")
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
