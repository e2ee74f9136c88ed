"""Generation with a transformers model; every row of a session keeps its KV cache in one buffer.

Layout. Each row owns a *slot* of a per-layer buffer ``[slots, kv_heads, capacity, head_dim]``
and stores its tokens contiguously from column 0, so a token's column is its position in the
conversation. There are no padding holes: a row's new tokens are written at its own length
(a scatter per layer), whatever the other rows hold. The attention masks are built here from
those positions (causal, and the window for sliding-window layers), which is what makes batched
generation exact with sliding windows: a window counts the row's own tokens, never another row's
padding. Sliding-window layers keep their whole history (the mask does the windowing).

A call names any rows: new rows take a free slot, absent rows keep theirs untouched. The forward
runs over the contiguous range of slots spanning the called rows; slots in that range that are
not called are inert (they are fed padding whose keys land past their length, to be overwritten
by their next real token, and whose outputs are ignored). No cache is copied per turn or per
token: buffers grow by doubling, only when a row outgrows them.

A call prefills each row's new tokens (left-aligned to the chunk's end, so the last column holds
every row's last token), then decodes one token per row per step. The one host sync per step is
the stop check. The last sampled token of a turn is fed at the start of the row's next call.
"""

from __future__ import annotations

import contextlib
import heapq
import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..errors import UsageError
from .base import BackendContext, Sample, SamplingParams
from .sampling import sample

FULL, SLIDING = "full_attention", "sliding_attention"

log = logging.getLogger("trl_env")


class TransformersBackend:
    """A :class:`~trl_env.backends.base.Backend` over a ``PreTrainedModel`` (e.g. the trainer's).

    ``compile`` runs the decode steps through ``torch.compile`` (``True``: the default
    inductor backend, or a backend's name); meant for GPUs, where a step of a small model is
    mostly kernel-launch overhead. The first steps pay for the compilation.
    """

    def __init__(
        self, model: Any, pad_token_id: int | None = None, compile: bool | str = False
    ) -> None:
        self.model = model
        config_pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (config_pad or 0)
        self.step: CompiledStep | None = None
        if compile:
            self.step = CompiledStep(model, "inductor" if compile is True else str(compile))

    def session(self, params: SamplingParams) -> TransformersSession:
        return TransformersSession(self.model, self.pad_token_id, params, self.step)


def make_backend(context: BackendContext) -> TransformersBackend:
    """The ``transformers`` backend: the context's model, or the trainer's unwrapped model."""
    model, tokenizer = context.model, context.tokenizer
    if model is None and context.trainer is not None:
        trainer = context.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = tokenizer or getattr(trainer, "processing_class", None)
    if model is None:
        raise UsageError("The transformers backend needs a model or a trainer to generate with.")
    compile = context.options.get("compile", False)
    return TransformersBackend(model, getattr(tokenizer, "pad_token_id", None), compile)


class CompiledStep:
    """The model compiled for decode steps (shapes marked dynamic: one graph for every batch
    and length); after a failure it stays off and the eager model is used."""

    def __init__(self, model: Any, backend: str) -> None:
        self.model, self.backend = model, backend
        self.compiled: Any = None
        self.failed = ""

    def __call__(self, **inputs: Any) -> Any:
        """The model's output, or None when compiling or running the compiled step failed."""
        if self.failed:
            return None
        try:
            if self.compiled is None:
                self.compiled = torch.compile(self.model, backend=self.backend, dynamic=True)
            return self.compiled(**inputs)
        except Exception as exc:  # the eager model reruns the step: its writes are the same
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("torch.compile failed for the decode step; running eagerly: %s", exc)
            return None


@contextlib.contextmanager
def _inference(model: Any, attention: str) -> Iterator[None]:
    """Eval mode, no gradients, and ``attention`` as the attention implementation, then back."""
    was_training = model.training
    config = model.config.get_text_config()
    implementation = getattr(config, "_attn_implementation", None) or attention
    model.eval()
    if implementation != attention:
        model.set_attn_implementation(attention)
    try:
        with torch.no_grad():
            yield
    finally:
        if implementation != attention:
            model.set_attn_implementation(implementation)
        model.train(was_training)


def generation_attention(model: Any) -> str:
    """The attention implementation generation runs with: one that takes the masks built here.

    The model's own when it is ``eager`` or ``sdpa``; otherwise (flash kernels, flex) ``sdpa``
    for the duration of a call, or ``eager`` for models with attention soft-capping, which sdpa
    cannot do. Training keeps the model's implementation.
    """
    config = model.config.get_text_config()
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation in ("eager", "sdpa"):
        return str(implementation)
    return "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"


class SlotCache:
    """Keys and values of every slot, one buffer per layer: ``[slots, heads, capacity, dim]``.

    The model calls :meth:`update` once per layer and forward; the session sets, before each
    forward, which slots it covers (``lo:hi``), the column each new token goes to (``dest``,
    ``[hi - lo, tokens]``) and how many columns attention reads (``kv_len``).
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.slots = 0
        self.capacity = 0
        self.lo = self.hi = self.kv_len = 0
        self.dest = torch.zeros(0, 0, dtype=torch.long)

    def reserve(self, slots: int, capacity: int) -> None:
        """Make room for ``slots`` rows of ``capacity`` tokens.

        Each growth copies the buffers, so it takes a quarter more than asked (and whole blocks
        of 64 tokens): rare copies, and at most about 25% of the memory unused.
        """
        if slots <= self.slots and capacity <= self.capacity:
            return
        if slots > self.slots:
            self.slots = max(slots, self.slots + self.slots // 4)
        if capacity > self.capacity:
            capacity = max(capacity, self.capacity + self.capacity // 4)
            self.capacity = -(-capacity // 64) * 64
        for store in (self.keys, self.values):
            for layer, old in store.items():
                store[layer] = _grown(old, self.slots, self.capacity)

    def move(self, index: torch.Tensor) -> None:
        """Slots ``index`` become slots ``0..len(index)-1`` (the rest is left as it was)."""
        for store in (self.keys, self.values):
            for buf in store.values():
                buf[: len(index)] = buf[index]  # the right side is a copy: overlap is safe

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *_: Any,
        **__: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = []
        for store, states in ((self.keys, key_states), (self.values, value_states)):
            buf = store.get(layer_idx)
            if buf is None:
                buf = store[layer_idx] = _grown(states[:0, :, :0], self.slots, self.capacity)
            view = buf[self.lo : self.hi]
            index = self.dest[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
            view.scatter_(2, index, states)
            out.append(view[:, :, : self.kv_len])
        return out[0], out[1]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.kv_len


def _grown(old: torch.Tensor, slots: int, capacity: int) -> torch.Tensor:
    """A zeroed buffer of ``slots`` x ``capacity`` with ``old`` copied in.

    Zeros, not ``empty``: attention reads masked columns too, and a NaN there (uninitialized
    memory) would survive its zero weight (0 * NaN is NaN).
    """
    buf = old.new_zeros(slots, old.shape[1], capacity, old.shape[3])
    buf[: old.shape[0], :, : old.shape[2]] = old
    return buf


class _Masks:
    """Attention masks from query positions, in the form the model's attention expects."""

    def __init__(self, model: Any, attention: str) -> None:
        config = model.config.get_text_config()
        layer_types = getattr(config, "layer_types", None)
        types = set(layer_types or [FULL])
        unknown = types - {FULL, SLIDING}
        if unknown:
            raise UsageError(
                f"The transformers backend does not support attention layers of type "
                f"{', '.join(sorted(unknown))}."
            )
        # Per-layer types: a dict of masks, the window on "sliding_attention" layers. Without
        # them (Mistral, Mixtral, Phi-3, Qwen3-MoE), a configured window applies to every layer.
        self.dict_form = SLIDING in types
        window = getattr(config, "sliding_window", None)
        self.window: int | None = window if self.dict_form or not layer_types else None
        self.additive = attention == "eager"
        self.dtype = next(model.parameters()).dtype

    def build(self, qpos: torch.Tensor, kv_len: int) -> Any:
        """Masks ``[B, 1, Q, kv_len]`` for queries at positions ``qpos`` ``[B, Q]``."""
        col = torch.arange(kv_len, device=qpos.device)
        past = col <= qpos[:, None, :, None]
        if self.window is None:
            return self._form(past)
        windowed = self._form(past & (col > qpos[:, None, :, None] - self.window))
        if not self.dict_form:
            return windowed
        return {FULL: self._form(past), SLIDING: windowed}

    def _form(self, keep: torch.Tensor) -> torch.Tensor:
        if not self.additive:
            return keep  # sdpa takes a boolean mask (True: attend)
        zero = torch.zeros((), dtype=self.dtype, device=keep.device)
        return torch.where(keep, zero, torch.finfo(self.dtype).min)


class TransformersSession:
    """Growing conversations ("rows") generated in batches over one :class:`SlotCache`."""

    def __init__(
        self,
        model: Any,
        pad_token_id: int,
        params: SamplingParams,
        step: CompiledStep | None = None,
    ) -> None:
        self.model = model
        self.step = step
        self.device = next(model.parameters()).device
        self.pad = pad_token_id
        self.params = params
        self.generator: torch.Generator | None = None
        if params.seed is not None:  # on the model's device: the draws happen there
            self.generator = torch.Generator(device=self.device).manual_seed(params.seed)
        self.attention = generation_attention(model)
        self.masks = _Masks(model, self.attention)
        # transformers 5 renamed past_key_values to cache; a PEFT wrapper passes either through.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        forward_args = inspect.signature(base.forward).parameters
        self.cache_arg = "cache" if "cache" in forward_args else "past_key_values"
        self.cache = SlotCache()
        self.slot_of: dict[int, int] = {}
        self.lengths: list[int] = []  # tokens stored per slot (host copy, exact between calls)
        self.free: list[int] = []  # a heap: the lowest free slot is reused first
        self.pending: dict[int, list[int]] = {}
        self.seen: torch.Tensor | None = None  # [slots, vocab]: ids each row holds (penalty)
        self.forward_calls = 0

    # -- rows and slots -------------------------------------------------------------------
    def _slots_for(self, rows: Sequence[int]) -> list[int]:
        slots = []
        for row in rows:
            slot = self.slot_of.get(row)
            if slot is None:
                slot = heapq.heappop(self.free) if self.free else len(self.lengths)
                if slot == len(self.lengths):
                    self.lengths.append(0)
                self.slot_of[row] = slot
            slots.append(slot)
        return slots

    def _sparse(self) -> bool:
        """Whether freed slots make up most of the span the forward would cover."""
        live = len(self.slot_of)
        return len(self.lengths) - live >= max(8, live)

    def _compact(self) -> None:
        """Move the live rows to the lowest slots (in slot order): one copy of their caches."""
        live = sorted(self.slot_of.items(), key=lambda item: item[1])
        old = [slot for _, slot in live]
        index = torch.tensor(old, device=self.device)
        if old != list(range(len(old))):  # else only slots past the live ones were free
            self.cache.move(index)
        if self.seen is not None:
            self.seen[: len(old)] = self.seen[index]
            self.seen[len(old) :] = False
        self.lengths = [self.lengths[slot] for slot in old]
        self.slot_of = {row: i for i, (row, _) in enumerate(live)}
        self.free = []

    def release(self, rows: Sequence[int]) -> None:
        for row in rows:
            slot = self.slot_of.pop(row, None)
            self.pending.pop(row, None)
            if slot is None:
                continue
            self.lengths[slot] = 0
            if self.seen is not None:
                self.seen[slot] = False
            heapq.heappush(self.free, slot)

    def close(self) -> None:
        self.cache = SlotCache()
        self.slot_of.clear()
        self.lengths, self.free, self.seen = [], [], None
        self.pending.clear()

    # -- one call -------------------------------------------------------------------------
    def generate(
        self,
        rows: Sequence[int],
        new_ids: Sequence[list[int]],
        max_new_tokens: Sequence[int],
        stop_ids: frozenset[int],
    ) -> list[Sample]:
        if not (len(rows) == len(new_ids) == len(max_new_tokens)):
            raise ValueError("rows, new_ids and max_new_tokens must have the same length")
        if len(set(rows)) != len(rows):
            raise ValueError("a row may appear only once per call")
        if not rows:
            return []
        chunks = [self.pending.get(r, []) + list(ids) for r, ids in zip(rows, new_ids, strict=True)]
        if any(not c for c in chunks):
            raise ValueError("every row needs at least one new token per call")
        for r in rows:
            self.pending.pop(r, None)
        slots = self._slots_for(rows)
        if self._sparse():
            self._compact()
            slots = [self.slot_of[r] for r in rows]
        with _inference(self.model, self.attention):
            return self._generate(slots, chunks, list(max_new_tokens), stop_ids)

    def _generate(
        self, slots: list[int], chunks: list[list[int]], limits: list[int], stop_ids: frozenset[int]
    ) -> list[Sample]:
        lo, hi = min(slots), max(slots) + 1
        width = max(len(c) for c in chunks)
        by_slot = dict(zip(slots, zip(chunks, limits, strict=True), strict=True))
        ids, dest, limit = [], [], []
        for s in range(lo, hi):
            chunk, row_limit = by_slot.get(s, ([], 0))
            off, k = self.lengths[s], len(chunk)
            # The chunk ends at the last column; the padding before it writes past the row's
            # new end (scratch, overwritten by the row's next tokens, never attended to).
            ids.append([self.pad] * (width - k) + chunk)
            dest.append(list(range(off + k, off + width)) + list(range(off, off + k)))
            limit.append(row_limit)
        ends = [self.lengths[s] + len(by_slot.get(s, ((),))[0]) for s in range(lo, hi)]
        longest = max(self.lengths[lo:hi])
        self.cache.reserve(len(self.lengths), longest + width + max(limits))
        logits = self._forward(
            lo,
            hi,
            torch.tensor(ids, device=self.device),
            torch.tensor(dest, device=self.device),
            longest + width,
        )
        self._track([(s, chunk) for s, (chunk, _) in by_slot.items()], logits.shape[-1])
        offsets = torch.tensor(ends, device=self.device)
        return self._decode(lo, hi, slots, logits, offsets, max(ends), limit, stop_ids)

    def _track(self, chunks: list[tuple[int, list[int]]], vocab: int) -> None:
        """Mark the ids each called row now holds, for the repetition penalty."""
        if self.params.repetition_penalty == 1.0:
            return
        if self.seen is None or self.seen.shape[0] < self.cache.slots:
            seen = torch.zeros(self.cache.slots, vocab, dtype=torch.bool, device=self.device)
            if self.seen is not None:
                seen[: self.seen.shape[0]] = self.seen
            self.seen = seen
        for slot, chunk in chunks:
            self.seen[slot, torch.tensor(chunk, device=self.device)] = True

    def _forward(
        self, lo: int, hi: int, ids: torch.Tensor, dest: torch.Tensor, kv_len: int
    ) -> torch.Tensor:
        cache = self.cache
        cache.lo, cache.hi, cache.dest, cache.kv_len = lo, hi, dest, kv_len
        inputs = {
            "input_ids": ids,
            "attention_mask": self.masks.build(dest, kv_len),
            "position_ids": dest,
            "use_cache": True,
            "logits_to_keep": 1,
            self.cache_arg: cache,
        }
        out = self.step(**inputs) if self.step is not None and ids.shape[1] == 1 else None
        if out is None:
            out = self.model(**inputs)
        self.forward_calls += 1
        return out.logits[:, -1, :]

    def _decode(
        self,
        lo: int,
        hi: int,
        slots: list[int],
        logits: torch.Tensor,
        offsets: torch.Tensor,
        longest: int,
        limits: list[int],
        stop_ids: frozenset[int],
    ) -> list[Sample]:
        limit = torch.tensor(limits, device=self.device)
        active = limit > 0  # slots in the range that are not called have limit 0
        count = torch.zeros_like(limit)
        # A lookup table instead of torch.isin each step (ids the logits cannot hold never come).
        is_stop = torch.zeros(logits.shape[-1], dtype=torch.bool, device=self.device)
        is_stop[[i for i in stop_ids if 0 <= i < logits.shape[-1]]] = True
        stopped = torch.zeros_like(active)
        index = torch.arange(hi - lo, device=self.device)
        seen = None if self.seen is None else self.seen[lo:hi]
        steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        while max(limits) > 0:
            tokens, logprobs = sample(logits, self.params, self.generator, seen)
            steps.append((tokens, logprobs, active))
            count += active
            hit_stop = active & is_stop[tokens]
            stopped |= hit_stop
            if seen is not None:
                seen[index, tokens] |= active
            active = active & ~hit_stop & (count < limit)  # a new tensor: steps keep the old one
            if not bool(active.any()):  # the one host sync per step
                break
            # Every row writes at its own length; rows that are done write there too (scratch).
            feed = tokens.masked_fill(~active, self.pad)[:, None]
            logits = self._forward(lo, hi, feed, offsets[:, None], longest + 1)
            offsets = offsets + active
            longest += 1
        return self._collect(lo, slots, steps, stopped, offsets)

    def _collect(
        self,
        lo: int,
        slots: list[int],
        steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        stopped: torch.Tensor,
        offsets: torch.Tensor,
    ) -> list[Sample]:
        for i, end in enumerate(offsets.tolist()):
            self.lengths[lo + i] = end
        if not steps:
            return [Sample() for _ in slots]
        tokens = torch.stack([s[0] for s in steps], 1).cpu()
        logprobs = torch.stack([s[1] for s in steps], 1).cpu()
        live = torch.stack([s[2] for s in steps], 1).cpu()
        row_of = {s: r for r, s in self.slot_of.items()}
        out = []
        for s in slots:
            i = s - lo
            ids = tokens[i][live[i]].tolist()
            if ids:
                self.pending[row_of[s]] = [ids[-1]]
            out.append(Sample(ids, logprobs[i][live[i]].tolist(), bool(stopped[i])))
        return out
