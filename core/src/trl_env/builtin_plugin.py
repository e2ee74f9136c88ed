"""trl-env's own hook implementations: the built-in generation backends, registered exactly as a
third party's would be, and imported only when one is built (they need torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .hookspecs import hookimpl


class LazyFactory:
    """A factory named by ``"module:attribute"``, imported on its first call."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __repr__(self) -> str:
        return f"LazyFactory({self.target!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)


@hookimpl
def register_backends(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("transformers", LazyFactory("trl_env.backends.transformers:make_backend"))
    register("vllm", LazyFactory("trl_env.backends.vllm:make_backend"))
