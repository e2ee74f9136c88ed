"""``calculator``: solve arithmetic word problems with add/subtract/multiply/divide tools.

Built with :class:`trl_env.tools.ToolEnv`: the tools are plain functions, the problems a
:class:`~trl_env.tools.TaskSet`, the reward 1.0 for the right number in ``<answer>`` and 0.0
otherwise.
"""

from __future__ import annotations

from functools import cache

from trl_env.tools import Tool, ToolEnv, as_tool, match_answer

from .problems import PROBLEMS
from .tools import TOOLS

INSTRUCTIONS = (
    "Solve the arithmetic word problem. Use the calculator tools for every computation instead "
    "of calculating in your head, then give the final number."
)


@cache
def calculator_tools() -> tuple[Tool, ...]:
    """The tools with their schemas, built once per process (it imports transformers)."""
    return tuple(as_tool(fn) for fn in TOOLS)


class CalculatorEnv(ToolEnv):
    """Arithmetic word problems; tools add, subtract, multiply, divide; reward 1 if correct."""

    def __init__(
        self,
        call_format: str = "qwen",
        max_turns: int = 8,
        max_calls: int = 5,
        max_output_chars: int = 500,
    ) -> None:
        super().__init__(
            calculator_tools(),
            PROBLEMS,
            match_answer,
            call_format=call_format,
            max_turns=max_turns,
            max_calls=max_calls,
            max_output_chars=max_output_chars,
            instructions=INSTRUCTIONS,
        )
