"""GRPOConfig's own field declarations (default and help), read without importing TRL.

``trl-env train --help`` must not import torch, transformers or trl (a second or more), yet
its GRPO flags should show TRL's own defaults and help. Those live in the dataclass sources
(``field(default=..., metadata={"help": ...})``), so this module reads them with :mod:`ast`
from the installed files, walking GRPOConfig's base classes in order. The full, typed
dataclass is used for validation once a training run imports TRL anyway.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# GRPOConfig and its bases, most derived first: (top-level package, module path, class).
_CHAIN = (
    ("trl", "trainer/grpo_config.py", "GRPOConfig"),
    ("trl", "trainer/base_config.py", "_BaseConfig"),
    ("transformers", "training_args.py", "TrainingArguments"),
)

_MISSING = object()


@dataclass(frozen=True)
class FieldInfo:
    """One GRPOConfig field as declared in TRL's source."""

    name: str
    default: Any  # a Python literal, or the source text when it is not one
    help: str
    annotation: str


@functools.cache
def grpo_fields() -> dict[str, FieldInfo]:
    """Every field of GRPOConfig found in the sources; {} when they cannot be read."""
    found: dict[str, FieldInfo] = {}
    for package, relpath, cls in _CHAIN:
        spec = importlib.util.find_spec(package)  # a top-level spec imports nothing
        if spec is None or not spec.submodule_search_locations:
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / relpath
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        for info in _class_fields(tree, cls):
            found.setdefault(info.name, info)  # the most derived declaration wins
    return found


def _class_fields(tree: ast.Module, cls: str) -> list[FieldInfo]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [info for stmt in node.body if (info := _field(stmt)) is not None]
    return []


def _field(stmt: ast.stmt) -> FieldInfo | None:
    if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
        return None
    default: Any = _MISSING
    help_text = ""
    value = stmt.value
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
        for kw in value.keywords:
            if kw.arg == "default":
                default = _literal(kw.value)
            elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                for key, item in zip(kw.value.keys, kw.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "help":
                        text = _literal(item)
                        help_text = text if isinstance(text, str) else ""
    elif value is not None:
        default = _literal(value)
    if default is _MISSING:
        return None
    return FieldInfo(stmt.target.id, default, help_text, ast.unparse(stmt.annotation))


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def first_sentence(text: str) -> str:
    """TRL's help texts run long; a flag's help shows their first sentence."""
    text = " ".join(text.split())
    head, dot, _ = text.partition(". ")
    return head + "." if dot else text
