"""Token sampling with the logprob of each draw under the distribution actually sampled from."""

from __future__ import annotations

import torch

from .base import SamplingParams


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``logits`` [B, V]; return (tokens [B], logprobs [B])."""
    logits = logits.float()
    if params.temperature <= 0:
        return logits.argmax(-1), torch.zeros(logits.shape[0])
    logits = logits / params.temperature
    if params.top_k and 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    logprobs = torch.log_softmax(logits, dim=-1)
    tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
