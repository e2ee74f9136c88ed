"""trl-env's own hook implementations: the built-in generation backends and env hosts, registered
exactly as a third party's would be, and imported only when one is built (backends need torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .discovery import LazyFactory
from .hookspecs import hookimpl


@hookimpl
def register_backends(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("transformers", LazyFactory("trl_env.backends.transformers:make_backend"))
    register("transformers-continuous", LazyFactory("trl_env.backends.continuous:make_backend"))
    register("vllm", LazyFactory("trl_env.backends.vllm:make_backend"))


@hookimpl
def register_env_hosts(register: Callable[..., None]) -> None:
    register("thread", LazyFactory("trl_env.hosts.local:ThreadHost"))
    register("process", LazyFactory("trl_env.hosts.local:ProcessHost"))
