"""JSON schemas of tool functions when transformers is not installed (the light core).

:func:`trl_env.tools.tool_schema` uses ``transformers.utils.get_json_schema``, the schema chat
templates expect, whenever transformers is importable. An env package such as the calculator
must also work in a light install (``pip install trl-env`` alone), so this module builds the
same schema for the common case and refuses the rest in one sentence: a Google-style docstring
(description, ``Args:``, optional ``Returns:`` and ``Raises:``) and parameters typed with
``int``, ``float``, ``str``, ``bool``, ``None``, ``Any``, ``list[...]``, ``tuple[...]``,
``dict[str, ...]``, ``Literal[...]`` and unions of these. ``core/tests/test_tool_schemas.py``
holds its output equal to transformers', key order included (the schema is shown to the model).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from .errors import ProtocolError

_SIMPLE: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean"}
_SECTION = re.compile(r"^\s*(Args|Returns|Raises):\s*$")
_ARG = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class _Unsupported(Exception):
    """A part of the function this builder does not describe; the message says which."""


def light_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """``{"type": "function", "function": {...}}`` for ``fn``, without transformers."""
    name = getattr(fn, "__name__", repr(fn))
    try:
        return _schema(fn, name)
    except _Unsupported as exc:
        raise ProtocolError(
            f"Tool {name!r} cannot be described without transformers: {exc}. Install "
            "transformers (trl-env[train]), or pass Tool(fn, schema={...})."
        ) from None


def _schema(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    if not fn.__doc__:
        raise _Unsupported("it has no docstring")
    description, args, returns = _parse_doc(inspect.cleandoc(fn.__doc__))
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise _Unsupported(f"its type hints do not resolve ({exc})") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise _Unsupported(f"variable arguments ({stars}{param.name}) cannot be called by name")
        if param.name not in hints:
            raise _Unsupported(f"argument {param.name!r} has no type hint")
        if param.name not in args:
            raise _Unsupported(f"the docstring does not describe argument {param.name!r}")
        properties[param.name] = {**_type(hints[param.name]), "description": args[param.name]}
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    function: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if "return" in hints:
        function["return"] = _type(hints["return"])
        if returns:
            function["return"]["description"] = returns
    return {"type": "function", "function": function}


def _parse_doc(doc: str) -> tuple[str, dict[str, str], str]:
    """The description, each argument's description, and the Returns text of a docstring."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in doc.splitlines():
        header = _SECTION.match(line)
        if header:
            current = header.group(1)
            sections[current] = []
        else:
            sections[current].append(line)
    args: dict[str, str] = {}
    lines = sections.get("Args", [])
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    last = ""
    for line in lines:
        match = _ARG.match(line[indent:]) if line[:indent].strip() == "" else None
        if match and len(line) - len(line.lstrip()) == indent:
            last = match.group(1)
            args[last] = match.group(2)
        elif last and line.strip():
            args[last] += " " + line.strip()
    # Descriptions are shown on one line, whitespace collapsed.
    args = {name: " ".join(text.split()) for name, text in args.items()}
    returns = "\n".join(sections.get("Returns", [])).strip()
    return "\n".join(sections[""]).strip(), args, returns


def _type(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint (without a description)."""
    if hint is Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if hint is list or origin is list:
        return {"type": "array", **({"items": _type(params[0])} if params else {})}
    if hint is tuple or origin is tuple:
        if Ellipsis in params:
            raise _Unsupported(f"{hint} (a tuple of any length) is not supported")
        return {"type": "array", **({"prefixItems": [_type(p) for p in params]} if params else {})}
    if hint is dict or origin is dict:
        if params and params[0] is not str:
            raise _Unsupported(f"{hint} has keys that are not str")
        return {"type": "object", **({"additionalProperties": _type(params[1])} if params else {})}
    if origin is typing.Literal:
        kinds = {type(p) for p in params}
        if len(kinds) != 1 or next(iter(kinds)) not in _SIMPLE:
            raise _Unsupported(f"{hint} mixes value types")
        return {"type": _SIMPLE[next(iter(kinds))], "enum": list(params)}
    if origin is typing.Union or origin is types.UnionType:
        members = [p for p in params if p is not type(None)]
        nullable = len(members) < len(params)
        if len(members) == 1:
            out = _type(members[0])
        elif all(m in _SIMPLE for m in members):
            out = {"type": [_SIMPLE[m] for m in members]}
        else:
            raise _Unsupported(f"{hint} is a union of types that are not int, float, str, bool")
        return {**out, "nullable": True} if nullable else out
    raise _Unsupported(f"the type {hint} is not supported")
