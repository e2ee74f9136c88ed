"""Options shared by several commands, and ``key=value`` parsing."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
import yaml

from ..errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


def parse_kv(pairs: Iterable[str], what: str = "option") -> dict[str, Any]:
    """``["size=7", "shaped=no"]`` -> ``{"size": 7, "shaped": False}``: values are YAML scalars.

    Lists (``modules=[q_proj, v_proj]``) are allowed; mappings, repeated keys and keys that are
    not Python names are refused, since a plugin option can be none of those.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise UsageError(f"Expected {what} as key=value with a name for key, got {pair!r}.")
        if key in out:
            raise UsageError(f"{what} {key!r} is given twice.")
        try:
            parsed = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            parsed = value  # not YAML: take the text as it is
        if isinstance(parsed, dict):
            raise UsageError(f"{what} {key}={value!r} is a mapping; quote it if it is text.")
        out[key] = parsed
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
