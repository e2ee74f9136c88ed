"""``python``: the model solves number problems by writing Python that runs in a sandbox.

Each reply with code (see :mod:`trl_env_python.code_blocks`) runs as a fresh program in a
:class:`~trl_env_python.sandbox.Sandbox`; nothing carries over between runs. Its output,
cut to ``max_output_chars``, with a note when it failed, timed out or hit a limit, is the next
delta. ``<answer>...</answer>`` ends the episode: reward 1.0 if the number is right, else 0.0.
A reply with both code and an answer ends the episode without running the code. ``step``
never raises.
"""

from __future__ import annotations

from trl_env.tool_formats import ANSWER_CLOSE, ANSWER_OPEN, extract_answer
from trl_env.tools import Task, match_answer, truncate

from .code_blocks import extract_code, wrap_output
from .sandbox import Limits, Sandbox
from .tasks import PROBLEMS

INSTRUCTIONS = (
    "Solve the problem by writing Python code. Put the code in a ```python fenced block; it "
    "runs as a fresh program and you see what it prints (print the values you need). Nothing "
    "is kept between runs; do not rely on the network or on input. You can run code several times. "
    f"When you know the answer, reply with {ANSWER_OPEN}the number{ANSWER_CLOSE}; that ends "
    "the task (code in the same reply is not run)."
)


def _positive(name: str, value: object, integer: bool = True) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        what = "a positive integer" if integer else "a positive number"
        raise ValueError(f"option {name} must be {what}, not {value!r}")


class PythonEnv:
    """Number problems, a Python sandbox, and 1.0 for the right final answer."""

    def __init__(
        self,
        max_turns: int = 6,
        timeout: float = 10.0,
        cpu_seconds: int = 5,
        memory_mb: int = 512,
        max_processes: int = 32,
        max_output_chars: int = 2000,
    ) -> None:
        _positive("max_turns", max_turns)
        _positive("timeout", timeout, integer=False)
        _positive("cpu_seconds", cpu_seconds)
        _positive("memory_mb", memory_mb)
        _positive("max_processes", max_processes)
        _positive("max_output_chars", max_output_chars)
        self.max_turns = max_turns
        self.max_output_chars = max_output_chars
        self.sandbox = Sandbox(
            Limits(
                wall_seconds=timeout,
                cpu_seconds=cpu_seconds,
                memory_bytes=memory_mb * 1024 * 1024,
                processes=max_processes,
                # Bytes, not characters: 4 bytes per character covers any UTF-8 text.
                output_bytes=4 * max_output_chars + 1024,
            )
        )
        self.system_prompt = INSTRUCTIONS
        self.reward = 0.0
        self.alive = False
        self.task: Task | None = None
        self.answer: str | None = None
        self.turns = 0

    # -- optional extras -----------------------------------------------------------------
    def seeds(self, split: str, count: int) -> list[str]:
        return PROBLEMS.seeds(split, count)

    def close(self) -> None:
        """Nothing to release: every run cleans up after itself."""

    # -- protocol ------------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        self.task = PROBLEMS(seed)
        self.reward = 0.0
        self.alive = True
        self.answer = None
        self.turns = 0
        return self.task.question

    def step(self, action: str) -> str:
        if not self.alive or self.task is None:
            return "The episode is over; start a new one with reset."
        try:
            reply = self._step(action if isinstance(action, str) else str(action))
        except Exception as exc:  # never raise into the rollout; the model reads the reason
            reply = f"[environment error: {type(exc).__name__}: {exc}]"
        if self.alive and self.turns >= self.max_turns:
            self.alive = False
            self.reward = 0.0
            reply += f"\nOut of turns: no answer was given within {self.max_turns} replies."
        return reply

    def _step(self, action: str) -> str:
        assert self.task is not None
        self.turns += 1
        answer = extract_answer(action)
        if answer is not None:
            self.answer = answer
            self.reward = match_answer(answer, self.task)
            self.alive = False
            return f"Your answer was recorded: {truncate(answer, 200)}"
        code = extract_code(action)
        if code is None:
            return (
                "No code and no answer found. Write code in a ```python block, or give the "
                f"final answer as {ANSWER_OPEN}...{ANSWER_CLOSE}."
            )
        result = self.sandbox.run(code.source)
        return wrap_output(result.text(self.max_output_chars), code.style)
