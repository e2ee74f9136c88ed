"""Exactness checks for a generation backend's sessions (trl-env's and third parties').

:class:`Transcript` drives a session and keeps every row's whole sequence; its
:meth:`~Transcript.worst_error` recomputes every sampled token's logprob from one forward pass
over that row's sequence, filtered by :func:`reference_logprob`: vLLM's processed logprob
written the plain way, independently of ``trl_env.backends.sampling``. :func:`rescored_error`
does the same for played episodes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Sample, SamplingParams, Session
from .stacks import turns


def reference_logprob(logits: Any, token: int, history: list[int], p: SamplingParams) -> float:
    """vLLM's processed logprob of ``token`` after ``history``, computed the plain way (fp64)."""
    import torch

    x = logits.double().clone()
    if p.repetition_penalty != 1.0:
        for t in set(history):
            x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
    if p.temperature > 0:
        x = x / p.temperature
    values, order = torch.sort(x, descending=True)
    n = len(order)
    if p.temperature > 0:
        if p.top_k:
            n = min(n, p.top_k)
        if p.min_p:  # probability at least min_p times the largest one
            n = min(n, int((values - values[0] >= math.log(p.min_p)).sum()))
        if p.top_p < 1.0:
            probs = torch.softmax(values[:n], 0).tolist()
            mass, m = 0.0, 0
            while mass < p.top_p and m < n:  # the smallest prefix that reaches top_p
                mass += probs[m]
                m += 1
            n = m
    kept = order[:n].tolist()
    if token not in kept:
        return -math.inf
    return float((x[token] - torch.logsumexp(values[:n], 0)).item())


@dataclass
class Transcript:
    """Every row's whole sequence as the session saw it, and where its sampled tokens are."""

    ids: dict[int, list[int]] = field(default_factory=dict)
    sampled: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # (index, logprob)
    calls: int = 0

    def generate(
        self,
        session: Session,
        rows: list[int],
        new_ids: list[list[int]],
        limits: list[int],
        stop_ids: frozenset[int] = frozenset(),
    ) -> list[Sample]:
        """``session.generate`` of these turns, each sample checked against its limit and stops."""
        samples = session.generate(turns(rows, new_ids, limits), stop_ids)
        self.calls += 1
        for row, new, limit, sample in zip(rows, new_ids, limits, samples, strict=True):
            assert not sample.error
            assert len(sample.ids) == len(sample.logprobs) <= limit
            if sample.stopped:
                assert sample.ids[-1] in stop_ids
            else:
                assert len(sample.ids) == limit and not set(sample.ids) & stop_ids
            seq = self.ids.setdefault(row, [])
            seq += new
            for token, lp in zip(sample.ids, sample.logprobs, strict=True):
                self.sampled.setdefault(row, []).append((len(seq), lp))
                seq.append(token)
        return samples

    def worst_error(self, model: Any, params: SamplingParams) -> float:
        """The largest difference between a reported logprob and its recomputation."""
        import torch

        worst = 0.0
        for row, seq in self.ids.items():
            with torch.no_grad():
                logits = model(torch.tensor([seq])).logits[0]
            for j, lp in self.sampled.get(row, []):
                ref = reference_logprob(logits[j - 1], seq[j], seq[:j], params)
                assert (ref == -math.inf) == (lp == -math.inf), (row, j)
                if ref != -math.inf:
                    worst = max(worst, abs(ref - lp))
        return worst


def rescored_error(model: Any, episodes: Any) -> float:
    """The largest difference between an episode's reported logprob of a sampled token and that
    token's log-probability in one forward pass of ``model`` over the whole episode (plain
    sampling: temperature 1, no filters)."""
    import torch

    worst = 0.0
    for ep in episodes:
        seq = ep.prompt_ids + ep.completion_ids
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([seq])).logits[0].float(), -1)
        start = len(ep.prompt_ids)
        for j, (lp, by_model) in enumerate(zip(ep.logprobs, ep.env_mask, strict=True)):
            if by_model:
                worst = max(worst, abs(logprobs[start + j - 1, seq[start + j]].item() - lp))
    return worst


def random_ids(rng: random.Random, vocab: int, n: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]
