"""A processor, its tokenizer and a loaded model, and playing episodes with them, for tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..backends.base import Turn


@dataclass
class Stack:
    processor: Any
    tokenizer: Any
    model: Any
    path: str

    def play(self, seeds: Sequence[str], env: Any, **options: Any) -> list[Any]:
        """``batch_rollout`` of ``seeds`` with this stack's processor, tokenizer and model."""
        from ..rollout import batch_rollout

        return batch_rollout(
            list(seeds),
            env=env,
            processor=self.processor,
            tokenizer=self.tokenizer,
            model=self.model,
            **options,
        )


def load_stack(processor: str, model: str = "tiny", **options: Any) -> Stack:
    """Processor ``processor`` (with ``options``) and its ``model`` ("tiny": the offline one)."""
    from ..models import load_model
    from ..resolve import resolve_stack

    stack = resolve_stack(processor, options, model)
    return Stack(stack.processor, stack.tokenizer, load_model(stack.model_path), stack.model_path)


def turns(
    rows: Sequence[int], new_ids: Sequence[Sequence[int]], limits: Sequence[int]
) -> list[Turn]:
    """The :class:`~trl_env.backends.base.Turn` list of one ``Session.generate`` call, written
    as a row list, their new ids and their token limits."""
    return [Turn(*t) for t in zip(rows, new_ids, limits, strict=True)]
