"""Token sampling with the logprob of each draw under the distribution actually sampled from.

The convention is vLLM's ``processed_logprobs`` (what ``trl vllm-serve`` runs and TRL's
importance-sampling correction divides by): the repetition penalty on the raw logits, then
temperature, then the top-k, min-p and top-p filters, renormalized. The filters only keep or
drop tokens, and top-k and min-p commute (both keep the largest logits), so this is also vLLM's
order (temperature, min-p, top-k, top-p).
"""

from __future__ import annotations

import torch

from .base import SamplingParams

UNIFORM_BLOCK = 32  # decode steps whose random numbers a session hashes at once


def processed_logprobs(
    logits: torch.Tensor, params: SamplingParams, seen: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probabilities [B, V] of the distribution sampled from, given raw ``logits`` [B, V].

    ``seen`` [B, V] marks the ids already in each row (prompt and output): the ones the
    repetition penalty applies to. With temperature 0 the draw is the argmax and, as in vLLM,
    the logprobs are those of the penalized logits.
    """
    logits = logits.float()
    if params.repetition_penalty != 1.0 and seen is not None:
        # Positive logits are divided and negative ones multiplied (vLLM and transformers alike).
        penalized = torch.where(
            logits > 0, logits / params.repetition_penalty, logits * params.repetition_penalty
        )
        logits = torch.where(seen, penalized, logits)
    if params.temperature <= 0:
        return torch.log_softmax(logits, dim=-1)
    if params.temperature != 1.0:  # x / 1.0 == x exactly: skip the pass over the logits
        logits = logits / params.temperature
    if params.top_k and 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.min_p > 0.0:
        probs = logits.softmax(-1)
        floor = params.min_p * probs.amax(-1, keepdim=True)
        logits = logits.masked_fill(probs < floor, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        sorted_probs = sorted_logits.softmax(-1)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.log_softmax(logits, dim=-1)


def sample(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    seen: torch.Tensor | None = None,
    u: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``logits`` [B, V]; return (tokens [B], logprobs [B]).

    ``u`` [B] (float64 in [0, 1)) gives each row's uniform number, e.g. from :func:`uniforms`;
    without it they come from ``generator``.
    """
    logprobs = processed_logprobs(logits, params, seen)
    greedy = params.temperature <= 0
    tokens = logprobs.argmax(-1) if greedy else draw(logprobs.exp(), generator, u)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


_M32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2**32`` for ``x`` in [0, 2**32), in int64 without overflow (no wrap-around
    is relied on: products stay below 2**49)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finalizer: a bijection whose every output bit depends on every input
    bit."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def uniforms(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One uniform number in [0, 1) (float64, 53 bits) per row, a pure function of the row's
    ``keys`` (int64, non-negative) and ``counters`` (int64, e.g. the position being sampled).

    A counter-based stream: each row draws as if it had its own generator, whatever rows share
    the batch and in whatever order, with one vectorized op on any device (integer arithmetic is
    exact, so CPU and GPU give the same numbers).
    """
    k1, k2 = keys & _M32, (keys >> 32) & _M32
    c = counters & _M32
    a = _fmix32(_fmix32((k1 + _mul32(c, 0x9E3779B9)) & _M32) ^ k2)
    b = _fmix32(_fmix32((k2 + _mul32(c, 0x7F4A7C15) + 0x165667B1) & _M32) ^ k1)
    return ((a << 21) | (b >> 11)).to(torch.float64) * 2.0**-53


def draw(
    probs: torch.Tensor, generator: torch.Generator | None, u: torch.Tensor | None = None
) -> torch.Tensor:
    """One index per row of ``probs`` [B, V] (non-negative, rows need not sum to 1 exactly).

    Inverse-CDF sampling: one uniform number per row (``u`` [B], or drawn from ``generator``),
    located in the row's cumulative sums.
    It draws from the same distribution as ``torch.multinomial(probs, 1)``, which on CPU took
    ~1 ms for 32 x 1030 (a quarter of a decode step of the tiny model); this takes ~0.1 ms.
    Sums are in float64 so rounding does not move mass between neighbouring tokens.
    """
    cdf = probs.cumsum(-1, dtype=torch.float64)
    total = cdf[:, -1:]
    if u is None:
        u = torch.rand(total.shape, generator=generator, dtype=total.dtype, device=total.device)
    else:
        u = u.to(total.dtype).reshape(total.shape)
    # Strictly below the total, so some cdf[i] > u always exists; with right=True the index
    # found is the first whose cdf exceeds u, which never is a zero-probability token (its cdf
    # equals its predecessor's, which would have been found first).
    u = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)
