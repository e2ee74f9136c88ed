"""What the transformers backend's engines share: a KV cache of slots, masks from positions,
and the model set up for generation.

Each row owns a *slot* of a per-layer buffer ``[slots, kv_heads, capacity, head_dim]`` and
stores its tokens contiguously from column 0, so a token's column is its position in the
conversation. A row's new tokens are written at its own length (a scatter per layer), whatever
the other rows hold: no padding holes, and no copy of the cache when rows join, wait or leave.
The masks are built from those positions (causal, and the window of sliding-window layers), so a
window counts the row's own tokens, never another row's padding. Sliding-window layers keep
their whole history (the mask does the windowing).
"""

from __future__ import annotations

import contextlib
import heapq
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..errors import UsageError
from .base import BackendContext, Turn, vocab_size_of

FULL, SLIDING = "full_attention", "sliding_attention"


def context_model(context: BackendContext) -> tuple[Any, int | None]:
    """The model a transformers backend generates with (the context's, or the trainer's
    unwrapped one) and the tokenizer's pad id."""
    model, tokenizer = context.model, context.tokenizer
    if model is None and context.trainer is not None:
        trainer = context.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = tokenizer or getattr(trainer, "processing_class", None)
    if model is None:
        raise UsageError("The transformers backend needs a model or a trainer to generate with.")
    return model, getattr(tokenizer, "pad_token_id", None)


def cache_argument(model: Any) -> str:
    """The name of the cache argument of ``model``'s forward: transformers 5 renamed
    ``past_key_values`` to ``cache`` (a PEFT wrapper passes either through)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    forward_args = inspect.signature(base.forward).parameters
    return "cache" if "cache" in forward_args else "past_key_values"


@contextlib.contextmanager
def inference(model: Any, attention: str) -> Iterator[None]:
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


class SlotRows:
    """Which slot each row (an episode) holds and how many tokens each slot stores: the
    bookkeeping both transformers engines share. A new row takes the lowest free slot; when
    most slots are free, :meth:`compacted` moves the rows down."""

    def __init__(self) -> None:
        self.slot_of: dict[int, int] = {}
        self.lengths: list[int] = []  # tokens stored per slot (a host copy)
        self.free: list[int] = []  # a heap: the lowest free slot is reused first

    @staticmethod
    def rows_of(turns: Sequence[Turn]) -> list[int]:
        """The rows a call names, in order; a row named twice is refused."""
        rows = [t.row for t in turns]
        if len(set(rows)) != len(rows):
            raise ValueError("a row may appear only once per call")
        return rows

    def take_slot(self, row: int) -> int:
        """``row``'s slot, a free one (empty) if it has none yet."""
        slot = self.slot_of.get(row)
        if slot is None:
            slot = heapq.heappop(self.free) if self.free else len(self.lengths)
            if slot == len(self.lengths):
                self.lengths.append(0)
            self.slot_of[row] = slot
        return slot

    def drop_slot(self, row: int) -> int | None:
        """Free ``row``'s slot; which it was (None: it had none)."""
        slot = self.slot_of.pop(row, None)
        if slot is not None:
            self.lengths[slot] = 0
            heapq.heappush(self.free, slot)
        return slot

    def sparse(self) -> bool:
        """Whether freed slots make up most of the span a forward would cover."""
        live = len(self.slot_of)
        return len(self.lengths) - live >= max(8, live)

    def compacted(self) -> list[int]:
        """Give the rows the lowest slots, in slot order; the old slot of each new one (what
        the caller moves its tensors by)."""
        order = sorted(self.slot_of.items(), key=lambda item: item[1])
        old = [slot for _, slot in order]
        self.lengths = [self.lengths[slot] for slot in old]
        self.slot_of = {row: i for i, (row, _) in enumerate(order)}
        self.free = []
        return old

    def forget_rows(self) -> None:
        self.slot_of.clear()
        self.lengths, self.free = [], []


class SlotCache:
    """Keys and values of every slot, one buffer per layer: ``[slots, heads, capacity, dim]``.

    The model calls :meth:`update` once per layer and forward; the session sets, before each
    forward, which slots it covers (``lo:hi``, or any ``rows``: a tensor of slots, read as a
    copy), the column each new token goes to (``dest``, ``[rows, tokens]``) and how many
    columns attention reads (``kv_len``). ``version`` changes whenever the buffers are
    reallocated (a CUDA graph that read the old ones must be captured again).
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.slots = 0
        self.capacity = 0
        self.version = 0
        self.lo = self.hi = self.kv_len = 0
        self.rows: torch.Tensor | None = None
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
        self.version += 1

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
            if self.rows is not None:  # scattered slots: written in place, read as a copy
                heads = torch.arange(states.shape[1], device=buf.device)
                where = (self.rows[:, None, None], heads[None, :, None], self.dest[:, None, :])
                buf.index_put_(where, states)
                out.append(buf[:, :, : self.kv_len][self.rows])
                continue
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


class SlotModel:
    """A model set up to generate over one :class:`SlotCache`: the attention implementation the
    masks are built for, the masks, its forward's cache argument, and the cache."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = vocab_size_of(model)  # checked by the rollout engine (check_sample)
        self.attention = generation_attention(model)
        self.masks = PositionMasks(model, self.attention)
        self.cache_arg = cache_argument(model)
        self.cache = SlotCache()

    def inputs(self, ids: torch.Tensor, positions: torch.Tensor, kv_len: int) -> dict[str, Any]:
        """The forward's arguments for ``ids`` at ``positions`` (both ``[B, Q]``) attending to
        the cache's first ``kv_len`` columns; only the last position's logits are computed."""
        return {
            "input_ids": ids,
            "attention_mask": self.masks.build(positions, kv_len),
            "position_ids": positions,
            "use_cache": True,
            "logits_to_keep": 1,
            self.cache_arg: self.cache,
        }


class PositionMasks:
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
        # Additive masks are in the compute dtype (a quantized model's first weights are ints).
        floats = (p.dtype for p in model.parameters() if p.is_floating_point())
        self.dtype = next(floats, torch.float32)

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
