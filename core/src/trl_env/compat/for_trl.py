"""A trl-env env as the class TRL's ``GRPOTrainer(environment_factory=...)`` takes.

``environment_factory(name, **options)`` makes a class for the env ``name`` (a registered env,
with its options checked now) that follows TRL's contract, as TRL 1.16's ``GRPOTrainer`` reads
it:

- a constructor without arguments: TRL makes one instance per rollout slot and reuses it;
- ``reset(**row)``: a fresh env for each episode, reset with the dataset row's ``seed`` column,
  or, in a row without one, with the env's next training seed (``train-0``, ``train-1``, ... for
  most envs: the class counts them); it returns the env's first text, which TRL appends to the
  row's last user message;
- one tool, the env's action, named after the env (``guess``, ``textworld``) and taking
  ``action: str``; its docstring is the env's system prompt with an ``Args:`` section, from which
  TRL (transformers' ``get_json_schema``) builds the schema the chat template shows the model;
  once the env is done (it is no longer alive, or played its ``max_turns`` actions) the tool
  says so instead of stepping;
- ``get_reward()``: the env's reward. TRL 1.16 adds it as a reward function of weight 1 named
  after the class (``GuessEnvironment``), so ``reward_funcs`` may be left out.

Env calls go through the engine's own checks (:mod:`trl_env.boundary`): text repaired and cut to
``max_env_chars``, ``alive`` a bool, the reward a finite number. What env code raises reaches
TRL, which shows a tool's error to the model and stops on a ``reset`` that raises.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from ..boundary import EnvHandle, reset_job, reward_job, step_job
from ..config import DEFAULT_MAX_TURNS, RolloutConfig
from ..errors import UsageError
from ..extras import close, max_turns, seeds, system_prompt
from ..spec import EnvSpec

EPISODE_OVER = "The episode is over: reply without calling the tool."
# transformers' docstring parser ends the description at the first of these, wherever it is.
_SECTIONS = re.compile(r"\b(Args|Returns|Raises):")
_RESERVED = {"reset", "get_reward"}


class EnvironmentForTrl:
    """The base of the classes :func:`environment_factory` makes: one env's episodes, one at a
    time, for TRL. Its only public methods are TRL's ``reset``, ``get_reward`` and the tool the
    subclass adds (TRL makes a tool of every other public method)."""

    env_name: ClassVar[str]
    _make: ClassVar[Callable[[], Any]]
    _fresh: ClassVar[Iterator[str]]
    _max_chars: ClassVar[int] = RolloutConfig().max_env_chars

    def __init__(self) -> None:
        self._handle: EnvHandle | None = None
        self.seed = ""
        self.turns = 0
        self.max_turns = DEFAULT_MAX_TURNS
        self.done = True

    def reset(self, **row: Any) -> str:
        """Start an episode of the row's ``seed`` (else the env's next training seed); its
        first text."""
        self._close()
        seed = row.get("seed")
        self.seed = str(seed) if seed is not None else next(type(self)._fresh)
        env = type(self)._make()
        self._handle = EnvHandle(env, type(self).env_name)
        text = reset_job(self._handle, self.seed, self._max_chars)().text
        self.turns, self.done = 0, False
        self.max_turns = max_turns(env, DEFAULT_MAX_TURNS)
        return text

    def get_reward(self) -> float:
        """The env's reward for the episode (0.0 before any)."""
        if self._handle is None:
            return 0.0
        return reward_job(self._handle)()[0]

    def _act(self, action: str) -> str:
        if self._handle is None:
            raise RuntimeError("The episode has not started: TRL calls reset() first.")
        if self.done:
            return EPISODE_OVER
        reply, alive = step_job(self._handle, str(action), self._max_chars)()
        self.turns += 1
        self.done = not alive or self.turns >= self.max_turns
        return reply.text

    def _close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed!r}, turns={self.turns})"


def environment_factory(env: str | EnvSpec, /, **options: Any) -> type[EnvironmentForTrl]:
    """The class TRL's ``GRPOTrainer(environment_factory=...)`` takes, for the registered env
    ``env`` (or an :class:`~trl_env.spec.EnvSpec`) made with ``options``; see the module
    docstring. Bad names and options fail here, with the registry's message."""
    spec = env if isinstance(env, EnvSpec) else EnvSpec(env)
    if options:
        spec = EnvSpec(spec.env, options={**spec.options, **options}, name=spec.name)
    make = spec.factory()
    probe = make()
    try:
        prompt = system_prompt(probe)
        train_seeds = _fresh_seeds(make)
    finally:
        close(probe)
    tool = tool_name(spec.label)
    cls_name = "".join(part.capitalize() for part in tool.split("_")) + "Environment"

    def act(self, action: str) -> str:  # self unannotated: transformers reads every hint
        return self._act(action)

    act.__name__ = tool
    act.__qualname__ = f"{cls_name}.{tool}"
    act.__doc__ = tool_docstring(prompt)
    namespace = {
        tool: act,
        "env_name": spec.label,
        "_make": staticmethod(make),
        "_fresh": train_seeds,
        "__module__": __name__,
        "__doc__": f"The env {spec.label!r} for TRL's environment_factory; its tool is {tool}.",
    }
    return type(cls_name, (EnvironmentForTrl,), namespace)


def tool_name(label: str) -> str:
    """The tool's name: the env's name as a Python identifier (``reasoning-gym`` ->
    ``reasoning_gym``)."""
    name = re.sub(r"\W+", "_", label.strip()).strip("_").lower()
    if not name or name[0].isdigit():
        name = f"act_{name}".rstrip("_")
    return f"{name}_action" if name in _RESERVED else name


def tool_docstring(prompt: str) -> str:
    """The tool's docstring: the env's system prompt, then its one argument, in the Google style
    transformers parses (a section name inside the prompt would end its description early: such
    a ``Returns:`` is written ``Returns :``)."""
    description = _SECTIONS.sub(r"\1 :", prompt.strip())
    return (
        f"{description}\n\n"
        "Args:\n"
        "    action: Your action, written as the rules above say.\n\n"
        "Returns:\n"
        "    What the environment says next."
    )


def _fresh_seeds(make: Callable[[], Any]) -> Iterator[str]:
    """The env's training seeds, one after another, for rows without a ``seed``: asked of the
    env in chunks that double, so each costs a constant share."""

    def walk() -> Iterator[str]:
        given = 0
        for size in (2**k for k in itertools.count(4)):
            env = make()
            try:
                chunk = seeds(env, "train", size)
            finally:
                close(env)
            if len(chunk) <= given:
                raise UsageError(f"The env gave no more than {given} training seeds.")
            yield from chunk[given:]
            given = len(chunk)

    return walk()
