"""TRL's async trainer reading a rollout buffer, as each supported TRL release reads it, for tests.

The consumer is TRL's own code (``RolloutQueueDataset``, ``FixedCountBatcher``,
``DataCollatorForRollout``, found through :func:`trl_env.trl_compat.async_grpo_module`); what
differs between releases is only the shape of what it yields: TRL 1.14-1.15 batch a micro-batch
as lists of samples and pack the loss inputs position by position (``input_ids``,
``completion_mask``, ``old_log_probs``), TRL 1.16 as rows with ``.samples`` and the trained
targets shifted and indexed (``shift_labels``, ``token_index``, ``old_log_probs`` per target).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any


def samples_of(rows: Iterable[Any]) -> list[Any]:
    """The samples of one micro-batch from ``FixedCountBatcher``, in order."""
    return [s for row in rows for s in (row.samples if hasattr(row, "samples") else row)]


def trained_targets(packed: dict[str, Any]) -> Counter[tuple[int, float]]:
    """``(token id, old logprob)`` of every trained target in the collator's first row."""
    if "shift_labels" in packed:  # TRL 1.16: targets shifted by one, their positions indexed
        targets = packed["shift_labels"][0][packed["token_index"][0]].tolist()
        logprobs = packed["old_log_probs"][0].tolist()
    else:  # TRL 1.14-1.15: per position, the trained ones under completion_mask
        mask = packed["completion_mask"][0].bool()
        targets = packed["input_ids"][0][mask].tolist()
        logprobs = packed["old_log_probs"][0][mask].tolist()
    return Counter(zip(targets, (round(v, 5) for v in logprobs), strict=True))


def expected_targets(samples: Iterable[Any]) -> Counter[tuple[int, float]]:
    """What :func:`trained_targets` must be for ``samples``: each masked-in id with its logprob."""
    expected: Counter[tuple[int, float]] = Counter()
    for s in samples:
        ids, mask, logprobs = s["input_ids"], s["completion_mask"], s["old_log_probs"]
        expected.update(
            (int(ids[p]), round(float(logprobs[p]), 5)) for p in range(1, len(ids)) if mask[p]
        )
    return expected
