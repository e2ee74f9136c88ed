"""The small interface between the rollout engine and a generation backend.

A backend opens a :class:`Session`: a set of growing conversations ("rows"). Each call of
``Session.generate`` samples the next turn of *some* rows, one :class:`Turn` each; rows left out
of a call keep their state (an episode waiting for its environment), new rows may join at any
call, and rows the engine is done with are handed to ``release``. That is what lets episodes
advance without a turn barrier: the engine generates for whichever episodes are ready.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..protocols import Tokenizer

if TYPE_CHECKING:  # the options of `train --help` and tab completion read this module
    pass


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn; logprobs are reported under exactly this distribution.

    The convention is vLLM's ``processed_logprobs`` (the one TRL's importance-sampling correction
    expects): the log-probability of the sampled token after temperature, then top-k, then min-p,
    then top-p, renormalized. ``repetition_penalty`` is applied to the logits first, as vLLM does.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None


@dataclass
class Sample:
    """One row's turn: the sampled ids, their logprobs, and whether a stop token ended it.

    A non-empty ``error`` says this row's generation failed (a server gone, a malformed reply);
    the engine ends that episode with status ``error`` and keeps the others going.
    """

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False
    error: str = ""


def check_sample(sample: Sample, vocab_size: int | None) -> Sample:
    """``sample``, or a failed one whose ``error`` says in one sentence what the engine got wrong.

    Whatever an engine (a server over HTTP, a colocated vLLM, a model) answers goes into
    training samples: an id outside ``[0, vocab_size)`` fails the trainer's forward pass, and a
    logprob that is not finite or is above 0 (a probability above 1) poisons the importance
    weights. ``vocab_size`` None checks only that ids are not negative.
    """
    if sample.error:
        return sample
    if len(sample.ids) != len(sample.logprobs):
        return Sample(
            error=f"the engine returned {len(sample.ids)} token ids with "
            f"{len(sample.logprobs)} logprobs"
        )
    limit = vocab_size if vocab_size is not None else math.inf
    for token, logprob in zip(sample.ids, sample.logprobs, strict=True):
        if not 0 <= token < limit:
            where = f" of {vocab_size} ids" if vocab_size is not None else ""
            return Sample(
                error=f"the engine returned token id {token}, outside the model's vocabulary{where}"
            )
        if not (math.isfinite(logprob) and logprob <= 0.0):
            return Sample(
                error=f"the engine returned the logprob {logprob!r} for token id {token}, "
                "which no probability has (finite and at most 0 expected)"
            )
    return sample


def vocab_size_of(*sources: Any) -> int | None:
    """The first vocabulary size found among models, configs and tokenizers (a model's config
    first: its embedding may be padded past the tokenizer's ids), else None."""
    for source in sources:
        if source is None:
            continue
        config = getattr(source, "config", source)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        size = getattr(text, "vocab_size", None)
        if isinstance(size, int) and size > 0 and not hasattr(source, "get_vocab"):
            return size
        if hasattr(source, "get_vocab"):  # a tokenizer: its ids, added tokens included
            try:
                return len(source)
            except TypeError:
                continue
    return None


@dataclass(frozen=True)
class Turn:
    """One row's request in a ``Session.generate`` call: the ids inserted since its last turn
    (the whole prompt for a new row) and how many ids it may sample."""

    row: int
    new_ids: Sequence[int]
    max_new_tokens: int


class Session(Protocol):
    """Conversations that grow turn by turn (a backend may keep a KV cache per row).

    Optional, each looked up by the engine: ``vocab_size``, how many ids its model has (an
    episode given an id past it ends, :func:`check_sample`); ``streams(keys)``, called before
    the first ``generate`` of a seeded batch with each row's key (:func:`stream_key`), so that
    a row draws from its own random stream whichever rows share a call (without it a seeded
    batch may not replay); ``submit(turn, stop_ids) -> Future[Sample]``, for an engine that
    batches by itself (a server with continuous batching): each row's turn is then sent the
    moment the row is ready, from the engine's thread, for rows not in flight, and the future's
    sample is what ``generate([turn], stop_ids)[0]`` would return.
    """

    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        """Append each turn's ``new_ids`` to its row and sample the row's next turn.

        ``turns`` name any set of rows, each once: new ones join, absent ones keep their state
        until released. A row's earlier sampled ids are part of its history: only text inserted
        since its last call is passed in. A turn ends at a stop id (kept, ``stopped``) or after
        ``max_new_tokens`` ids. One :class:`Sample` per turn, in order.
        """
        ...

    def release(self, rows: Sequence[int]) -> None:
        """Forget ``rows``: their episodes are over."""
        ...

    def close(self) -> None: ...


class RowHistories:
    """The ids of each row's conversation so far, for a session whose engine is sent whole
    histories (vLLM's prefix cache makes that cheap) or writes after them: ``take`` adds a
    turn's inserted ids; ``release`` and ``close`` forget rows."""

    def __init__(self) -> None:
        self.history: dict[int, list[int]] = {}

    def take(self, turn: Turn) -> list[int]:
        """The row's history with the turn's inserted ids added (the row's own list)."""
        history = self.history.setdefault(turn.row, [])
        history.extend(turn.new_ids)
        return history

    def release(self, rows: Sequence[int]) -> None:
        for row in rows:
            self.history.pop(row, None)

    def close(self) -> None:
        self.history.clear()


def stream_key(*parts: object) -> int:
    """A 63-bit key derived from ``parts`` (run seed, batch, row, turn...), the same everywhere.

    A hash, not Python's ``hash``: it must not change between processes or runs.
    """
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


class Backend(Protocol):
    """Something that can open generation sessions."""

    def session(self, params: SamplingParams) -> Session: ...


@dataclass
class BackendContext:
    """What a backend factory may build from; each factory takes what it needs.

    ``model`` is a loaded ``PreTrainedModel`` (eval, play) and ``trainer`` a ``GRPOTrainer``
    (training: the trainer's model, or its vLLM engine). ``options`` holds the backend's own
    settings, e.g. ``{"vllm_server_base_url": "http://127.0.0.1:8000"}``.
    """

    tokenizer: Tokenizer | None = None
    model: Any = None
    trainer: Any = None
    options: dict[str, Any] = field(default_factory=dict)


class BackendFactory(Protocol):
    def __call__(self, context: BackendContext) -> Backend: ...
