"""``python``: the model solves number problems by writing Python that runs in a sandbox.

Each reply with code (see :mod:`trl_env_python.code_blocks`) runs as a fresh program in a
:class:`~trl_env_python.sandbox.Sandbox`; nothing carries over between runs. Its output,
cut to ``max_output_chars``, with a note when it failed, timed out or hit a limit, is the next
delta. ``<answer>...</answer>`` ends the episode: reward 1.0 if the number is right, else 0.0.
A reply with both code and an answer ends the episode without running the code. ``step``
never raises. ``success`` (read once the episode is over) is True when the answer was right.
"""

from __future__ import annotations

from typing import Any

from trl_env.envkit import Option
from trl_env.tool_formats import ANSWER_CLOSE, ANSWER_OPEN, extract_answer
from trl_env.tools import EPISODE_OVER, AnswerEnv, Task, match_answer, parse_number

from .code_blocks import extract_code, wrap_output
from .sandbox import Limits, MiB, Sandbox
from .tasks import PROBLEMS

INSTRUCTIONS = (
    "Solve the problem by writing Python code. Put the code in a ```python fenced block; it "
    "runs as a fresh program and you see what it prints (print the values you need). Nothing "
    "is kept between runs; do not rely on the network or on input. You can run code several times. "
    f"When you know the answer, reply with {ANSWER_OPEN}the number{ANSWER_CLOSE}; that ends "
    "the task (code in the same reply is not run)."
)


def score_answer(given: str, task: Task) -> float:
    """1.0 for exactly the task's whole-number answer, else 0.0.

    ``match_answer`` allows a relative error of 1e-6, which would take 121013309 for the prime
    sum 121013308; every answer here is an exact integer, so nothing but it counts.
    """
    if isinstance(task.answer, int) and not isinstance(task.answer, bool):
        return 1.0 if parse_number(given) == task.answer else 0.0
    return match_answer(given, task)


class PythonEnv(AnswerEnv):
    """Number problems, a Python sandbox, and 1.0 for the right final answer."""

    env_name = "python"
    # Fewer replies leave less room to run and fix code: the difficulty knob for curricula.
    max_turns = Option(
        6, "replies per episode; the episode ends with reward 0 after them", min=1, max=100
    )
    timeout = Option(10.0, "wall-clock seconds per run; then every process of it dies", above=0.0)
    cpu_seconds = Option(5, "CPU seconds per process (RLIMIT_CPU)", min=1)
    memory_mb = Option(512, "address space per process, MiB (RLIMIT_AS)", min=1)
    total_memory_mb = Option(
        1024, "memory of all the run's processes together, MiB (see the README)", min=1
    )
    max_processes = Option(32, "processes and threads of one run", min=1)
    max_output_chars = Option(2000, "output shown to the model; longer output is cut", min=1)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sandbox = Sandbox(
            Limits(
                wall_seconds=self.timeout,
                cpu_seconds=self.cpu_seconds,
                memory_bytes=self.memory_mb * MiB,
                total_memory_bytes=self.total_memory_mb * MiB,
                processes=self.max_processes,
                # Bytes, not characters: 4 bytes per character covers any UTF-8 text.
                output_bytes=4 * self.max_output_chars + 1024,
            )
        )
        self.system_prompt = INSTRUCTIONS

    # -- optional extras -----------------------------------------------------------------
    @property
    def success(self) -> bool:
        """The final answer was the right number (read once the episode is over)."""
        return self.answer is not None and self.reward == 1.0

    def seeds(self, split: str, count: int) -> list[str]:
        return PROBLEMS.seeds(split, count)

    # -- protocol ------------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        return self.begin(PROBLEMS(seed))

    def step(self, action: str) -> str:
        if not self.alive or self.task is None:
            return EPISODE_OVER
        try:
            reply = self._step(action if isinstance(action, str) else str(action))
        except Exception as exc:  # never raise into the rollout; the model reads the reason
            reply = f"[environment error: {type(exc).__name__}: {exc}]"
        if self.alive and self.turns >= self.max_turns:
            reply += self.out_of_turns()
        return reply

    def _step(self, action: str) -> str:
        assert self.task is not None
        self.turns += 1
        answer = extract_answer(action)
        if answer is not None:
            return self.record(answer, score_answer(answer, self.task))
        code = extract_code(action)
        if code is None:
            return (
                "No code and no answer found. Write code in a ```python block, or give the "
                f"final answer as {ANSWER_OPEN}...{ANSWER_CLOSE}."
            )
        result = self.sandbox.run(code.source)
        return wrap_output(result.text(self.max_output_chars), code.style)
