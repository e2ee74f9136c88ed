"""A TRL ``environment_factory`` class as a trl-env env: the engine plays it, its methods tools.

A TRL env class (what ``GRPOTrainer(environment_factory=Cls)`` takes) has a constructor without
arguments, ``reset(**row)``, tools as public methods with Google-style docstrings, and perhaps
``get_reward()``. ``from_environment_factory(Cls)`` returns a factory of :class:`TrlClassEnv`,
whose episode is one instance of ``Cls``:

- ``reset(seed)`` calls ``Cls().reset(seed=seed)``: TRL passes a dataset row's columns, here the
  row ``{"seed": seed}``. The first prompt is ``prompt`` (what the TRL row's user message held)
  followed by what ``reset`` returns, as TRL joins them.
- The tools are the public methods with docstrings but ``reset`` and ``get_reward``; their
  schemas come from the docstrings as TRL's do, and the system prompt (``instructions``, by
  default the class's docstring) describes them in the call format of the run's processor
  (option ``call_format``, :mod:`trl_env.tool_formats`; ``qwen`` for the Qwen and Hermes
  templates). ``async`` tools and ``get_reward`` are awaited, as TRL awaits them.
- Each reply of the model is read for tool calls in that format and they run in order (at most
  ``max_calls``); their results, one per call, are the next text. A malformed call, an unknown
  tool, bad arguments or a tool that raises is its error's one line there, and the episode goes
  on: it is the model's mistake, not the env's failure.
- The episode ends on a reply without a tool call (as TRL's tool loop ends), after
  ``max_turns`` replies, or when the instance sets ``done`` (or ``finished``) to True. Its
  reward is then ``get_reward()``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any, cast

from ..envkit import EnvKit, Option
from ..errors import TrlEnvError
from ..tool_formats import FORMATS, get_format
from ..tools import Tool, run_calls, tool_schema

DEFAULT_INSTRUCTIONS = "Use the tools to complete the task."
EPISODE_OVER = "The episode is over; start a new one with reset."
NO_CALL = "The episode ended: the reply called no tool."


class TrlClassEnv(EnvKit):
    """One episode of a TRL env class; see the module docstring. Made by the factory that
    :func:`from_environment_factory` returns, with the options below."""

    env_name = "from_environment_factory"
    call_format = Option("qwen", "how the model writes tool calls", choices=tuple(FORMATS))
    max_turns = Option(10, "replies per episode", min=1)
    max_calls = Option(5, "tool calls run from one reply; the rest are skipped", min=1)
    max_output_chars = Option(2000, "each tool's reply is cut to this many characters", min=1)

    def __init__(
        self, cls: type, *, instructions: str | None = None, prompt: str = "", **options: Any
    ) -> None:
        super().__init__(**options)
        self.cls = cls
        self.instance = cls()
        self.tools = tools_of(self.instance)
        self.format = get_format(self.call_format)
        self.prompt = prompt
        self.turns = 0
        own = instructions if instructions is not None else inspect.getdoc(cls)
        schemas = [t.schema for t in self.tools.values()]
        self.system_prompt = (
            f"{own or DEFAULT_INSTRUCTIONS}\n\n{self.format.describe(schemas)}\n\n"
            f"You may make up to {self.max_calls} calls in one reply; they run in order. A reply "
            f"without a tool call ends the episode. You have {self.max_turns} replies."
        )

    def reset(self, seed: str) -> str:
        self.turns, self.reward, self.alive = 0, 0.0, True
        observation = self.instance.reset(seed=seed)
        return self.prompt + _text(observation)

    def step(self, action: str) -> str:
        if not self.alive:
            return EPISODE_OVER
        self.turns += 1
        calls = self.format.parse(str(action), self.max_calls + 1)
        if not calls:
            self._end()
            return NO_CALL
        reply = run_calls(calls, self.tools, self.format, self.max_calls, self.max_output_chars)
        finished = any(getattr(self.instance, flag, False) is True for flag in ("done", "finished"))
        if finished or self.turns >= self.max_turns:
            self._end()
        return reply

    def _end(self) -> None:
        self.alive = False
        self.reward = _awaited(self.instance.get_reward())

    def __repr__(self) -> str:
        return f"TrlClassEnv({self.cls.__qualname__})"


class _Factory:
    """What :func:`from_environment_factory` returns: each call makes one episode's env
    (picklable when the TRL class is importable, so worker processes can make it)."""

    def __init__(self, cls: type, instructions: str | None, prompt: str) -> None:
        self.cls, self.instructions, self.prompt = cls, instructions, prompt

    def __call__(self, **options: Any) -> TrlClassEnv:
        return TrlClassEnv(self.cls, instructions=self.instructions, prompt=self.prompt, **options)

    def __repr__(self) -> str:
        return f"from_environment_factory({self.cls.__qualname__})"


def from_environment_factory(
    cls: type, *, instructions: str | None = None, prompt: str = ""
) -> Callable[..., TrlClassEnv]:
    """A factory of trl-env envs from the TRL env class ``cls``; see the module docstring.

    Use it wherever an env factory goes (``make_rollout_func(env=...)``, ``batch_rollout``,
    ``EnvSpec``); its options (``call_format``, ``max_turns``, ``max_calls``,
    ``max_output_chars``) are keywords of the factory. ``cls`` is checked now: one sentence for
    a class TRL would not take or that leaves trl-env no reward.
    """
    if not isinstance(cls, type):
        raise TrlEnvError(
            f"from_environment_factory takes the env class TRL's environment_factory takes, not "
            f"{type(cls).__name__!r}."
        )
    name = cls.__qualname__
    for method in ("reset", "get_reward"):
        if not callable(getattr(cls, method, None)):
            why = "TRL resets it" if method == "reset" else "it is the episode's reward here"
            raise TrlEnvError(f"{name} has no {method}() method: {why}.")
    try:
        inspect.signature(cast(Any, cls).reset).bind(None, seed="train-0")
    except (TypeError, ValueError):  # ValueError: a signature Python cannot read
        raise TrlEnvError(
            f"{name}.reset takes no seed keyword: TRL passes each dataset row's columns as "
            "keywords, so give it reset(self, seed=None, **row)."
        ) from None
    if not _tool_methods(cls):
        raise TrlEnvError(
            f"{name} has no tools: TRL's tools are its public methods with docstrings."
        )
    return _Factory(cls, instructions, prompt)


def tools_of(instance: Any) -> dict[str, Tool]:
    """The tools of a TRL env instance by name: its public methods with docstrings, but
    ``reset`` and ``get_reward`` (TRL's rule), bound to it, each with its schema."""
    tools = {}
    for name in _tool_methods(type(instance)):
        method = getattr(instance, name)
        if inspect.iscoroutinefunction(method):
            method = _run_async(method)
        tools[name] = Tool(method, tool_schema(method))
    return tools


def _tool_methods(cls: type) -> list[str]:
    # On the class, as TRL lists them: listing the instance would evaluate its properties.
    return [
        name
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward") and fn.__doc__
    ]


def _run_async(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)  # keeps the signature run_call binds the arguments to
    def run(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(method(*args, **kwargs))

    return run


def _awaited(value: Any) -> Any:
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def _text(observation: Any) -> str:
    """What ``reset`` returned, as text: None is nothing, and a list of content blocks (TRL's
    multimodal form) is its text blocks joined."""
    if observation is None:
        return ""
    if isinstance(observation, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in observation
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return observation if isinstance(observation, str) else str(observation)
