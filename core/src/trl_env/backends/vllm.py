"""Generation through TRL's own vLLM engine (``GRPOConfig(use_vllm=True)``, server or colocate).

vLLM keeps no per-episode state between calls, so each turn sends every row's whole id history;
vLLM's prefix cache makes that cheap. TRL fixes the per-call token limit
(``max_completion_length``) and stops only on EOS, so each sample is cut here at the first stop
token and at the row's own limit; the cut tokens were sampled after the kept ones, so the kept
ids and logprobs are exactly what a call with those limits would have drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Sample, SamplingParams


class VLLMBackend:
    """A backend over ``trainer.vllm_generation`` (TRL's ``VLLMGeneration``)."""

    def __init__(self, generation: Any) -> None:
        self.generation = generation

    def session(self, params: SamplingParams) -> VLLMSession:
        # Sampling settings live in TRL's GRPOConfig; trl-env passes the same ones to the loss.
        return VLLMSession(self.generation)


class VLLMSession:
    """Whole-history requests, one batched call per turn."""

    def __init__(self, generation: Any) -> None:
        self.generation = generation
        self.history: dict[int, list[int]] = {}

    def generate(
        self,
        rows: Sequence[int],
        new_ids: Sequence[list[int]],
        max_new_tokens: Sequence[int],
        stop_ids: frozenset[int],
    ) -> list[Sample]:
        self.history = {r: self.history.get(r, []) for r in rows}
        for row, ids in zip(rows, new_ids, strict=True):
            self.history[row] += ids
        prompts = [self.history[r] for r in rows]
        _, completions, logprobs, _ = self.generation.generate(
            prompts=prompts, images=None, num_generations=1
        )
        samples = []
        for row, ids, lps, limit in zip(rows, completions, logprobs, max_new_tokens, strict=True):
            sample = cut(list(ids), [_first(lp) for lp in lps], limit, stop_ids)
            self.history[row] += sample.ids
            samples.append(sample)
        return samples

    def close(self) -> None:
        self.history.clear()


def cut(ids: list[int], logprobs: list[float], limit: int, stop_ids: frozenset[int]) -> Sample:
    """Keep ids up to and including the first stop token, and at most ``limit`` of them."""
    end = next((i + 1 for i, t in enumerate(ids) if t in stop_ids), None)
    stopped = end is not None and end <= limit
    keep = end if stopped else min(limit, len(ids))
    return Sample(ids[:keep], logprobs[:keep], stopped)


def _first(values: Any) -> float:
    """The sampled token's logprob (TRL returns a list per position, the sampled one first)."""
    value = values[0] if isinstance(values, list | tuple) else values
    return float("nan") if value is None else float(value)
