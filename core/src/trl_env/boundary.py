"""The guarded boundary between the engine and env code nobody vetted.

Every call into an env (its factory, ``reset``, ``step``, each read of ``alive``, ``reward``,
``system_prompt``, ``max_turns``, and ``close``) is a job built here and run by the engine on its
:class:`~trl_env.callpool.CallPool`, so each has a deadline and each failure becomes an error
record on its own episode. What comes back is checked and made safe here too: text that cannot
be encoded is repaired (U+FFFD), over-long text is cut with a visible marker, a non-string reply
or a non-finite reward is a one-sentence error. In process isolation the same jobs run against a
:class:`~trl_env.hosts.pool.RemoteEnv` whose env lives in a worker process; where an env
runs is its host's business (:mod:`trl_env.hosts`).
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import extras
from .config import DEFAULT_MAX_TURNS, RolloutConfig
from .errors import EnvMisbehaved
from .protocols import Env

EnvSource = Callable[[], Env] | Sequence[Env] | str

_SURROGATES = re.compile("[\ud800-\udfff]")
CUT_MARKER = "\n[... {n} characters cut by trl-env: the env's text exceeded max_env_chars ...]"


@dataclass
class Text:
    """Env text made safe to tokenize, with what it took."""

    text: str
    sanitized: int = 0  # code points replaced by U+FFFD
    capped: int = 0  # characters cut off
    waited: float = 0.0  # seconds the call waited for a resource (a server slot): not env time
    server: str = ""  # the env server that plays the episode (env_servers), read at reset


def clean_text(text: str, max_chars: int) -> Text:
    """Cut ``text`` to ``max_chars`` (marker included) and replace unencodable code points."""
    text = plain_str(text)  # a subclass's __len__ could hide its length
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
    """One env as the engine sees it: method calls and attribute reads, and its extras read
    through :mod:`trl_env.extras`, the same way for an env in this process or in a worker."""

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

    def server(self) -> str:
        """The env server playing the episode ("": here; a served env's handle says)."""
        return ""

    def turn_reward(self) -> Any:
        return extras.turn_reward(self.env)

    def success(self) -> Any:
        value = getattr(self.env, "success", None)
        return value() if callable(value) else value

    def has(self, name: str) -> bool:
        """Whether the env has a method ``name`` (an extra it may lack: ``demonstrate``)."""
        return callable(getattr(self.env, name, None))

    def close(self) -> None:
        extras.close(self.env)

    def release(self) -> None:
        """The episode is over and ``close`` was called (or abandoned)."""


class RemoteHandle(EnvHandle):
    """An env living in a worker process (``env_isolation="process"``): a
    :class:`~trl_env.hosts.pool.RemoteEnv`, whose calls carry their own deadline (the worker is
    killed past it), so they always return."""

    def has(self, name: str) -> bool:
        return bool(self.env.has(name))

    def release(self) -> None:
        self.env.release()  # the worker (and its slot) go back to the pool


# A declared reset_timeout is honoured up to this many step timeouts: ``inf`` must not remove
# the deadline of a call into code nobody vetted.
RESET_TIMEOUT_CAP = 10.0


def reset_deadline(declared: float | None, step_timeout: float | None) -> float | None:
    """The deadline of ``reset`` for an env that declares ``reset_timeout`` (None: the step's)."""
    if declared is None or step_timeout is None or not declared > step_timeout:
        return None
    return min(declared, RESET_TIMEOUT_CAP * step_timeout)


def opener(
    host: Any, cfg: RolloutConfig, index: int, options: Mapping[str, Any]
) -> Callable[[], Opened]:
    """The job that makes the env of a batch's ``index``-th episode on ``host`` (an
    :class:`~trl_env.hosts.EnvHost`) with ``options`` and reads what it declares.

    With worker processes the job has a ``gate``, the host's slots: the engine's call pool
    starts it only once a worker is free for it, so no thread waits for one.
    """

    def open_env() -> Opened:
        handle = host.open(index, options)
        prompt = cfg.system_prompt or handle.system_prompt()
        limit = cfg.max_turns or handle.max_turns(DEFAULT_MAX_TURNS)
        text = clean_text(prompt, cfg.max_env_chars)
        deadline = reset_deadline(handle.reset_timeout(), cfg.step_timeout)
        if isinstance(handle, RemoteHandle):
            handle.env.reset_deadline = deadline  # the worker enforces it
        return Opened(handle, text, limit, deadline)

    if host.gate is not None:
        open_env.gate = host.gate  # type: ignore[attr-defined]
    return open_env


# -- the jobs, one per kind of env call; each returns checked values or raises -----------------
def reset_job(handle: EnvHandle, seed: str, max_chars: int) -> Callable[[], Text]:
    def reset() -> Text:
        text = _text(handle, handle.call("reset", seed), "resetting the environment", max_chars)
        text.waited = handle.waited()
        text.server = handle.server()
        return text

    return reset


def step_job(handle: EnvHandle, action: str, max_chars: int) -> Callable[[], tuple[Text, bool]]:
    """``step(action)``, then ``alive`` read at once, on the same worker."""

    def step() -> tuple[Text, bool]:
        reply = _text(handle, handle.call("step", action), "stepping the environment", max_chars)
        return reply, _alive(handle, handle.get("alive"))

    return step


def reward_job(handle: EnvHandle) -> Callable[[], tuple[float, bool | None]]:
    """``reward``, then the optional ``success`` extra, read once the episode is over."""

    def reward() -> tuple[float, bool | None]:
        value = handle.get("reward")
        number = real_number(value)
        if number is None:
            raise EnvMisbehaved(f"{_who(handle)}.reward is not a finite number: {shown(value)}")
        try:  # optional: a broken one is read as not given, and costs the reward nothing
            verdict = extras.success(handle.success())
        except Exception:
            verdict = None
        return number, verdict

    return reward


def turn_reward_job(handle: EnvHandle) -> Callable[[], tuple[bool, float]]:
    """After a step, with credit per turn: ``(True, x)`` for the env's ``turn_reward`` extra
    (what that step earned), else ``(False, x)`` for its ``reward`` as it stands now. Either must
    be a real, finite number, as the final reward must."""

    def read() -> tuple[bool, float]:
        own = handle.turn_reward()
        name, value = ("turn_reward", own) if own is not None else ("reward", handle.get("reward"))
        number = real_number(value)
        if number is None:
            raise EnvMisbehaved(
                f"{_who(handle)}.{name} is not a finite number after a step: {shown(value)}"
            )
        return own is not None, number

    return read


def seeds_job(handle: EnvHandle, split: str, count: int) -> Callable[[], list[str]]:
    """``count`` seeds of ``split`` from the env's ``seeds`` extra (``split-i`` without one)."""

    def seeds() -> list[str]:
        if isinstance(handle, RemoteHandle):
            value = handle.call("seeds", split, count)  # None when the env has no seeds
        else:
            method = getattr(handle.env, "seeds", None)
            value = method(split, count) if callable(method) else None
        if value is None:
            return [f"{split}-{i}" for i in range(count)]
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise EnvMisbehaved(
                f"{_who(handle)}.seeds({split!r}, {count}) returned {type(value).__name__}, "
                "not a list of seeds"
            )
        out = [_seed(handle, s) for s in value]
        if len(out) != count:
            raise EnvMisbehaved(
                f"{_who(handle)}.seeds({split!r}, {count}) returned {len(out)} seeds"
            )
        return out

    return seeds


def demonstrate_job(handle: EnvHandle, seed: str) -> Callable[[], list[str] | None]:
    """The actions of a good episode of ``seed`` from the env's ``demonstrate`` extra (None:
    it gives none, or has no such extra)."""

    def demonstrate() -> list[str] | None:
        method = getattr(handle.env, "demonstrate", None)  # a worker's env: always there
        value = method(seed) if callable(method) else None
        try:
            return extras.demonstrated(value, _who(handle), seed)
        except ValueError as exc:  # the env's own errors are not caught here: they raise
            raise EnvMisbehaved(str(exc)) from None

    return demonstrate


def close_job(handle: EnvHandle) -> Callable[[], None]:
    """``close``, then the env is let go here, so that its ``__del__`` runs on the pool, with
    the close's deadline, and not on the thread that drives the episodes."""

    def close() -> None:
        try:
            handle.close()
        finally:
            try:
                handle.release()
            finally:
                handle.env = None

    return close


# -- checking and repairing what env code returns ----------------------------------------------
MAX_MESSAGE_CHARS = 2000  # an error message longer than this is cut: it is one sentence


def real_number(value: Any) -> float | None:
    """``value`` as a finite float when it is a real number (numpy and torch scalars by their
    ``item()``); None for a string, a bool, NaN, an infinity or anything else."""
    if isinstance(value, bool | str | bytes):
        return None
    if not isinstance(value, numbers.Real | decimal.Decimal):
        item = getattr(value, "item", None)  # numpy and torch scalars, 0-d arrays and tensors
        if not callable(item):
            return None
        try:
            value = item()
        except (TypeError, ValueError):  # an array of several values
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None
    number = float(value)
    return number if math.isfinite(number) else None


def _alive(handle: EnvHandle, value: Any) -> bool:
    """``alive`` as a real bool; numpy's and torch's booleans by their ``item()``."""
    if not isinstance(value, bool):
        item = getattr(value, "item", None)
        plain = None
        if callable(item) and not isinstance(value, str | bytes):
            try:
                plain = item()
            except (TypeError, ValueError):  # an array of several values
                plain = None
        if not isinstance(plain, bool):
            raise EnvMisbehaved(
                f"{_who(handle)}.alive is {type(value).__name__} {shown(value)}, not a bool"
            )
        value = plain
    return value


def _seed(handle: EnvHandle, value: Any) -> str:
    if isinstance(value, str):
        return plain_str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    raise EnvMisbehaved(f"{_who(handle)}.seeds gave a {type(value).__name__}, not a str or int")


def plain_str(text: str) -> str:
    """A ``str`` subclass as a real ``str``: its ``__len__``, ``__str__`` or slicing could lie."""
    return text if type(text) is str else str.__str__(text)


def clean_message(text: Any, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """An error message made safe to print and store, as env text is: unencodable code points
    become U+FFFD and a long one is cut."""
    if not isinstance(text, str):
        return ""
    text = plain_str(text)
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    return _SURROGATES.sub("\ufffd", text)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception whose ``str()`` may raise, lie or hold anything."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    message = clean_message(message)
    return clean_message(f"{name}: {message}" if message else name)


def shown(value: Any, max_chars: int = 80) -> str:
    """A short ``repr`` for a message, safe against a ``__repr__`` that raises."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return clean_message(text, max_chars)


def _text(handle: EnvHandle, value: Any, what: str, max_chars: int) -> Text:
    if not isinstance(value, str):
        raise EnvMisbehaved(f"{_who(handle)} returned {type(value).__name__}, not str, when {what}")
    return clean_text(value, max_chars)


def _who(handle: EnvHandle) -> str:
    return handle.label if isinstance(handle, RemoteHandle) else type(handle.env).__name__
