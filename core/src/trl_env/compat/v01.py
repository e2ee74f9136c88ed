"""A way over from trl-env 0.1.x: its envs and its six-string processors, unchanged.

trl-env 0.1.x (0.1.0-0.1.20 on the package index) is this project's earlier line. Its env's
``reset(seed)`` and ``step(action)`` return ``(env, text)`` (the env to use next, and the text the
agent sees), and its ``reward`` and ``alive`` are attributes; its ``Type1Processor`` is six strings.
:func:`v01_env` and :func:`v01_processor` turn those into this version's
:class:`~trl_env.protocols.Env` and :class:`~trl_env.protocols.Processor`, so the same classes
train here (docs/migrating.md maps the rest of the 0.1.x API).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import TrlEnvError

__all__ = ["V01Env", "V01Processor", "v01_env", "v01_processor"]

_SIX = (
    "prefix_system",
    "suffix_system",
    "prefix_user",
    "suffix_user",
    "begin_answer",
    "end_answer",
)


# The 0.1.x env objects that episodes of this process play now: id -> the V01Env playing it.
# The engine refuses one env instance for two live episodes by the identity of what a factory
# returns, here always a fresh V01Env; the 0.1.x env behind it, which reset and step may swap
# for any object, is checked here the same way.
_PLAYED: weakref.WeakValueDictionary[int, V01Env] = weakref.WeakValueDictionary()
_PLAYED_LOCK = threading.Lock()


class V01Env:
    """A 0.1.x env seen through the :class:`~trl_env.protocols.Env` protocol.

    ``reset`` and ``step`` keep the env each returns (0.1.x envs may return a new one) and return
    its text; ``reward`` and ``alive`` are read from the current env. Any other attribute (a
    ``seeds`` or ``success`` the env has) is the current env's. An env that another episode
    plays now (a factory or a ``reset`` returning one shared env) is refused, as the engine
    refuses one env for two episodes; :meth:`close` ends this episode's hold on its env.
    """

    def __init__(self, env: Any, system_prompt: str | None = None) -> None:
        self._env = env
        self._hold(env, "the factory")
        if system_prompt is not None:
            self.system_prompt = system_prompt

    def _hold(self, env: Any, how: str) -> None:
        with _PLAYED_LOCK:
            other = _PLAYED.get(id(env))
            if other is not None and other is not self:
                raise TrlEnvError(
                    f"A 0.1.x env's {how} returned the env that another episode plays now "
                    f"({type(env).__name__} at {id(env):#x}); it must make a new env per "
                    "episode (two episodes on one env would mix their turns)."
                )
            _PLAYED[id(env)] = self

    def _follow(self, returned: Any, method: str) -> str:
        if not (isinstance(returned, tuple) and len(returned) == 2):
            raise TrlEnvError(
                f"A 0.1.x env's {method} returns (env, text); "
                f"{type(self._env).__name__}.{method} returned {type(returned).__name__}."
            )
        env, text = returned
        if env is not self._env:
            self._hold(env, method)
            self._let_go(self._env)
            self._env = env
        return text  # checked by the boundary, as every env's text is

    def _let_go(self, env: Any) -> None:
        with _PLAYED_LOCK:
            if _PLAYED.get(id(env)) is self:
                del _PLAYED[id(env)]

    def close(self) -> None:
        """The episode is over: its env is free for another, and closed if it can be."""
        env = self._env
        self._let_go(env)
        close = getattr(env, "close", None)
        if callable(close):
            close()

    def reset(self, seed: str) -> str:
        return self._follow(self._env.reset(seed), "reset")

    def step(self, action: str) -> str:
        return self._follow(self._env.step(action), "step")

    @property
    def reward(self) -> Any:
        return self._env.reward

    @property
    def alive(self) -> Any:
        return self._env.alive

    def __getattr__(self, name: str) -> Any:
        env = self.__dict__.get("_env")
        if env is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(env, name)

    def __repr__(self) -> str:
        return f"V01Env({self._env!r})"


class _V01Factory:
    """What :func:`v01_env` returns: each call opens one episode's env (picklable, so process
    isolation can send it to a worker when ``make`` is an importable class or function)."""

    def __init__(self, make: Callable[..., Any], system_prompt: str | None) -> None:
        self.make = make
        self.system_prompt = system_prompt

    def __call__(self, **options: Any) -> V01Env:
        return V01Env(self.make(**options), self.system_prompt)

    def __repr__(self) -> str:
        return f"v01_env({getattr(self.make, '__qualname__', self.make)!r})"


def v01_env(env: Callable[..., Any], system_prompt: str | None = None) -> Callable[..., V01Env]:
    """A factory of :class:`~trl_env.protocols.Env` from a 0.1.x env's class (or factory).

    Use it wherever an env factory goes (``make_rollout_func(env=...)``, ``EnvSpec``, an entry
    point): each episode calls ``env(**options)`` for an env of its own. ``system_prompt`` is
    the one 0.1.x's ``make_rollout_func`` took; here it travels with the env.
    """
    if not callable(env) or (not isinstance(env, type) and callable(getattr(env, "reset", None))):
        raise TrlEnvError(
            f"v01_env takes a 0.1.x env's class or a function that makes one, not "
            f"{type(env).__name__!r} (each episode opens an env of its own)."
        )
    return _V01Factory(env, system_prompt)


class V01Processor:
    """0.1.x's ``Type1Processor``: a chat format declared as six strings.

    The text is the one 0.1.x rendered: ``prefix_system + system + suffix_system``, then
    ``prefix_user + text + suffix_user`` for every env text (``suffix_user`` opens the model's
    turn), and nothing between the model's turn and the next user text unless
    ``turn_separator`` says so. A completion is cut at ``end_answer``; the action is what follows
    the last ``begin_answer``, the reasoning what precedes it. Generation stops on
    ``end_answer``, which also closes a turn cut at its token limit.
    """

    def __init__(
        self,
        prefix_system: str,
        suffix_system: str,
        prefix_user: str,
        suffix_user: str,
        begin_answer: str,
        end_answer: str,
        turn_separator: str = "",
    ) -> None:
        self.prefix_system, self.suffix_system = prefix_system, suffix_system
        self.prefix_user, self.suffix_user = prefix_user, suffix_user
        self.begin_answer, self.end_answer = begin_answer, end_answer
        self.turn_separator = turn_separator
        self.stop_tokens: tuple[str, ...] = (end_answer,) if end_answer else ()
        if end_answer:
            self.turn_close = end_answer

    def init_system_input(self, prompt: str) -> str:
        return f"{self.prefix_system}{prompt}{self.suffix_system}"

    def append_user_input(self, prompt: str) -> str:
        return f"{self.prefix_user}{prompt}{self.suffix_user}"

    def parse_agent_output(self, completion: str) -> tuple[str, str]:
        if self.end_answer:
            completion = completion.split(self.end_answer, 1)[0]
        if not self.begin_answer:
            return "", completion
        reasoning, _, action = completion.rpartition(self.begin_answer)
        return reasoning, action

    def __repr__(self) -> str:
        strings = ", ".join(f"{name}={getattr(self, name)!r}" for name in _SIX)
        return f"V01Processor({strings})"


def v01_processor(config: Any = None, /, turn_separator: str = "", **strings: str) -> V01Processor:
    """A :class:`~trl_env.protocols.Processor` from 0.1.x's six strings.

    Give them as keywords (``prefix_system=..., end_answer=...``) or as an object that has them
    as attributes (0.1.x's ``Type1ProcessorConfig``, or its ``Type1Processor``, whose
    ``config`` is read).
    """
    if config is not None:
        source = getattr(config, "config", config)
        strings = {name: getattr(source, name) for name in _SIX if hasattr(source, name)}
    missing = [name for name in _SIX if not isinstance(strings.get(name), str)]
    unknown = sorted(set(strings) - set(_SIX))
    if missing or unknown:
        what = f"lacks {', '.join(missing)}" if missing else f"has no {unknown[0]!r}"
        raise TrlEnvError(
            f"v01_processor takes 0.1.x's six strings ({', '.join(_SIX)}); this one {what}."
        )
    return V01Processor(**strings, turn_separator=turn_separator)
