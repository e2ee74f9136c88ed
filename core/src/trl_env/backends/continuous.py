"""Continuous batching for a transformers model: episodes join and leave a running decode loop.

A :class:`ContinuousSession` is a :class:`~.base.Session` with ``submit``: the rollout engine
submits each row's turn the moment the row is ready; a loop on the session's own thread
prefills what was inserted since the row's last turn, then decodes every row with a turn in
progress, one token per row per step. A row whose turn ends (a stop id, its limit) is answered
at that step while the others keep decoding, and a row waiting for its env is simply not in the
steps: no turn barrier, and a slow env holds neither a step nor a decoding row of the fast ones.

Rows keep their tokens across turns in a slot of a :class:`~.slots.SlotCache` allocated ahead
(positions are columns, so rows of any lengths share a step; masks come from positions, which
keeps sliding windows exact). transformers' ``StaticCache`` writes every row of a batch at one
shared position and its continuous batching samples with ``torch.multinomial`` and no processed
logprobs, so neither fits rows that join mid-flight and must report vLLM's processed logprobs.

A decode step has static shapes: the slots ``0..B`` (``B`` rounded up to a bucket) and a
bucketed number of key columns. On CUDA each ``(B, columns)`` step (forward and sampling) is
captured once in a CUDA graph and replayed, one launch instead of hundreds of small kernels from
Python; ``compile`` runs the step through ``torch.compile`` as well (or instead, on a CPU).
Sampling is :func:`.sampling.sample` with each row's uniform number keyed by its stream key and
the position its token takes, as in the call-based session (:mod:`.transformers`): a row draws
the same tokens whatever rows share its steps, up to the last bits of the logits.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UsageError
from . import sampling
from .base import BackendContext, Sample, SamplingParams, Turn, stream_key
from .sampling import sample, uniforms
from .slots import SlotModel, SlotRows, context_model, inference

log = logging.getLogger("trl_env")

# Static shapes: a step covers a bucket of slots and of key columns, so few graphs serve a run.
SLOT_BUCKETS = (8, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024)
COLUMN_BLOCK = 128  # captured steps read key columns in whole blocks (a graph per count)
MIN_GATHER = 0.002  # s: least time an idle loop waits for rows expected back (see _admit)
PREFILL_EVERY = 4  # decoding, queued rows wait up to this many steps to be prefilled together
IDLE_EXIT = 1.0  # s without anything to do before the loop's thread ends


def make_backend(context: BackendContext) -> ContinuousBackend:
    """The ``transformers-continuous`` backend: the context's model, or the trainer's."""
    model, pad = context_model(context)
    options = context.options
    return ContinuousBackend(
        model, pad, graphs=options.get("graphs"), compile=options.get("compile", False)
    )


class ContinuousBackend:
    """A :class:`~trl_env.backends.base.Backend` whose sessions batch continuously.

    ``graphs`` captures decode steps in CUDA graphs (default: on CUDA devices); ``compile``
    runs them through ``torch.compile`` (``True``: inductor, or a backend's name); ``static``
    gives steps the bucketed shapes either needs without them (tests on a CPU). Sessions run
    one at a time and reuse one :class:`Engine` (the KV cache, the step buffers and the
    captured graphs), so a training run captures its graphs once; the cache stays allocated
    between batches.
    """

    def __init__(
        self,
        model: Any,
        pad_token_id: int | None = None,
        graphs: bool | None = None,
        compile: bool | str = False,
        static: bool = False,
    ) -> None:
        self.model = model
        config_pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (config_pad or 0)
        device = next(model.parameters()).device
        self.graphs = device.type == "cuda" if graphs is None else bool(graphs)
        if self.graphs and device.type != "cuda":
            raise UsageError("CUDA graphs (graphs=True) need the model on a CUDA device.")
        self.compile = "inductor" if compile is True else (str(compile) if compile else "")
        self.static = static
        self._idle: Engine | None = None
        self._lock = threading.Lock()

    def session(self, params: SamplingParams) -> ContinuousSession:
        with self._lock:
            engine, self._idle = self._idle, None
        if engine is None:
            engine = Engine(self.model, self.pad_token_id, self.graphs, self.compile)
            engine.static = engine.static or self.static
        return ContinuousSession(engine, params, self._returned)

    def _returned(self, engine: Engine) -> None:
        with self._lock:
            self._idle = engine

    def state(self) -> dict[str, Any]:
        """How its engine runs (for benchmarks and bug reports): graphs or compilation, and
        why they were turned off if they were; graphs captured; the cache's size."""
        engine = self._idle
        out: dict[str, Any] = {"graphs": self.graphs, "compile": self.compile or None}
        if engine is not None:
            out.update(
                failed=engine.failed or None,
                graphs_captured=len(engine.captured),
                slots=engine.cache.slots,
                capacity=engine.cache.capacity,
            )
        return out


@dataclass
class _Job:
    """One row's turn: the ids to prefill (the pending token first), its limit and stops."""

    row: int
    chunk: list[int]
    limit: int
    stops: frozenset[int]
    future: Future[Sample]
    since: float
    gathered: bool = False  # submitted with others by ``generate``: no need to wait for more
    offset: int = 0  # the row's length before this turn (where a failed turn puts it back)
    pending: int | None = None  # the pending id this turn consumed


class Engine(SlotModel):
    """What a decode loop runs on: the model, its KV cache, per-slot step buffers and graphs.

    Graphs read the buffers at fixed addresses; any reallocation (more slots, longer rows, new
    weights) drops them and they are captured again on first use.
    """

    def __init__(self, model: Any, pad: int, graphs: bool, compile: str) -> None:
        super().__init__(model)
        self.pad = pad
        self.graphs, self.compile = graphs, compile
        self.static = graphs or bool(compile)  # steps of bucketed shapes
        inputs, output = model.get_input_embeddings(), model.get_output_embeddings()
        self.embedding_size = int(inputs.weight.shape[0])
        self.logit_size = int(output.weight.shape[0]) if output is not None else self.embedding_size
        self.buffers: _Buffers | None = None
        self.captured: dict[tuple[Any, ...], tuple[Any, tuple[torch.Tensor, torch.Tensor]]] = {}
        self.layout: tuple[Any, ...] = ()  # what the captured graphs were captured over
        self.compiled: Any = None
        self.failed = ""  # why graphs or compilation were turned off (then steps run eagerly)
        self.pool: Any = None

    def weights(self) -> tuple[int, ...]:
        return tuple(p.data_ptr() for p in self.model.parameters())

    def step(self) -> Any:
        """:func:`decode_step`, compiled if asked."""
        if not self.compile:
            return decode_step
        if self.compiled is None:
            self.compiled = torch.compile(decode_step, backend=self.compile)
        return self.compiled

    def turn_off(self, what: str, exc: BaseException) -> None:
        """After a failure of graphs or compilation: eager steps from now on, said once."""
        self.failed = f"{type(exc).__name__}: {exc}"
        self.captured.clear()
        log.warning("%s failed for the decode step; running eagerly: %s", what, exc)

    def capture(
        self, params: SamplingParams, width: int, columns: int
    ) -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
        """One step shape captured in a CUDA graph. The warm-up run is a real step (its cache
        writes are those the replay makes again: the same ids at the same places)."""
        run = self.step()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            run(self, params, width, columns, None)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # thread_local: the rollout's other threads may touch CUDA while this one captures
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            outputs = run(self, params, width, columns, None)
        return graph, outputs


def decode_step(
    engine: Engine, params: SamplingParams, width: int, columns: int, u: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step over slots ``0..width``, reading only the step buffers (what a graph
    captures): each slot's fed id goes to its column ``pos``; attention reads ``columns``."""
    buffers = engine.buffers
    assert buffers is not None
    positions = buffers.pos[:width, None]
    cache = engine.cache
    cache.lo, cache.hi, cache.rows = 0, width, None
    cache.dest, cache.kv_len = positions, columns
    out = engine.model(**engine.inputs(buffers.feed[:width, None], positions, columns))
    if u is None:  # a token's counter is the position it takes: one past the id fed
        u = uniforms(buffers.keys[:width], buffers.pos[:width] + 1)
    seen = buffers.seen[:width] if buffers.seen is not None else None
    return sample(out.logits[:, -1, :], params, None, seen, u)


class _Buffers:
    """Per-slot tensors of the decode loop (at fixed addresses: graphs read them)."""

    def __init__(self, device: torch.device, slots: int, width: int, vocab: int, seen: bool):
        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        self.slots, self.width = slots, width
        self.feed = zeros(slots)  # the id each slot is fed at the next step
        self.pos = zeros(slots)  # where it goes: the slot's length
        self.keys = zeros(slots)  # the slot's random stream key
        self.live = zeros(slots, dtype=torch.bool)  # a turn in progress
        self.count = zeros(slots)  # ids sampled in this turn
        self.limit = zeros(slots)
        self.stopset = zeros(slots)  # the row of the stop table its turn stops on
        self.stopped = zeros(slots, dtype=torch.bool)
        self.ids = zeros(slots, width + 1)  # this turn's ids; the last column is scratch
        self.logprobs = zeros(slots, width + 1, dtype=torch.float32)
        self.seen = zeros(slots, vocab, dtype=torch.bool) if seen else None  # penalty
        self.index = torch.arange(slots, device=device)

    def grown(self, slots: int, width: int, vocab: int) -> _Buffers:
        new = _Buffers(self.index.device, slots, width, vocab, self.seen is not None)
        n = self.slots
        for name in ("feed", "pos", "keys", "live", "count", "limit", "stopset", "stopped"):
            getattr(new, name)[:n] = getattr(self, name)
        new.ids[:n, : self.width] = self.ids[:, : self.width]
        new.logprobs[:n, : self.width] = self.logprobs[:, : self.width]
        if new.seen is not None and self.seen is not None:
            new.seen[:n] = self.seen
        return new

    def move(self, index: torch.Tensor) -> None:
        """Slots ``index`` become slots ``0..len(index)-1``."""
        n = len(index)
        for name in ("feed", "pos", "keys", "live", "count", "limit", "stopset", "stopped"):
            getattr(self, name)[:n] = getattr(self, name)[index]
        for name in ("ids", "logprobs", "seen"):
            tensor = getattr(self, name)
            if tensor is not None:
                tensor[:n] = tensor[index]
        self.live[n:] = False
        if self.seen is not None:
            self.seen[n:] = False


class ContinuousSession(SlotRows):
    """Rows decoded by a loop on this session's thread; ``submit`` answers each turn as it ends."""

    def __init__(self, engine: Engine, params: SamplingParams, done: Any = None) -> None:
        self.engine, self.params, self._done = engine, params, done
        self.vocab_size = engine.vocab_size  # checked by the rollout engine (check_sample)
        # Unseeded, rows are keyed from one number of torch's generator (torch.manual_seed
        # replays it), so every draw comes from the same counter-based streams.
        seed = params.seed
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        self.seed = seed
        self.keys: dict[int, int] = {}
        self._lock = threading.Condition()
        self._queue: list[_Job] = []
        self._released: list[int] = []
        self._in_flight: set[int] = set()  # rows with a turn submitted and not answered
        self._closed = False
        self._thread: threading.Thread | None = None
        self._ended: threading.Thread | None = None  # the last loop that ended idle
        # Owned by the loop's thread once it runs (the pending token is read by ``submit`` only
        # for rows not in flight, which the loop does not touch).
        SlotRows.__init__(self)  # slot_of, lengths, free
        self.pending: dict[int, int] = {}  # a row's last sampled id, fed with its next turn
        self.jobs: dict[int, _Job] = {}  # slot -> the turn decoding there
        self.counts: dict[int, int] = {}  # slot -> ids sampled in its turn (host copy)
        self.away: dict[int, float] = {}  # rows answered, not yet back -> since when
        self.away_seconds: deque[float] = deque(maxlen=64)
        self.step_seconds = 0.0  # a decode step's recent wall time
        self.stop_sets: dict[frozenset[int], int] = {}
        self.stop_table: torch.Tensor | None = None
        self.block: torch.Tensor | None = None  # uniform numbers hashed ahead (eager steps)
        self.block_step = 0
        self.weights: tuple[int, ...] = ()
        self.forward_calls = 0
        self.steps = 0

    # -- the Session interface, with its optional streams and submit ------------------------
    def streams(self, keys: Mapping[int, int]) -> None:
        """Each row's random stream key (other rows are keyed by the session's seed)."""
        with self._lock:
            self.keys.update(keys)

    def submit(self, turn: Turn, stop_ids: frozenset[int]) -> Future[Sample]:
        return self._enqueue([turn], stop_ids, gathered=False)[0]

    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        """Every turn's sample, all prefilled together; a call that fails changes no row."""
        self.rows_of(turns)  # a row named twice is refused
        if not turns:
            return []
        futures = self._enqueue(list(turns), stop_ids, gathered=True)
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]

    def release(self, rows: Sequence[int]) -> None:
        with self._lock:
            self._released.extend(rows)
            self._lock.notify()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
            threads = [self._thread, self._ended]
        for thread in threads:
            if thread is not None:
                thread.join()
        self._end(RuntimeError("the generation session was closed"))

    # -- requests ------------------------------------------------------------------------------
    def _enqueue(
        self, turns: list[Turn], stop_ids: frozenset[int], gathered: bool
    ) -> list[Future[Sample]]:
        jobs = []
        now = time.monotonic()
        for turn in turns:
            chunk = list(turn.new_ids)
            last = self.pending.get(turn.row)
            if last is not None:
                chunk.insert(0, last)
            if not chunk:
                raise ValueError("every row needs at least one new token per call")
            self._check_ids(chunk)
            jobs.append(_Job(turn.row, chunk, turn.max_new_tokens, stop_ids, Future(), now))
            jobs[-1].gathered = gathered
        with self._lock:
            if self._closed:
                raise RuntimeError("the generation session is closed")
            if self._in_flight & {j.row for j in jobs}:
                raise ValueError("a row may have only one turn in flight")
            self._in_flight.update(j.row for j in jobs)
            self._queue.extend(jobs)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, args=(self._ended,), name="trl-env-decode", daemon=True
                )
                self._thread.start()
            self._lock.notify()
        return [j.future for j in jobs]

    def _check_ids(self, ids: list[int]) -> None:
        """Ids past the embedding fail here, in one sentence (on a GPU they would fail the
        device, every row with it)."""
        size = self.engine.embedding_size
        bad = next((i for i in ids if not 0 <= i < size), None)
        if bad is not None:
            raise IndexError(f"token id {bad} is outside the model's embedding of {size} ids")

    # -- the loop --------------------------------------------------------------------------------
    def _run(self, ended: threading.Thread | None = None) -> None:
        """The loop: until the session closes, or until it has had nothing to do for
        ``IDLE_EXIT`` s (the model gets its own mode back; the next turn starts a new loop,
        once the one that ended has given the model back)."""
        engine = self.engine
        if ended is not None:
            ended.join()
        try:
            if engine.device.type == "cuda":  # a new thread starts on the first device
                torch.cuda.set_device(engine.device)
            with inference(engine.model, engine.attention):
                self.weights = engine.weights()  # graphs read these tensors: new ones, new graphs
                while True:
                    jobs, released = self._next()
                    if jobs is None:
                        return
                    self._forget(released)
                    if jobs:
                        self._prefill(jobs)
                    if self.jobs:
                        self._step()
        except BaseException as exc:  # a bug or a dead device: nobody waits forever
            log.warning("the decode loop stopped: %s", exc)
            with self._lock:
                self._closed, self._thread = True, None
            self._end(exc)

    def _next(self) -> tuple[list[_Job] | None, list[int]]:
        """Turns to prefill now and rows to forget; None when the loop should end."""
        with self._lock:
            idle_since = time.monotonic()
            while True:
                released, self._released = self._released, []
                if self._closed:
                    self._thread = None
                    return None, released
                jobs, wait = self._admit()
                if jobs or released or self.jobs:
                    return jobs, released
                if not self._queue and time.monotonic() - idle_since >= IDLE_EXIT:
                    # a submit from now on starts a new loop, which waits for this one to end
                    self._thread, self._ended = None, threading.current_thread()
                    return None, []
                self._lock.wait(IDLE_EXIT if wait is None else min(wait, IDLE_EXIT))

    def _admit(self) -> tuple[list[_Job], float | None]:
        """The queued turns to prefill now, or how long to wait for more (None: until one comes).

        Prefilling rows together costs about what one costs, so an idle loop waits for rows
        expected back soon (answered less than twice the typical round trip ago) for up to that
        long; a row away longer (a slow env) is not waited for. While rows decode, queued rows
        wait for a few steps' time unless many are queued, so one row's arrival does not stall
        every other row for a prefill.
        """
        queue = self._queue
        if not queue:
            return [], None
        now = time.monotonic()
        waited = now - queue[0].since
        if self.jobs:
            if len(queue) * 4 < len(self.jobs) and waited < PREFILL_EVERY * self.step_seconds:
                return [], None
        elif not all(j.gathered for j in queue):
            typical = statistics.median(self.away_seconds) if self.away_seconds else 0.0
            grace = max(MIN_GATHER, 2 * typical)
            expected = [t for row, t in self.away.items() if now - t < grace]
            if expected and waited < grace:
                return [], min(grace - waited, min(t + grace for t in expected) - now)
        self._queue = []
        for job in queue:
            since = self.away.pop(job.row, None)
            if since is not None:
                self.away_seconds.append(job.since - since)
        return queue, None

    # -- rows and slots ----------------------------------------------------------------------
    def _slot(self, row: int) -> int:
        """``row``'s slot; a new row's gets its random stream key."""
        new = row not in self.slot_of
        slot = self.take_slot(row)
        if new:
            self._buffers(len(self.lengths), 0).keys[slot] = self._key(row)
        return slot

    def _key(self, row: int) -> int:
        key = self.keys.get(row)
        return stream_key(self.seed, row) if key is None else key

    def _forget(self, rows: list[int]) -> None:
        buffers = self.engine.buffers
        for row in rows:
            self.pending.pop(row, None)
            self.away.pop(row, None)
            slot = self.slot_of.get(row)
            if slot is None:
                continue
            job = self.jobs.pop(slot, None)
            if job is not None:  # released mid-turn: its answer is no longer awaited
                self.counts.pop(slot, None)
                if buffers is not None:
                    buffers.live[slot] = False
                self._answer(job, RuntimeError("the row was released mid-turn"))
                self.away.pop(row, None)
            self.drop_slot(row)
            if buffers is not None:
                buffers.pos[slot] = 0  # its scratch writes land at column 0 of a free slot
                if buffers.seen is not None:
                    buffers.seen[slot] = False
        if self.sparse():
            self._compact()

    def _compact(self) -> None:
        """Move the rows down to the lowest slots: one copy of their caches, fewer slots a step."""
        old = self.compacted()
        index = torch.tensor(old, dtype=torch.long, device=self.engine.device)
        if old != list(range(len(old))):
            self.engine.cache.move(index)
            if self.engine.buffers is not None:
                self.engine.buffers.move(index)
        new_slot = {slot: i for i, slot in enumerate(old)}
        self.jobs = {new_slot[slot]: job for slot, job in self.jobs.items()}
        self.counts = {new_slot[slot]: n for slot, n in self.counts.items()}
        self.block = None

    def _buffers(self, slots: int, width: int) -> _Buffers:
        """The step buffers, grown to ``slots`` slots and turns of ``width`` ids."""
        engine = self.engine
        buffers = engine.buffers
        vocab = engine.logit_size
        penalty = self.params.repetition_penalty != 1.0
        if buffers is not None and (buffers.seen is not None) != penalty:
            buffers = None  # another session's sampling: new buffers, new graphs
        if buffers is None:
            buffers = _Buffers(engine.device, _bucket(max(slots, 1)), width, vocab, penalty)
        elif slots > buffers.slots or width > buffers.width:
            # a longer turn limit alone keeps the slots (and so the cache and its graphs' shapes)
            more = _bucket(max(slots, buffers.slots + buffers.slots // 4))
            buffers = buffers.grown(
                more if slots > buffers.slots else buffers.slots, max(width, buffers.width), vocab
            )
        if buffers is not engine.buffers:
            engine.buffers = buffers
            engine.captured.clear()
        return buffers

    def _reserve(self, capacity: int) -> None:
        """Room for every slot of the buffers and ``capacity`` columns (graphs dropped if the
        cache moves)."""
        engine = self.engine
        slots = engine.buffers.slots if engine.buffers is not None else len(self.lengths)
        block = COLUMN_BLOCK if engine.static else 1  # the cache rounds up to 64 itself
        before = engine.cache.version
        engine.cache.reserve(slots, -(-capacity // block) * block)
        if engine.cache.version != before:
            engine.captured.clear()

    def _stop_index(self, stops: frozenset[int]) -> int:
        index = self.stop_sets.get(stops)
        if index is None:
            vocab = self.engine.logit_size
            row = torch.zeros(1, vocab, dtype=torch.bool, device=self.engine.device)
            row[0, [i for i in stops if 0 <= i < vocab]] = True
            table = self.stop_table
            self.stop_table = row if table is None else torch.cat([table, row])
            index = self.stop_sets[stops] = len(self.stop_sets)
        return index

    # -- prefill --------------------------------------------------------------------------------
    def _prefill(self, jobs: list[_Job]) -> None:
        """Append each job's chunk to its row and sample its first id; failures fail the jobs."""
        new_rows = [j.row for j in jobs if j.row not in self.slot_of]
        try:
            self._prefill_rows(jobs)
        except Exception as exc:  # the rows are as they were: their lengths did not move
            self._forget([r for r in new_rows if r in self.slot_of])
            for job in jobs:
                self._answer(job, exc)

    def _prefill_rows(self, jobs: list[_Job]) -> None:
        engine = self.engine
        by_slot = sorted((self._slot(j.row), i) for i, j in enumerate(jobs))
        slots, jobs = [s for s, _ in by_slot], [jobs[i] for _, i in by_slot]
        width = max(len(j.chunk) for j in jobs)
        buffers = self._buffers(len(self.lengths), max(j.limit for j in jobs))
        offsets = [self.lengths[s] for s in slots]
        self._reserve(max(offsets) + width + max(j.limit for j in jobs) + 1)
        ids, dest = [], []
        for job, off in zip(jobs, offsets, strict=True):
            k = len(job.chunk)
            # Left-padded: the last column holds every row's last id. The padding writes past
            # the row's new end (scratch, overwritten by its next ids, never attended to).
            ids.append([engine.pad] * (width - k) + job.chunk)
            dest.append(list(range(off + k, off + width)) + list(range(off, off + k)))
        device = engine.device
        index = torch.tensor(slots, device=device)
        positions = torch.tensor(dest, device=device)
        cache = engine.cache
        cache.rows, cache.dest, cache.kv_len = index, positions, max(offsets) + width
        if slots == list(range(slots[0], slots[0] + len(slots))):  # a range: read in place
            cache.rows, cache.lo, cache.hi = None, slots[0], slots[-1] + 1
        try:
            out = engine.model(
                **engine.inputs(torch.tensor(ids, device=device), positions, cache.kv_len)
            )
        finally:
            cache.rows = None
        self.forward_calls += 1
        logits = out.logits[:, -1, :]
        ends = torch.tensor([o + len(j.chunk) for o, j in zip(offsets, jobs, strict=True)])
        ends = ends.to(device)
        seen = None
        if buffers.seen is not None:
            for slot, job in zip(slots, jobs, strict=True):
                buffers.seen[slot, torch.tensor(job.chunk, device=device)] = True
            seen = buffers.seen[index]
        u = uniforms(buffers.keys[index], ends)  # a token's counter is its position
        tokens, logprobs = sample(logits, self.params, None, seen, u)
        # The rows now hold their chunks; only now is the pending id consumed.
        for slot, job, off, end in zip(slots, jobs, offsets, ends.tolist(), strict=True):
            self.lengths[slot] = end
            job.offset, job.pending = off, self.pending.pop(job.row, None)
        buffers.pos[index] = ends
        self.block = None
        first, first_logprob = tokens.tolist(), logprobs.tolist()
        going = []
        for i, (slot, job) in enumerate(zip(slots, jobs, strict=True)):
            if job.limit <= 0:
                self._answer(job, Sample())
                continue
            token = first[i]
            if buffers.seen is not None:
                buffers.seen[slot, token] = True
            stopped = token in job.stops
            if stopped or job.limit == 1:
                self.pending[job.row] = token
                self._answer(job, Sample([token], [first_logprob[i]], stopped))
                continue
            going.append(i)
            self.jobs[slot] = job
            self.counts[slot] = 1
        if not going:
            return
        pick = torch.tensor(going, device=device)
        where = index[pick]
        buffers.feed[where] = tokens[pick]
        buffers.count[where] = 1
        buffers.limit[where] = torch.tensor([jobs[i].limit for i in going], device=device)
        sets = [self._stop_index(jobs[i].stops) for i in going]
        buffers.stopset[where] = torch.tensor(sets, device=device)
        buffers.stopped[where] = False
        buffers.ids[where, 0] = tokens[pick]
        buffers.logprobs[where, 0] = logprobs[pick].float()
        buffers.live[where] = True

    # -- decode ---------------------------------------------------------------------------------
    def _width(self) -> int:
        """The slots a step covers: up to the last slot in use, rounded up to a bucket."""
        hi = max(self.jobs) + 1
        if not self.engine.static:
            return hi
        return min(_bucket(hi), self.engine.buffers.slots)  # type: ignore[union-attr]

    def _step(self) -> None:
        """One decode step of every row with a turn in progress; rows whose turn ends answer."""
        start = time.perf_counter()
        engine = self.engine
        width = self._width()
        longest = max(self.lengths[:width])
        self._reserve(longest + 2)
        columns = longest + 1
        if engine.static:
            columns = min(-(-columns // COLUMN_BLOCK) * COLUMN_BLOCK, engine.cache.capacity)
        buffers = engine.buffers
        assert buffers is not None and self.stop_table is not None
        try:
            tokens, logprobs = self._run_step(width, columns)
        except Exception as exc:  # every decoding row fails; the others are untouched
            self._fail_decoding(exc)
            return
        self.steps += 1
        self.forward_calls += 1
        live = buffers.live[:width]
        count = buffers.count[:width]
        count += live
        index = buffers.index[:width]
        column = torch.where(live, count - 1, buffers.width)
        buffers.ids[index, column] = tokens
        buffers.logprobs[index, column] = logprobs.float()
        hit = live & self.stop_table[buffers.stopset[:width], tokens]
        done = hit | (live & (count >= buffers.limit[:width]))
        buffers.stopped[:width] |= hit
        if buffers.seen is not None:
            buffers.seen[index, tokens] |= live
        buffers.pos[:width] += live
        buffers.feed[:width] = tokens
        buffers.live[:width] = live & ~done
        ended = done.nonzero().flatten().tolist()  # the step's one host sync
        for slot in self.jobs:
            self.lengths[slot] += 1
            self.counts[slot] += 1
        if ended:
            self._finish(ended)
        took = time.perf_counter() - start
        self.step_seconds = took if not self.step_seconds else 0.8 * self.step_seconds + 0.2 * took

    def _finish(self, slots: list[int]) -> None:
        buffers = self.engine.buffers
        assert buffers is not None
        index = torch.tensor(slots, device=self.engine.device)
        n = max(self.counts[s] for s in slots)
        ids = buffers.ids[index, :n].tolist()
        logprobs = buffers.logprobs[index, :n].tolist()
        stopped = buffers.stopped[index].tolist()
        for i, slot in enumerate(slots):
            job = self.jobs.pop(slot)
            k = self.counts.pop(slot)
            self.pending[job.row] = ids[i][k - 1]
            self._answer(job, Sample(ids[i][:k], logprobs[i][:k], bool(stopped[i])))

    def _answer(self, job: _Job, result: Sample | BaseException) -> None:
        """Hand a turn its sample (or its failure); the row is then away until its next turn."""
        self.away[job.row] = time.monotonic()
        with self._lock:
            self._in_flight.discard(job.row)
        if job.future.done():
            return
        if isinstance(result, BaseException):
            job.future.set_exception(result)
        else:
            job.future.set_result(result)

    def _run_step(self, width: int, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and logprobs of one step over slots ``0..width``: replayed from a CUDA graph,
        compiled, or eager (all three write the same cache and draw the same ids)."""
        engine = self.engine
        if engine.graphs and not engine.failed:
            try:
                return self._replay(width, columns)
            except Exception as exc:
                engine.turn_off("CUDA graphs", exc)
        if engine.compile and not engine.failed:
            try:
                step = engine.step()
                return step(engine, self.params, width, columns, None)
            except Exception as exc:
                engine.turn_off("torch.compile", exc)
        return decode_step(engine, self.params, width, columns, self._uniforms(width))

    def _uniforms(self, width: int) -> torch.Tensor:
        """This step's numbers, hashed ``UNIFORM_BLOCK`` steps ahead: a decoding row's position
        moves by one a step, and any prefill or move of the rows starts a new block."""
        buffers = self.engine.buffers
        assert buffers is not None
        block = sampling.UNIFORM_BLOCK
        if self.block is None or self.block_step >= block or len(self.block) != width:
            ahead = torch.arange(1, block + 1, device=self.engine.device)
            self.block = uniforms(buffers.keys[:width, None], buffers.pos[:width, None] + ahead)
            self.block_step = 0
        u = self.block[:, self.block_step]
        self.block_step += 1
        return u

    def _replay(self, width: int, columns: int) -> tuple[torch.Tensor, torch.Tensor]:
        engine = self.engine
        key = (width, columns, self.params)
        layout = (id(engine.buffers), engine.cache.version, self.weights)
        if layout != engine.layout:
            engine.captured.clear()
            engine.layout = layout
        graph = engine.captured.get(key)
        if graph is None:
            graph = engine.captured[key] = engine.capture(self.params, width, columns)
        graph[0].replay()
        return graph[1]

    # -- failures and the end -----------------------------------------------------------------
    def _fail_decoding(self, exc: BaseException) -> None:
        buffers = self.engine.buffers
        for slot, job in list(self.jobs.items()):
            # Each decoding row goes back to where its turn began, as if it had not been sent.
            self.lengths[slot] = job.offset
            if buffers is not None:
                buffers.live[slot] = False
                buffers.pos[slot] = job.offset
            if job.pending is not None:
                self.pending[job.row] = job.pending
            self._answer(job, exc)
        self.jobs.clear()
        self.counts.clear()

    def _end(self, exc: BaseException) -> None:
        """Fail every turn not answered, and hand the engine back clean for the backend's next
        session (its memory stays allocated). Runs once, after the loop has stopped."""
        with self._lock:
            queued, self._queue = self._queue, []
            done, self._done = self._done, None
        for job in queued + list(self.jobs.values()):
            self._answer(job, exc)
        self.jobs.clear()
        self.counts.clear()
        if done is None:
            return
        buffers = self.engine.buffers
        if buffers is not None:
            buffers.live.zero_()
            if buffers.seen is not None:
                buffers.seen.zero_()
        self.forget_rows()
        done(self.engine)


def _bucket(n: int) -> int:
    """The smallest slot bucket holding ``n`` (a multiple of the largest past it)."""
    for size in SLOT_BUCKETS:
        if n <= size:
            return size
    top = SLOT_BUCKETS[-1]
    return -(-n // top) * top
