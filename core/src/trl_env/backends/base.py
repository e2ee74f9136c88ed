"""The small interface between the rollout engine and a generation backend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are drawn; logprobs are reported under exactly this distribution."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None


@dataclass
class Sample:
    """One row's turn: the sampled ids, their logprobs, and whether a stop token ended it."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = False


class Session(Protocol):
    """A batch of conversations that grow turn by turn (a backend may keep a KV cache per row)."""

    def generate(
        self,
        rows: Sequence[int],
        new_ids: Sequence[list[int]],
        max_new_tokens: Sequence[int],
        stop_ids: frozenset[int],
    ) -> list[Sample]:
        """Append ``new_ids[i]`` to row ``rows[i]`` and sample its next turn.

        Rows absent from ``rows`` have finished and may be forgotten. A row's earlier sampled ids
        are part of its history: only text inserted since the last call is passed in.
        """
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    """Something that can open generation sessions."""

    def session(self, params: SamplingParams) -> Session: ...
