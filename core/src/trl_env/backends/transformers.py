"""Generation with a transformers model, keeping each row's KV cache across turns.

Rows live in one batched cache. A turn prefills only the text inserted since the row's last
turn (right-aligned in a chunk, holes masked), then decodes one token per row per step; rows that
finish early feed masked padding until the slowest row stops. Finished episodes leave the batch.
The last sampled token of a turn is fed at the start of the next turn, with the inserted text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from .base import Sample, SamplingParams
from .sampling import sample


class TransformersBackend:
    """A :class:`~trl_env.backends.base.Backend` over a ``PreTrainedModel`` (e.g. the trainer's)."""

    def __init__(self, model: Any, pad_token_id: int | None = None) -> None:
        self.model = model
        config_pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (config_pad or 0)

    def session(self, params: SamplingParams) -> TransformersSession:
        return TransformersSession(self.model, self.pad_token_id, params)


@contextlib.contextmanager
def _inference(model: Any) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _new_cache(model: Any) -> Any:
    """The cache the model would make for itself, with full-attention layers that grow in place.

    None (the model then makes its own) if the config does not describe the cache.
    """
    try:
        cache = DynamicCache(config=model.config)
    except Exception:
        return None
    cache.layers = [_GrowingLayer() if type(lay) is DynamicLayer else lay for lay in cache.layers]
    if cache.layer_class_to_replicate is DynamicLayer:  # layers made lazily, one per model layer
        cache.layer_class_to_replicate = _GrowingLayer
    return cache


class _GrowingLayer(DynamicLayer):
    """A full-attention cache layer whose keys and values are appended in place.

    ``DynamicLayer`` concatenates the whole cache with every new token: an O(length) copy per
    layer per decode step, which made long episodes cost more than linearly (on the tiny model
    the copies were ~8% of a 16-turn rollout). Here keys and values live in buffers with spare
    room (doubled when full) and ``keys``/``values`` are views of their filled part; attention
    reads the same numbers. Any base-class method that replaces ``keys`` (batch selection when
    episodes leave, crop, ...) is picked up at the next update, which copies into new buffers.
    """

    _kbuf: torch.Tensor | None = None
    _vbuf: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = self.keys, self.values
        assert keys is not None and values is not None
        filled = keys.shape[-2] if keys.dim() == 4 else 0  # empty and 1-d before the first update
        end = filled + key_states.shape[-2]
        kbuf, vbuf = self._kbuf, self._vbuf
        if (
            kbuf is None
            or vbuf is None
            or keys.data_ptr() != kbuf.data_ptr()  # replaced by a base-class method
            or kbuf.shape[0] != key_states.shape[0]
            or end > kbuf.shape[-2]
        ):
            kbuf = self._kbuf = _reserve(keys, key_states, filled, 2 * end)
            vbuf = self._vbuf = _reserve(values, value_states, filled, 2 * end)
        kbuf[:, :, filled:end] = key_states
        vbuf[:, :, filled:end] = value_states
        self.keys, self.values = kbuf[:, :, :end], vbuf[:, :, :end]
        return self.keys, self.values


def _reserve(old: torch.Tensor, new: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
    """A buffer shaped like ``new`` with room for ``capacity`` positions, ``old`` copied in."""
    batch, heads, _, dim = new.shape
    buf = new.new_empty(batch, heads, capacity, dim)
    if filled:
        buf[:, :, :filled] = old
    return buf


class TransformersSession:
    """One batch of growing conversations with a shared, row-aligned KV cache."""

    def __init__(self, model: Any, pad_token_id: int, params: SamplingParams) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.pad = pad_token_id
        self.params = params
        self.generator: torch.Generator | None = None
        if params.seed is not None:  # on the model's device: the draws happen there
            self.generator = torch.Generator(device=self.device).manual_seed(params.seed)
        self.rows: list[int] = []
        self.cache: Any = _new_cache(model)
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)
        self.positions = torch.zeros(0, dtype=torch.long, device=self.device)
        self.pending: dict[int, list[int]] = {}
        self.forward_calls = 0

    # -- batch bookkeeping ----------------------------------------------------------------
    def _select(self, rows: Sequence[int]) -> None:
        """Keep exactly ``rows``, in that order; new rows are only allowed in a fresh session."""
        if not self.rows:
            self.rows = list(rows)
            self.mask = torch.zeros(len(rows), 0, dtype=torch.long, device=self.device)
            self.positions = torch.zeros(len(rows), dtype=torch.long, device=self.device)
            return
        if list(rows) == self.rows:
            return
        where = {r: i for i, r in enumerate(self.rows)}
        unknown = [r for r in rows if r not in where]
        if unknown:
            raise ValueError(f"rows {unknown} joined a session that already started")
        index = torch.tensor([where[r] for r in rows], device=self.device)
        if self.cache is not None:
            self.cache.batch_select_indices(index)
        self.mask = self.mask[index]
        self.positions = self.positions[index]
        self.pending = {r: self.pending[r] for r in rows if r in self.pending}
        self.rows = list(rows)

    def _forward(self, ids: torch.Tensor, new_mask: torch.Tensor, positions: torch.Tensor) -> Any:
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.past_key_values
        self.forward_calls += 1
        return out.logits[:, -1, :]

    # -- one turn -------------------------------------------------------------------------
    def generate(
        self,
        rows: Sequence[int],
        new_ids: Sequence[list[int]],
        max_new_tokens: Sequence[int],
        stop_ids: frozenset[int],
    ) -> list[Sample]:
        with _inference(self.model):
            self._select(rows)
            chunks = [
                self.pending.pop(r, []) + list(ids) for r, ids in zip(rows, new_ids, strict=True)
            ]
            if any(not c for c in chunks):
                raise ValueError("every row needs at least one new token per turn")
            logits = self._prefill(chunks)
            return self._decode(logits, max_new_tokens, stop_ids)

    def _prefill(self, chunks: list[list[int]]) -> torch.Tensor:
        width = max(len(c) for c in chunks)
        ids = torch.full((len(chunks), width), self.pad, dtype=torch.long)
        mask = torch.zeros(len(chunks), width, dtype=torch.long)
        pos = self.positions.cpu()[:, None].repeat(1, width)
        for i, chunk in enumerate(chunks):
            n = len(chunk)
            ids[i, width - n :] = torch.tensor(chunk)
            mask[i, width - n :] = 1
            pos[i, width - n :] += torch.arange(n)
        ids, mask, pos = ids.to(self.device), mask.to(self.device), pos.to(self.device)
        self.positions = self.positions + mask.sum(1)
        return self._forward(ids, mask, pos)

    def _decode(
        self, logits: torch.Tensor, max_new_tokens: Sequence[int], stop_ids: frozenset[int]
    ) -> list[Sample]:
        batch = len(self.rows)
        limit = torch.tensor(list(max_new_tokens), device=self.device)
        active = limit > 0
        count = torch.zeros(batch, dtype=torch.long, device=self.device)
        # A lookup table instead of torch.isin each step (ids the logits cannot hold never come).
        is_stop = torch.zeros(logits.shape[-1], dtype=torch.bool, device=self.device)
        is_stop[[i for i in stop_ids if 0 <= i < logits.shape[-1]]] = True
        stopped = torch.zeros(batch, dtype=torch.bool, device=self.device)
        steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        while bool(active.any()):
            tokens, logprobs = sample(logits, self.params, self.generator)
            steps.append((tokens, logprobs, active))
            count += active
            hit_stop = active & is_stop[tokens]
            stopped |= hit_stop
            active = active & ~hit_stop & (count < limit)  # a new tensor: steps keep the old one
            if not bool(active.any()):
                break
            # Rows that are done feed masked padding until the slowest row stops.
            feed = tokens.masked_fill(~active, self.pad)[:, None]
            feed_mask = active.long()[:, None]
            logits = self._forward(feed, feed_mask, self.positions[:, None])
            self.positions = self.positions + feed_mask[:, 0]
        return self._collect(steps, stopped)

    def _collect(
        self, steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], stopped: torch.Tensor
    ) -> list[Sample]:
        if not steps:
            return [Sample() for _ in self.rows]
        tokens = torch.stack([s[0] for s in steps], 1).cpu()
        logprobs = torch.stack([s[1] for s in steps], 1).cpu()
        live = torch.stack([s[2] for s in steps], 1).cpu()
        out = []
        for i, row in enumerate(self.rows):
            ids = tokens[i][live[i]].tolist()
            if ids:
                self.pending[row] = [ids[-1]]
            out.append(Sample(ids, logprobs[i][live[i]].tolist(), bool(stopped[i])))
        return out

    def close(self) -> None:
        self.cache = None
        self.rows = []
        self.pending.clear()
