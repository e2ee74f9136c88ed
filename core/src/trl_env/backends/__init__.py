"""Generation backends: the rollout engine talks to models through :class:`Backend`.

Backends are plugins: the built-in ``transformers`` and ``vllm`` register through the
``register_backends`` hook exactly as a third party's would, and :func:`build_backend` is the
one place any of them is constructed.
"""

from __future__ import annotations

from typing import Any

from .base import (
    Backend,
    BackendContext,
    BackendFactory,
    Sample,
    SamplingParams,
    Session,
    Turn,
)

DEFAULT_BACKEND = "transformers"


def build_backend(name: str = DEFAULT_BACKEND, **context: Any) -> Backend:
    """The backend registered as ``name``, built from a :class:`BackendContext`'s fields."""
    from ..plugins import manager

    factory = manager().backend(name)
    return factory(BackendContext(**context))


__all__ = [
    "DEFAULT_BACKEND",
    "Backend",
    "BackendContext",
    "BackendFactory",
    "Sample",
    "SamplingParams",
    "Session",
    "Turn",
    "build_backend",
]
