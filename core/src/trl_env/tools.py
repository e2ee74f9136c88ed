"""Plain Python functions as an environment: the model calls them as tools, then answers.

Example::

    def add(a: float, b: float) -> float:
        \"\"\"Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        \"\"\"
        return a + b

    env = ToolEnv(tools=[add], tasks=lambda seed: ("What is 2 + 3?", 5))

Rules of an episode (also written into the system prompt):

- ``reset(seed)`` returns the task's question.
- Each ``step`` is one reply of the model. Tool calls in it (format: :mod:`trl_env.tool_formats`)
  run in order, at most ``max_calls`` of them; their results, one reply per call, are the next
  delta. Calls beyond ``max_calls`` are skipped with a note.
- A malformed call, an unknown tool, bad arguments or a tool that raises produce an error
  reply the model can read; the episode goes on. Each reply is cut to ``max_output_chars``.
- ``<answer>...</answer>`` ends the episode; ``reward_fn(answer, task)`` scores it. Tool calls
  in the same reply are not run: the answer is final.
- A reply with neither calls nor an answer gets a hint. After ``max_turns`` replies without an
  answer the episode ends with reward 0.

Tools run in this process, synchronously: a tool that hangs is stopped only by the rollout's
step timeout. Put untrusted work in a sandbox (see ``trl-env-python``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .envkit import EnvKit, Option
from .errors import ProtocolError
from .extras import SPLITS
from .tool_formats import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    FORMATS,
    BadCall,
    CallFormat,
    Reply,
    ToolCall,
    extract_answer,
    get_format,
)

DEFAULT_INSTRUCTIONS = "Solve the task. You can call tools; use their results to find the answer."


# -- tools -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tool:
    """A callable and its JSON schema (``{"type": "function", "function": {...}}``)."""

    fn: Callable[..., Any]
    schema: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.schema["function"]["name"])

    @property
    def properties(self) -> Mapping[str, Any]:
        return self.schema["function"].get("parameters", {}).get("properties", {})


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of ``fn`` from its type hints and Google-style docstring.

    Uses ``transformers.utils.get_json_schema`` (the schema chat templates expect), imported
    here so that ``import trl_env`` does not load transformers; without transformers (a light
    install), :func:`trl_env.tool_schemas.light_schema` builds the same schema for the common
    cases.
    """
    try:
        from transformers.utils import get_json_schema
    except ImportError:
        from .tool_schemas import light_schema

        return light_schema(fn)

    try:
        return get_json_schema(fn)
    except Exception as exc:
        name = getattr(fn, "__name__", repr(fn))
        raise ProtocolError(
            f"Tool {name!r} cannot be described: {exc}. Give it type hints and a docstring "
            "with an 'Args:' section, or pass Tool(fn, schema={...})."
        ) from exc


def as_tool(obj: Tool | Callable[..., Any]) -> Tool:
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise ProtocolError(f"A tool must be a function or a Tool, not {type(obj).__name__}.")
    return Tool(obj, tool_schema(obj))


# -- tasks -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """A question and the reference answer ``reward_fn`` compares against."""

    question: str
    answer: Any
    info: Mapping[str, Any] = field(default_factory=dict)


TaskLike = Task | tuple[str, Any]


def as_task(value: TaskLike) -> Task:
    if isinstance(value, Task):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return Task(value[0], value[1])
    raise ProtocolError(f"A task must be a Task or a (question, answer) pair, not {value!r}.")


class TaskSet:
    """Tasks generated from seeds, deterministic on every machine; train and eval never meet.

    ``generate(rng)`` builds one task from a ``random.Random`` seeded with the seed string.
    Seeds ``"train-<i>"`` and ``"eval-<i>"`` only get questions of their own split: the split of
    a question is fixed by a hash of its text (``eval_share`` of all questions are eval), and
    the generator is asked again until it produces one of the right split. Other seeds get any
    question.
    """

    def __init__(
        self,
        generate: Callable[[random.Random], TaskLike],
        *,
        name: str = "tasks",
        eval_share: float = 0.2,
        max_tries: int = 1000,
    ) -> None:
        if not 0.0 < eval_share < 1.0:
            raise ValueError(f"eval_share must be between 0 and 1, not {eval_share}")
        self.generate = generate
        self.name = name
        self.eval_share = eval_share
        self.max_tries = max_tries

    def split_of(self, question: str) -> str:
        digest = hashlib.sha256(f"{self.name}:{question}".encode("utf-8", "replace")).digest()
        return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < self.eval_share else "train"

    def __call__(self, seed: str) -> Task:
        seed = str(seed)
        want = seed.split("-", 1)[0] if seed.split("-", 1)[0] in SPLITS else None
        rng = random.Random(f"{self.name}:{seed}")
        for _ in range(self.max_tries):
            task = as_task(self.generate(rng))
            if want is None or self.split_of(task.question) == want:
                return task
        raise ValueError(
            f"{self.name}: no {want} question in {self.max_tries} tries; the generator "
            "has too few distinct questions"
        )

    def seeds(self, split: str, count: int) -> list[str]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        return [f"{split}-{i}" for i in range(count)]


# -- answers ---------------------------------------------------------------------------------
_NUMBER_NOISE = re.compile(r"[\s,$€£%]|\\boxed\{|[{}]")


def parse_number(text: str) -> float | None:
    """``"1,234"``, ``"$5"``, ``"-3.5"``, ``"3/4"``, ``"\\boxed{7}"`` as a number; else None."""
    cleaned = _NUMBER_NOISE.sub("", str(text)).rstrip(".")
    if not cleaned or len(cleaned) > 100:
        return None
    try:
        value = float(Fraction(cleaned))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def match_answer(given: str, task: Task) -> float:
    """1.0 if ``given`` equals the task's answer (as numbers when both are numbers), else 0.0.

    Text is compared case-insensitively with whitespace collapsed.
    """
    expected = task.answer
    want = parse_number(str(expected)) if not isinstance(expected, bool) else None
    got = parse_number(given)
    if want is not None and got is not None:
        if want.is_integer():  # an absolute tolerance: 121013309 is not 121013308
            return 1.0 if math.isclose(got, want, rel_tol=0.0, abs_tol=1e-6) else 0.0
        return 1.0 if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9) else 0.0
    norm = lambda s: " ".join(str(s).split()).casefold()  # noqa: E731
    return 1.0 if norm(given) == norm(expected) else 0.0


# -- running one call ------------------------------------------------------------------------
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


def _type_error(name: str, value: Any, prop: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not fit the JSON schema ``prop`` (top level only), or None."""
    if value is None and prop.get("nullable"):
        return None
    kinds = prop.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if isinstance(kinds, str) else []
    if kinds:
        fits = any(
            (k == "null" and value is None)
            or (
                k in _JSON_TYPES
                and isinstance(value, _JSON_TYPES[k])
                and not (isinstance(value, bool) and k in ("integer", "number"))
            )
            for k in kinds
        )
        if not fits:
            shown = json.dumps(value, ensure_ascii=False, default=repr)[:60]
            return f"argument {name!r} must be {' or '.join(kinds)}, got {shown}"
    if "enum" in prop and value not in prop["enum"]:
        return f"argument {name!r} must be one of {prop['enum']}, got {value!r}"
    return None


def _text_of(value: Any) -> str:
    """How a tool's return value is shown: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # circular structures, a __str__ that raises
        try:
            return repr(value)
        except Exception:
            return f"<a {type(value).__name__} that cannot be shown>"


def _exc_text(exc: BaseException) -> str:
    try:
        detail = str(exc)
    except Exception:
        detail = ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a note saying how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... cut: {len(text) - limit} more characters]"


def run_call(call: ToolCall | BadCall, tools: Mapping[str, Tool]) -> tuple[str, bool]:
    """Run one parsed call: its result text, or the error text and False. Never raises."""
    if isinstance(call, BadCall):
        return call.message, False
    tool = tools.get(call.name)
    if tool is None:
        return (
            f"unknown tool {call.name!r}. Available tools: {', '.join(tools)}.",
            False,
        )
    try:
        signature: inspect.Signature | None = inspect.signature(tool.fn)
    except (TypeError, ValueError):  # builtins without a signature: the call itself checks
        signature = None
    bound = None
    if signature is not None:
        try:
            bound = signature.bind(*call.args, **call.kwargs)
        except TypeError as exc:
            return f"bad arguments for {call.name}: {exc}", False
    if bound is not None:
        for arg, value in bound.arguments.items():
            prop = tool.properties.get(arg)
            if prop is None:
                continue
            if prop.get("type") == "integer" and isinstance(value, float) and value.is_integer():
                bound.arguments[arg] = value = int(value)
            problem = _type_error(arg, value, prop)
            if problem:
                return f"bad arguments for {call.name}: {problem}", False
    try:
        if bound is None:
            result = tool.fn(*call.args, **call.kwargs)
        else:
            result = tool.fn(*bound.args, **bound.kwargs)
    except (Exception, SystemExit) as exc:  # the tool's failure is the model's information
        return f"{call.name} raised {_exc_text(exc)}", False
    return _text_of(result), True


def run_calls(
    calls: Sequence[ToolCall | BadCall],
    tools: Mapping[str, Tool],
    call_format: CallFormat,
    max_calls: int,
    max_chars: int,
) -> str:
    """The reply to one model turn's parsed ``calls``: the first ``max_calls`` run in order,
    each result cut to ``max_chars``, rendered by ``call_format``, with a note when some were
    skipped. Never raises for what the calls or the tools do."""
    replies = []
    for call in calls[:max_calls]:
        text, ok = run_call(call, tools)
        replies.append(Reply(call, truncate(text, max_chars), ok))
    reply = call_format.render(replies)
    if len(calls) > max_calls:
        skipped = "the rest were skipped"
        reply += f"\n[Only the first {max_calls} tool calls of a reply are run; {skipped}.]"
    return reply


# -- the environment -------------------------------------------------------------------------
RewardFn = Callable[[str, Task], float]


class AnswerEnv(EnvKit):
    """The episode of a task answered in ``<answer>`` tags within ``max_turns`` replies: the
    state and endings shared by :class:`ToolEnv` and envs like it (e.g. trl-env-python)."""

    max_turns: int
    task: Task | None = None
    answer: str | None = None
    turns = 0

    def begin(self, task: Task) -> str:
        """Start the episode of ``task``; its question is the first prompt."""
        self.task, self.answer, self.turns = task, None, 0
        self.reward, self.alive = 0.0, True
        return task.question

    def record(self, answer: str, reward: float) -> str:
        """End the episode on the final ``answer``, scored ``reward``."""
        self.answer, self.reward, self.alive = answer, reward, False
        return f"Your answer was recorded: {truncate(answer, 200)}"

    def out_of_turns(self) -> str:
        """End the episode with reward 0; the text to append to the last reply."""
        self.alive, self.reward = False, 0.0
        return f"\nOut of turns: no answer was given within {self.max_turns} replies."


# A step after the episode ended.
EPISODE_OVER = "The episode is over; start a new one with reset."


class ToolEnv(AnswerEnv):
    """An :class:`~trl_env.protocols.Env` whose actions are tool calls and a final answer.

    ``tasks`` is a :class:`TaskSet` or any callable ``seed -> Task | (question, answer)``;
    ``reward_fn(answer, task)`` defaults to :func:`match_answer`. A ``reward_fn`` that raises
    is a bug in the caller's code and propagates. The options below are env-kit options
    (:mod:`trl_env.envkit`); ``call_format`` also takes a :class:`CallFormat` object.
    """

    call_format = Option("qwen", "how the model writes tool calls", choices=tuple(FORMATS))
    max_turns = Option(8, "replies per episode; then it ends with reward 0", min=1)
    max_calls = Option(5, "tool calls run from one reply; the rest are skipped", min=1)
    max_output_chars = Option(2000, "each tool reply is cut to this many characters", min=1)

    def __init__(
        self,
        tools: Sequence[Tool | Callable[..., Any]],
        tasks: Callable[[str], TaskLike],
        reward_fn: RewardFn | None = None,
        *,
        instructions: str = DEFAULT_INSTRUCTIONS,
        **options: Any,
    ) -> None:
        call_format = options.get("call_format", "qwen")
        if not isinstance(call_format, str):  # a CallFormat object: no option value to check
            options["call_format"] = str(getattr(call_format, "name", "custom"))
        super().__init__(**options)
        if not callable(tasks):
            raise ProtocolError("tasks must be a TaskSet or a callable seed -> (question, answer)")
        self.tools: dict[str, Tool] = {}
        for tool in map(as_tool, tools):
            if tool.name in self.tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        if not self.tools:
            raise ValueError("a ToolEnv needs at least one tool")
        self.format = get_format(call_format)
        self.tasks = tasks
        self.reward_fn: RewardFn = reward_fn or match_answer
        self.system_prompt = self._system_prompt(instructions)

    def _system_prompt(self, instructions: str) -> str:
        schemas = [t.schema for t in self.tools.values()]
        return (
            f"{instructions}\n\n{self.format.describe(schemas)}\n\n"
            f"You may make up to {self.max_calls} calls in one reply; they run in order. "
            f"When you know the final answer, reply with {ANSWER_OPEN}your answer{ANSWER_CLOSE}. "
            f"That ends the task: tool calls in the same reply are not run. You have "
            f"{self.max_turns} replies."
        )

    # -- optional extras -----------------------------------------------------------------
    def seeds(self, split: str, count: int) -> list[str]:
        own = getattr(self.tasks, "seeds", None)
        if callable(own):
            return [str(s) for s in own(split, count)]
        return super().seeds(split, count)

    # -- protocol ------------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        return self.begin(as_task(self.tasks(seed)))

    def step(self, action: str) -> str:
        if not self.alive or self.task is None:
            return EPISODE_OVER
        action = action if isinstance(action, str) else str(action)
        self.turns += 1
        answer = extract_answer(action)
        if answer is not None:
            return self.record(answer, float(self.reward_fn(answer, self.task)))
        calls = self.format.parse(action, self.max_calls + 1)
        if not calls:
            reply = (
                "No tool call and no answer found. Call a tool like this:\n"
                f"{self.format.example}\n"
                f"or give your final answer as {ANSWER_OPEN}...{ANSWER_CLOSE}."
            )
        else:
            reply = run_calls(calls, self.tools, self.format, self.max_calls, self.max_output_chars)
        if self.turns >= self.max_turns:
            reply += self.out_of_turns()
        return reply
