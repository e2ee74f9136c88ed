"""Check option values against their declared types, refusing a wrong one in one sentence.

Config files, ``--grpo key=value`` and ``--env-arg``-style flags all arrive as YAML scalars, so
a wrong type (``max_steps: ten``) must be caught here, against the dataclass annotation, rather
than deep inside TRL as a traceback.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from ..config import comma_list
from ..errors import UsageError


def coerce(option: str, value: Any, hint: Any) -> Any:
    """``value`` as ``hint`` accepts it, or a :class:`UsageError` naming option and value.

    Text that reads as a number is taken as one where a number is expected: YAML reads
    ``1e-5`` (no dot) as text, and people write learning rates that way.
    """
    if _fits(value, hint):
        if isinstance(value, list) and _tuple_hint(hint):  # YAML has lists, the dataclass tuples
            return tuple(value)
        return value
    if isinstance(value, str) and _tuple_hint(hint) and _fits([value], hint):
        return comma_list(value)  # one name, or a comma list, where a list of names goes
    if isinstance(value, str) and _fits(1.0, hint):
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if _fits(number, hint):
                return number
    raise UsageError(f"{option} is {value!r}; expected {describe(hint)}.")


def _tuple_hint(hint: Any) -> bool:
    if get_origin(hint) in (Union, types.UnionType):
        return any(_tuple_hint(arg) for arg in get_args(hint))
    return get_origin(hint) is tuple


def _fits(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any or hint is object:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if origin is Literal:
        return value in get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin in (list, tuple, typing.Sequence):
        args = get_args(hint)
        return isinstance(value, list | tuple) and all(
            _fits(v, args[0]) for v in value if args and args[0] is not Ellipsis
        )
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value in {m.value for m in hint} or isinstance(value, hint)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint this checker does not model: the dataclass's own checks decide


def describe(hint: Any) -> str:
    """What a hint accepts, in words: ``int | None`` -> "an integer or null"."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(arg) for arg in get_args(hint)))
    if hint is None or hint is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in hint)
    names = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "text",
        dict: "a mapping",
    }
    if hint in names:
        return names[hint]
    if origin in (list, tuple, typing.Sequence):
        return "a list"
    if origin is dict:
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


def coerce_all(section: str, values: dict[str, Any], hints: dict[str, Any]) -> dict[str, Any]:
    """Each ``values[key]`` coerced to ``hints[key]``; unknown keys are left to the caller."""
    return {
        key: coerce(f"{section}{key}", value, hints[key]) if key in hints else value
        for key, value in values.items()
    }
