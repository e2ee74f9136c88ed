"""The ``vllm`` backend: a vLLM server over HTTP, or TRL's colocated vLLM engine.

:func:`make_backend` picks the mode the way TRL users run vLLM: a server
(``vllm_server_base_url``, or a trainer with ``vllm_mode="server"``) is driven by
:mod:`.vllm_server`; otherwise the trainer's own colocated engine (``trainer.vllm_generation``,
TRL's ``VLLMGeneration``) is driven here.

Colocated, vLLM keeps no per-row state between calls, so each call sends every row's whole id
history (vLLM's prefix cache makes that cheap) in one batched ``generate``. TRL fixes the
sampling settings (GRPOConfig) and reads the token limit and extra sampling fields from its
``VLLMGeneration`` at each call; a call sets them to the turn's limit and stop ids and puts them
back, so vLLM stops where the engine would instead of writing ``max_completion_length`` tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import UsageError
from .base import (
    Backend,
    BackendContext,
    RowHistories,
    Sample,
    SamplingParams,
    Turn,
    vocab_size_of,
)
from .vllm_server import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    ServerError,
    VLLMServerBackend,
    cut,
)

__all__ = ["VLLMBackend", "VLLMSession", "cut", "make_backend"]


def make_backend(context: BackendContext) -> Backend:
    """A server backend when a server URL is known, else the trainer's colocated engine."""
    options = context.options
    trainer = context.trainer
    generation = getattr(trainer, "vllm_generation", None)
    url = options.get("vllm_server_base_url") or _trainer_server_url(trainer, generation)
    # The ids the engine may answer: the trained model's, else the tokenizer's.
    vocab_size = vocab_size_of(getattr(trainer, "model", None), context.model, context.tokenizer)
    if url:
        try:
            return VLLMServerBackend.connect(
                str(url),
                timeout=_option(options, "vllm_server_timeout", DEFAULT_TIMEOUT, float),
                concurrency=_option(options, "vllm_server_concurrency", DEFAULT_CONCURRENCY, int),
                vocab_size=vocab_size,
            )
        except (ServerError, ValueError) as exc:
            raise UsageError(str(exc)) from exc  # a sentence naming the server and the fix
    if generation is None:
        raise UsageError(
            "The vllm backend needs a server (--vllm-server-base-url URL, from `trl vllm-serve`) "
            "or training with --use-vllm, whose vLLM engine it then uses."
        )
    if getattr(generation, "tensor_parallel_size", 1) > 1:
        # TRL gathers prompts across the tensor-parallel group in every generate call, a
        # collective that hangs unless all ranks generate in step; episodes do not.
        raise UsageError(
            "The vllm backend does not drive colocated vLLM with tensor parallelism "
            "(vllm_tensor_parallel_size > 1); use --vllm-mode server instead."
        )
    return VLLMBackend(generation, vocab_size)


def _option(options: dict[str, Any], name: str, default: Any, kind: type) -> Any:
    """A positive number among the backend options, or one sentence saying what is wrong."""
    value = options.get(name)
    if value is None:
        return default
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = 0
    if number <= 0:
        raise UsageError(f"The vllm backend's {name} must be a positive number, not {value!r}.")
    return number


def _trainer_server_url(trainer: Any, generation: Any) -> str | None:
    """The server a trainer with ``vllm_mode="server"`` talks to (TRL's ``VLLMGeneration``
    keeps its GRPOConfig address on every process).

    Requests go to it directly, not through ``VLLMGeneration.generate``, which gathers prompts
    across processes in every call: one process per rank talks to the server on its own.
    """
    if generation is None or getattr(generation, "mode", None) != "server":
        return None
    url = getattr(generation, "server_base_url", None)
    return url or f"http://{generation.server_host}:{generation.server_port}"


class VLLMBackend:
    """A backend over ``trainer.vllm_generation`` (TRL's ``VLLMGeneration``, colocated)."""

    def __init__(self, generation: Any, vocab_size: int | None = None) -> None:
        self.generation = generation
        self.vocab_size = vocab_size

    def session(self, params: SamplingParams) -> VLLMSession:
        _check_same_sampling(self.generation, params)
        return VLLMSession(self.generation, self.vocab_size)


def _check_same_sampling(generation: Any, params: SamplingParams) -> None:
    """Refuse settings that differ from the engine's: vLLM samples with the engine's own."""
    theirs = {
        "temperature": getattr(generation, "temperature", None),
        "top_p": getattr(generation, "top_p", None),
        # TRL and vLLM write "no top-k" as 0, -1 or None; so does trl-env (0)
        "top_k": max(getattr(generation, "top_k", 0) or 0, 0),
        "min_p": getattr(generation, "min_p", None) or 0.0,
        "repetition_penalty": getattr(generation, "repetition_penalty", None),
    }
    ours = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": max(params.top_k, 0),
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
    }
    differ = [
        f"{name} {ours[name]} (engine: {value})"
        for name, value in theirs.items()
        if value is not None and float(value) != float(ours[name])
    ]
    if differ:
        raise UsageError(
            "The colocated vLLM engine samples with the trainer's GRPOConfig settings, which "
            f"differ from the rollout's: {', '.join(differ)}; set them once, in GRPOConfig."
        )


class VLLMSession(RowHistories):
    """Whole-history requests, one batched ``generate`` per call."""

    def __init__(self, generation: Any, vocab_size: int | None = None) -> None:
        super().__init__()
        self.generation = generation
        self.vocab_size = vocab_size  # checked by the engine (check_sample)

    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        for turn in turns:
            self.take(turn)
        asked = [i for i, turn in enumerate(turns) if turn.max_new_tokens > 0]
        samples = [Sample() for _ in turns]  # a zero limit is an empty turn, as on a server
        if not asked:
            return samples
        prompts = [list(self.history[turns[i].row]) for i in asked]
        try:
            longest = max(turn.max_new_tokens for turn in turns)
            with _turn_settings(self.generation, longest, stop_ids):
                _, completions, logprobs, token_ids = self.generation.generate(
                    prompts=prompts, images=None, num_generations=1
                )
            if logprobs is None:
                raise ValueError("no logprobs came back (TRL's engine has logprobs=None)")
            if len(completions) != len(prompts) or len(logprobs) != len(prompts):
                raise ValueError(f"{len(completions)} completions for {len(prompts)} prompts")
        except Exception as exc:  # the whole batched call failed: each of its rows says why
            error = f"vLLM generation failed: {type(exc).__name__}: {exc}"
            for i in asked:
                samples[i] = Sample(error=" ".join(error.split()))
            return samples
        for k, (i, ids) in enumerate(zip(asked, completions, strict=True)):
            ranked = token_ids[k] if token_ids is not None else None
            lps = _sampled(list(ids), logprobs[k], ranked)
            sample = cut(list(ids), lps, turns[i].max_new_tokens, stop_ids)
            self.history[turns[i].row] += sample.ids
            samples[i] = sample
        return samples


@contextlib.contextmanager
def _turn_settings(generation: Any, max_tokens: int, stop_ids: frozenset[int]) -> Iterator[None]:
    """Within the block, TRL's engine writes at most ``max_tokens`` and stops at ``stop_ids``.

    ``ignore_eos`` keeps vLLM from also stopping at end-of-sequence ids the engine's stop set
    does not hold (the engine's set includes the model's own), so turns end exactly there.
    """
    saved = generation.max_completion_length, generation.generation_kwargs
    generation.max_completion_length = max_tokens
    generation.generation_kwargs = {
        **(saved[1] or {}),
        "stop_token_ids": sorted(stop_ids),
        "ignore_eos": True,
    }
    try:
        yield
    finally:
        generation.max_completion_length, generation.generation_kwargs = saved


def _sampled(ids: list[int], logprobs: list[Any], ranked_ids: list[Any] | None) -> list[float]:
    """The sampled tokens' logprobs out of TRL's per-position lists, ranked by probability.

    With ``logprobs=0`` each list holds the sampled token alone; with more, the sampled token
    sits at its rank, found through the matching token-id lists.
    """
    out = []
    for pos, (token, values) in enumerate(zip(ids, logprobs, strict=True)):
        where = 0
        if ranked_ids is not None and token in ranked_ids[pos]:
            where = ranked_ids[pos].index(token)
        value = values[where] if isinstance(values, list | tuple) else values
        out.append(float("nan") if value is None else float(value))
    return out
