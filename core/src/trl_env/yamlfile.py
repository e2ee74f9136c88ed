"""YAML read within bounds: a run's options are a few hundred values, so a file over
:data:`MAX_BYTES`, or aliases nested into billions of values ("billion laughs"), is refused in
one sentence before anything is expanded. Every YAML trl-env reads goes through here: config
files (``--config``, ``trl-env view``), each ``--env-arg``/``--processor-arg`` value, and a
value an env reads as YAML in turn (:func:`bounded_yaml`): a bomb inside one option's text
passes a file's bounds, since it is a short string there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError

MAX_BYTES = 1 << 20
MAX_VALUES = 100_000


def read_bounded(path: Path) -> str:
    """The UTF-8 text of ``path`` (undecodable bytes replaced), refused past :data:`MAX_BYTES`."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"Cannot read config file {path}: {exc.strerror}.") from exc
    if len(raw) > MAX_BYTES:
        raise UsageError(
            f"Config file {path} is over {MAX_BYTES // 1024} KiB; a run's options fit in "
            "far less, so it is refused."
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"Config file {path} is not UTF-8 text: {exc.reason}.") from exc


def read_mapping(path: Path) -> dict[str, Any]:
    """A config file's options: YAML within bounds holding a mapping (empty: no options)."""
    try:
        data = bounded_yaml(read_bounded(path), f"Config file {path}") or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"Config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"Config file {path} must hold a mapping of options.")
    return data


def bounded_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` of ``text``, refused in one sentence (a :class:`UsageError` naming
    ``where``: "Config file PATH", "--env-arg size") when aliases would expand it past
    :data:`MAX_VALUES` values (counted on the node graph, so counting costs nothing)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded(node, {}, set()) > MAX_VALUES:
            raise UsageError(
                f"{where} expands to more than {MAX_VALUES} values through its aliases "
                "(&name / *name); it is refused."
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values ``node`` holds once every alias is copied out (each node counted once)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:  # a node inside itself: no finite expansion
        return MAX_VALUES + 1
    open_.add(key)
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded(child, sizes, open_) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded(k, sizes, open_) + _expanded(v, sizes, open_)
            if total > MAX_VALUES:
                break
    open_.discard(key)
    sizes[key] = total
    return total
