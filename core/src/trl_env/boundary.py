"""The guarded boundary between the engine and env code nobody vetted.

Every call into an env (its factory, ``reset``, ``step``, each read of ``alive``, ``reward``,
``system_prompt``, ``max_turns``, and ``close``) is a job built here and run by the engine on its
:class:`~trl_env.stepping.CallPool`, so each has a deadline and each failure becomes an error
record on its own episode. What comes back is checked and made safe here too: text that cannot
be encoded is repaired (U+FFFD), over-long text is cut with a visible marker, a non-string reply
or a non-finite reward is a one-sentence error. In process isolation the same jobs run against a
:class:`~trl_env.isolation.RemoteEnv` whose env lives in a worker process.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import extras
from .config import DEFAULT_MAX_TURNS, Isolation, RolloutConfig
from .errors import UsageError
from .protocols import Env

EnvSource = Callable[[], Env] | Sequence[Env] | str

_SURROGATES = re.compile("[\ud800-\udfff]")
CUT_MARKER = "\n[... {n} characters cut by trl-env: the env's text exceeded max_env_chars ...]"


class EnvMisbehaved(Exception):
    """An env broke its contract (wrong type, non-finite reward, ...); the message says how."""


@dataclass
class Text:
    """Env text made safe to tokenize, with what it took."""

    text: str
    sanitized: int = 0  # code points replaced by U+FFFD
    capped: int = 0  # characters cut off
    waited: float = 0.0  # seconds the call waited for a resource (a server slot): not env time


def clean_text(text: str, max_chars: int) -> Text:
    """Cut ``text`` to ``max_chars`` (marker included) and replace unencodable code points."""
    capped = 0
    if len(text) > max_chars:
        capped = len(text) - max_chars
        marker = CUT_MARKER.format(n=capped)
        keep = max(0, max_chars - len(marker))
        capped = len(text) - keep
        text = text[:keep] + CUT_MARKER.format(n=capped)
    try:
        text.encode("utf-8")
        return Text(text, 0, capped)
    except UnicodeEncodeError:  # lone surrogates, e.g. "\ud800" from a JSON "\\ud800" escape
        fixed, count = _SURROGATES.subn("\ufffd", text)
        return Text(fixed, count, capped)


@dataclass(frozen=True)
class Opened:
    """An env ready for its episode, and what it declares."""

    handle: EnvHandle
    system_prompt: Text
    max_turns: int
    reset_timeout: float | None = None  # when reset may take longer than a step


class EnvHandle:
    """One env as the engine sees it: method calls and attribute reads, all through ``call``."""

    def __init__(self, env: Any, label: str) -> None:
        self.env, self.label = env, label

    @property
    def key(self) -> int:
        """Identity of the env object, to refuse one instance serving two episodes at once."""
        return id(self.env)

    def call(self, name: str, *args: Any) -> Any:
        return getattr(self.env, name)(*args)

    def get(self, name: str) -> Any:
        return getattr(self.env, name)

    def system_prompt(self) -> str:
        return extras.system_prompt(self.env)

    def max_turns(self, default: int) -> int:
        return extras.max_turns(self.env, default)

    def reset_timeout(self) -> float | None:
        return extras.reset_timeout(self.env)

    def waited(self) -> float:
        return extras.waited_seconds(self.env)

    def success(self) -> Any:
        value = getattr(self.env, "success", None)
        return value() if callable(value) else value

    def close(self) -> None:
        extras.close(self.env)

    def release(self) -> None:
        """The episode is over and ``close`` was called (or abandoned)."""


class RemoteHandle(EnvHandle):
    """An env living in a worker process (``env_isolation="process"``).

    The worker enforces ``timeout`` itself, by killing the process, so these calls always return.
    """

    def __init__(self, remote: Any, label: str, timeout: float | None) -> None:
        super().__init__(remote, label)
        self.timeout = timeout

    def call(self, name: str, *args: Any) -> Any:
        return self.env.call(name, *args, timeout=self.timeout)

    def get(self, name: str) -> Any:
        return self.env.call(name, timeout=self.timeout)

    def system_prompt(self) -> str:
        value = self.get("system_prompt")
        return value if isinstance(value, str) and value else extras.DEFAULT_SYSTEM_PROMPT

    def max_turns(self, default: int) -> int:
        value = self.get("max_turns")
        return value if isinstance(value, int) and value > 0 else default

    def reset_timeout(self) -> float | None:
        value = self.get("reset_timeout")
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def waited(self) -> float:
        value = self.get("slot_wait_seconds")
        return float(value) if isinstance(value, int | float) and value > 0 else 0.0

    def success(self) -> Any:
        return self.get("success")

    def close(self) -> None:
        self.env.call("close", timeout=self.timeout)

    def release(self) -> None:
        self.env.release()


class EnvSupply:
    """Where a batch's envs come from: a factory, a registered name, one env per seed, or
    worker processes; ``open`` is the job that makes and checks one."""

    def __init__(self, source: EnvSource, cfg: RolloutConfig, count: int) -> None:
        self.cfg = cfg
        self.pool: Any = None
        # The engine's deadline for each env call; worker processes enforce their own.
        self.call_timeout = cfg.step_timeout
        self.given: list[Env] | None = None
        self.factory: Callable[[], Env] | None = None
        if isinstance(source, str):
            self.label = f"the env factory {source!r}"
        else:
            self.label = f"the env factory {_name(source)}"
        self.owns_pool = False
        if _is_process_pool(source):  # a pool kept across batches by the caller
            self.pool, self.call_timeout = source, None
            self.label = "the env process pool"
        elif cfg.env_isolation is Isolation.PROCESS:
            if not isinstance(source, str) and not callable(source):
                raise UsageError(
                    "env_isolation='process' needs an env factory or a registered env name, "
                    "not env instances: the envs must be built inside the worker processes."
                )
            from .isolation import EnvProcessPool

            self.pool = EnvProcessPool(source, max_workers=cfg.env_workers)
            self.call_timeout, self.owns_pool = None, True
        elif isinstance(source, str):
            from .spec import EnvSpec

            self.factory = EnvSpec(source).factory(check=True)
        elif callable(source):
            self.factory = source
        else:
            self.given = list(source)
            if len(self.given) != count:
                raise UsageError(f"Got {len(self.given)} environments for {count} seeds.")
            self.label = "the env list passed in"

    def opener(self, index: int) -> Callable[[], Opened]:
        """The job that makes the env of episode ``index`` and reads what it declares."""

        def open_env() -> Opened:
            handle = self._make(index)
            prompt = self.cfg.system_prompt or handle.system_prompt()
            limit = self.cfg.max_turns or handle.max_turns(DEFAULT_MAX_TURNS)
            text = clean_text(prompt, self.cfg.max_env_chars)
            return Opened(handle, text, limit, handle.reset_timeout())

        return open_env

    def _make(self, index: int) -> EnvHandle:
        if self.pool is not None:
            return RemoteHandle(
                self.pool.open(self.cfg.step_timeout), self.label, self.cfg.step_timeout
            )
        env = self.given[index] if self.given is not None else self.factory()  # type: ignore[misc]
        if env is None or not (
            callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))
        ):
            raise EnvMisbehaved(
                f"{self.label} returned {type(env).__name__ if env is not None else 'None'}, "
                "not an env with reset() and step()"
            )
        return EnvHandle(env, self.label)

    def close(self) -> None:
        if self.owns_pool:
            self.pool.close()


def _is_process_pool(source: Any) -> bool:
    from .isolation import EnvProcessPool

    return isinstance(source, EnvProcessPool)


def _name(source: Any) -> str:
    while isinstance(source, functools.partial):  # name what it wraps, not "functools.partial"
        source = source.func
    name = getattr(source, "__qualname__", None) or type(source).__name__
    module = getattr(source, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


# -- the jobs, one per kind of env call; each returns checked values or raises -----------------
def reset_job(handle: EnvHandle, seed: str, max_chars: int) -> Callable[[], Text]:
    def reset() -> Text:
        text = _text(handle, handle.call("reset", seed), "resetting the environment", max_chars)
        text.waited = handle.waited()
        return text

    return reset


def step_job(handle: EnvHandle, action: str, max_chars: int) -> Callable[[], tuple[Text, bool]]:
    """``step(action)``, then ``alive`` read at once, on the same worker."""

    def step() -> tuple[Text, bool]:
        reply = _text(handle, handle.call("step", action), "stepping the environment", max_chars)
        return reply, bool(handle.get("alive"))

    return step


def reward_job(handle: EnvHandle) -> Callable[[], tuple[float, bool | None]]:
    """``reward``, then the optional ``success`` extra, read once the episode is over."""

    def reward() -> tuple[float, bool | None]:
        value = handle.get("reward")
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise EnvMisbehaved(f"{_who(handle)}.reward is not a finite number: {value!r}")
        return number, extras.success(handle.success())

    return reward


def close_job(handle: EnvHandle) -> Callable[[], None]:
    def close() -> None:
        try:
            handle.close()
        finally:
            handle.release()

    return close


def _text(handle: EnvHandle, value: Any, what: str, max_chars: int) -> Text:
    if not isinstance(value, str):
        raise EnvMisbehaved(f"{_who(handle)} returned {type(value).__name__}, not str, when {what}")
    return clean_text(value, max_chars)


def _who(handle: EnvHandle) -> str:
    return handle.label if isinstance(handle, RemoteHandle) else type(handle.env).__name__
