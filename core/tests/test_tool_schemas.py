"""Tool schemas without transformers equal transformers' own, key order included."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Literal, Optional, Union

import pytest

from trl_env.errors import ProtocolError
from trl_env.tool_schemas import light_schema
from trl_env_calculator.tools import TOOLS as CALCULATOR_TOOLS

# The reference: only where transformers is installed (the light core's tests run without it).
get_json_schema = pytest.importorskip("transformers.utils").get_json_schema


def plain(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def rich(
    x: int,
    names: list[str],
    mode: Literal["a", "b"] = "a",
    limit: Optional[float] = None,  # noqa: UP045 - the old spelling must work too
    flag: bool = False,
    data: dict | None = None,
) -> str:
    """Do a thing
    over two lines.

    More text here.

    Args:
        x: The x value,
            continued on a second line.
        names: Some names.
        mode: The mode.
        limit: A limit.
        flag: A flag.
        data: Extra data.

    Returns:
        A string result,
            over two lines.

    Raises:
        ValueError: never.
    """
    return ""


def unions(
    x: int | str,
    y: tuple[int, str],
    z: list,
    w: Union[int, str, None] = None,  # noqa: UP007
    v: Any = None,
    u: dict[str, int] | None = None,
) -> None:
    """Unions, tuples and the rest.
    Args:
        x (int or str): u
        y: t
        z: l
        w: w
        v: anything
        u: mapping
    """


def literals(x: Literal[1, 2], y: list[Literal["a"]]) -> bool:
    """Literals.

    Args:
      x: the x
      y:   the y
    """
    return True


def no_return_type(x: int):
    """Only a description.

    Args:
        x: the x

    Returns:
        Ignored without a return type.
    """


def all_optional(x: float = 1.0, y: str = "a") -> list[int]:
    """Nothing required.

    Args:
        x: the x
        y: the y
    """
    return []


@pytest.mark.parametrize(
    "fn", [plain, rich, unions, literals, no_return_type, all_optional, *CALCULATOR_TOOLS]
)
def test_light_schema_equals_transformers(fn) -> None:
    assert json.dumps(light_schema(fn)) == json.dumps(get_json_schema(fn))


def no_doc(x: int) -> int:
    return x


def undocumented_arg(x: int, y: int) -> int:
    """Sum.

    Args:
        x: the x
    """
    return x + y


def untyped(x, y: int) -> int:
    """Sum.

    Args:
        x: the x
        y: the y
    """
    return y


def var_args(*numbers: int) -> int:
    """Sum.

    Args:
        numbers: the numbers
    """
    return sum(numbers)


def open_tuple(x: tuple[int, ...]) -> int:
    """Sum.

    Args:
        x: the numbers
    """
    return sum(x)


@pytest.mark.parametrize(
    ("fn", "why"),
    [
        (no_doc, "it has no docstring"),
        (undocumented_arg, "the docstring does not describe argument 'y'"),
        (untyped, "argument 'x' has no type hint"),
        (open_tuple, r"tuple\[int, \.\.\.\] \(a tuple of any length\)"),
        # transformers describes *numbers as one required integer, which no call can pass by
        # name; refusing it is the one place the two differ.
        (var_args, r"variable arguments \(\*numbers\) cannot be called by name"),
    ],
)
def test_what_it_cannot_describe_is_one_sentence(fn, why: str) -> None:
    with pytest.raises(ProtocolError, match=f"cannot be described without transformers: {why}"):
        light_schema(fn)
    if fn is not var_args:
        with pytest.raises(Exception):  # noqa: B017 - transformers refuses these too
            get_json_schema(fn)


def test_calculator_plays_without_transformers() -> None:
    # A light install: importing transformers fails, as it does when it is not installed.
    script = (
        "import sys\n"
        "sys.modules['transformers'] = None\n"
        "from trl_env_calculator import CalculatorEnv\n"
        "env = CalculatorEnv()\n"
        "env.reset('train-0')\n"
        "print(env.system_prompt)\n"
        'call = \'{"name": "add", "arguments": {"a": 2, "b": 3}}\'\n'
        "print(env.step(f'<tool_call>{call}</tool_call>'))\n"
    )
    light = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert light.returncode == 0, light.stderr
    full = subprocess.run(
        [sys.executable, "-c", script.replace("sys.modules['transformers'] = None", "")],
        capture_output=True,
        text=True,
    )
    assert full.returncode == 0, full.stderr
    assert light.stdout == full.stdout and "<tool_response>\n5\n</tool_response>" in light.stdout
