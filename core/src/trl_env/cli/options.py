"""Options shared by several commands, and ``key=value`` parsing."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
import yaml

from ..errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


def parse_kv(pairs: Iterable[str], what: str = "option") -> dict[str, Any]:
    """``["size=7", "shaped=no"]`` -> ``{"size": 7, "shaped": False}``: values are YAML scalars."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"Expected {what} as key=value, got {pair!r}.")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def env_options(f: F) -> F:
    f = click.option(
        "--env-arg",
        "env_args",
        multiple=True,
        metavar="KEY=VALUE",
        help="Option passed to the environment factory (repeatable).",
    )(f)
    return click.option(
        "--env", "env_name", required=True, help="Registered environment name (see `trl-env list`)."
    )(f)


def processor_options(f: F) -> F:
    f = click.option(
        "--processor-arg",
        "processor_args",
        multiple=True,
        metavar="KEY=VALUE",
        help="Option passed to the processor factory (repeatable).",
    )(f)
    return click.option(
        "--processor",
        "processor_name",
        required=True,
        help="Registered processor name, one per chat format (e.g. qwen3, llama3.1, gemma3).",
    )(f)


def model_option(f: F) -> F:
    return click.option(
        "--model",
        default="tiny",
        show_default=True,
        help="Model id, local path, or `tiny` for the processor family's built-in offline model.",
    )(f)
