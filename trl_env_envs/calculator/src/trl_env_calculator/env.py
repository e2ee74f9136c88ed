"""``calculator``: solve arithmetic word problems with add/subtract/multiply/divide tools.

Built with :class:`trl_env.tools.ToolEnv`: the tools are plain functions, the problems a
:class:`~trl_env.tools.TaskSet`, the reward 1.0 for the right number in ``<answer>`` and 0.0
otherwise. ``success`` (read once the episode is over) is True when that number was right.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trl_env.envkit import Option
from trl_env.tool_formats import ANSWER_CLOSE, ANSWER_OPEN
from trl_env.tools import Tool, ToolEnv, as_task, as_tool, match_answer

from .problems import PROBLEMS, PROBLEMS_BY_OPERATIONS
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

    env_name = "calculator"
    # ToolEnv's options (call_format, max_turns, max_calls), with shorter tool replies.
    max_output_chars = Option(500, "each tool reply is cut to this many characters", min=1)
    operations = Option(
        0,
        "operations each problem needs, 1 to 3 (a curriculum's knob); 0: the standard mix",
        min=0,
        max=3,
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(
            calculator_tools(), PROBLEMS, match_answer, instructions=INSTRUCTIONS, **options
        )
        if self.operations:
            self.tasks = PROBLEMS_BY_OPERATIONS[self.operations]

    @property
    def success(self) -> bool:
        """The final answer was the right number (read once the episode is over)."""
        return self.answer is not None and self.reward == 1.0

    def demonstrate(self, seed: str) -> list[str]:
        """The right number, answered at once: the calculator's arithmetic is what a model
        learns from tool results in RL, the answer format is what a warm-up teaches."""
        task = as_task(self.tasks(str(seed)))
        return [f"{ANSWER_OPEN}{task.answer}{ANSWER_CLOSE}"]
