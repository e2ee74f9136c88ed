"""trl-env's own hook implementations: the built-in generation backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hookspecs import hookimpl


def _transformers_backend(**kwargs: Any) -> Any:
    from .backends.transformers import TransformersBackend

    return TransformersBackend(**kwargs)


@hookimpl
def register_backends(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("transformers", _transformers_backend)
