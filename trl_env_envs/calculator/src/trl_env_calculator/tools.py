"""The four calculator tools. Their docstrings are the schemas the model reads."""

from __future__ import annotations


def _tidy(value: float) -> float | int:
    """``12 / 4`` shows as ``3``, not ``3.0``: fewer digits for the model to copy."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return _tidy(a + b)


def subtract(a: float, b: float) -> float:
    """Subtract b from a.

    Args:
        a: The number to subtract from.
        b: The number to subtract.
    """
    return _tidy(a - b)


def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return _tidy(a * b)


def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: The dividend.
        b: The divisor; must not be zero.
    """
    if b == 0:
        raise ZeroDivisionError("cannot divide by zero")
    return _tidy(a / b)


TOOLS = (add, subtract, multiply, divide)
