"""Generation with a transformers model: a session's rows share one KV cache, exactly.

Each row (an episode) owns a slot of a :class:`~.slots.SlotCache` and keeps its tokens there
across turns, so a turn prefills only the text inserted since the row's last turn. A call names
any rows: new rows take a free slot, absent rows keep theirs untouched, released rows free it.
The forward runs over the contiguous range of slots spanning the called rows; slots in that
range that are not called are inert (fed padding that lands past their length, to be
overwritten by their next real token; their outputs are ignored). When most slots are free the
live rows are moved down once. Attention masks are built from each row's positions
(:class:`~.slots.PositionMasks`), which keeps sliding windows exact in a batch.

A call prefills each row's new tokens (left-padded, so the last column holds every row's last
token), then decodes one token per row per step. The one host sync per step is the stop check;
tokens, logprobs and which rows were live stay on the device until the call ends. The last
sampled token of a turn is fed at the start of the row's next call.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..errors import UsageError
from . import sampling
from .base import BackendContext, Sample, SamplingParams, Turn, stream_key
from .sampling import sample, uniforms
from .slots import SlotCache, SlotModel, SlotRows, context_model, inference

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


def make_backend(context: BackendContext) -> Any:
    """The ``transformers`` backend: the context's model, or the trainer's unwrapped model.

    ``options["engine"]`` picks how it decodes: ``"calls"`` (a batch of ready rows per call,
    this module) or ``"continuous"`` (rows join and leave a running loop,
    :mod:`.continuous`); by default the one measured faster on the model's device
    (:data:`DEFAULT_ENGINE`).
    """
    model, pad = context_model(context)
    engine = context.options.get("engine") or default_engine(model)
    if engine == "continuous":
        from .continuous import make_backend as make_continuous

        return make_continuous(context)
    if engine != "calls":
        raise UsageError(f"Unknown transformers engine {engine!r}: use 'calls' or 'continuous'.")
    return TransformersBackend(model, pad, context.options.get("compile", False))


# The engine each device type gets by default: the one bench/rollout_bench.py (CPU) and
# bench/gpu.py (CUDA) measured faster there. A device not listed keeps "calls".
DEFAULT_ENGINE = {"cpu": "calls", "cuda": "calls"}


def default_engine(model: Any) -> str:
    device = next(model.parameters()).device
    return DEFAULT_ENGINE.get(device.type, "calls")


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


class TransformersSession(SlotRows, SlotModel):
    """Growing conversations ("rows") generated in batches over one :class:`SlotCache`."""

    def __init__(
        self,
        model: Any,
        pad_token_id: int,
        params: SamplingParams,
        step: CompiledStep | None = None,
    ) -> None:
        SlotModel.__init__(self, model)
        SlotRows.__init__(self)  # slot_of, lengths (exact between calls), free
        self.step = step
        self.pad = pad_token_id
        self.params = params
        # A seeded session draws each row's numbers from its own counter-based stream (its key
        # and the position sampled), so a row's tokens do not depend on which rows share a call.
        self.keys: dict[int, int] = {}
        self.pending: dict[int, list[int]] = {}
        self.seen: torch.Tensor | None = None  # [slots, vocab]: ids each row holds (penalty)
        self.forward_calls = 0

    def streams(self, keys: Mapping[int, int]) -> None:
        """Each row's random stream key (a seeded session keys unnamed rows by their number)."""
        self.keys.update(keys)

    def _key(self, row: int) -> int:
        key = self.keys.get(row)
        return stream_key(self.params.seed, row) if key is None else key

    # -- rows and slots -------------------------------------------------------------------
    def _compact(self) -> None:
        """Move the live rows to the lowest slots (in slot order): one copy of their caches."""
        old = self.compacted()
        index = torch.tensor(old, device=self.device)
        if old != list(range(len(old))):  # else only slots past the live ones were free
            self.cache.move(index)
        if self.seen is not None:
            self.seen[: len(old)] = self.seen[index]
            self.seen[len(old) :] = False

    def release(self, rows: Sequence[int]) -> None:
        for row in rows:
            self.pending.pop(row, None)
            slot = self.drop_slot(row)
            if slot is not None and self.seen is not None:
                self.seen[slot] = False

    def close(self) -> None:
        self.cache = SlotCache()
        self.forget_rows()
        self.seen = None
        self.pending.clear()

    # -- one call -------------------------------------------------------------------------
    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        rows = self.rows_of(turns)
        if not rows:
            return []
        chunks = [self.pending.get(t.row, []) + list(t.new_ids) for t in turns]
        if any(not c for c in chunks):
            raise ValueError("every row needs at least one new token per call")
        slots = [self.take_slot(row) for row in rows]
        if self.sparse():
            self._compact()
            slots = [self.slot_of[r] for r in rows]
        keys = None
        if self.params.seed is not None:
            keys = {slot: self._key(row) for row, slot in zip(rows, slots, strict=True)}
        with inference(self.model, self.attention):
            limits = [t.max_new_tokens for t in turns]
            samples = self._generate(slots, chunks, limits, stop_ids, keys)
        # Only now is the pending token consumed: after a failed call the rows are as before.
        for row, done in zip(rows, samples, strict=True):
            if done.ids:
                self.pending[row] = [done.ids[-1]]
            else:
                self.pending.pop(row, None)
        return samples

    def _generate(
        self,
        slots: list[int],
        chunks: list[list[int]],
        limits: list[int],
        stop_ids: frozenset[int],
        keys: dict[int, int] | None = None,
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
        key_tensor = None
        if keys is not None:  # slots in the range that are not called draw nothing that counts
            key_tensor = torch.tensor([keys.get(s, 0) for s in range(lo, hi)], device=self.device)
        return self._decode(lo, hi, slots, logits, offsets, max(ends), limit, stop_ids, key_tensor)

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
        inputs = self.inputs(ids, dest, kv_len)
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
        keys: torch.Tensor | None = None,
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
        block = torch.empty(0)
        block_size = sampling.UNIFORM_BLOCK
        ahead = torch.arange(block_size, device=self.device)
        while max(limits) > 0:
            u = None
            if keys is not None:
                # A row's counter is the position its token takes: unique in the row, and the
                # same whatever the batch. A live row's position advances by one per step, so
                # the numbers of the next UNIFORM_BLOCK steps are hashed in one go (a hash
                # costs ~90 small tensor ops: per step they cost as much as the sampling).
                step = len(steps) % block_size
                if step == 0:
                    block = uniforms(keys[:, None], offsets[:, None] + ahead)
                u = block[:, step]
            tokens, logprobs = sample(logits, self.params, None, seen, u)
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
        out = []
        for s in slots:
            i = s - lo
            ids = tokens[i][live[i]].tolist()
            out.append(Sample(ids, logprobs[i][live[i]].tolist(), bool(stopped[i])))
        return out
