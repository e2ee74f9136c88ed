"""A catalogue of hostile environments, one class per way env code can go wrong.

Every env here plays like :class:`Calm` unless it is hostile: for most, an episode whose seed
starts with ``"bad"``; for faults that happen before the seed is known (the factory, attributes
read when the env is opened), the first instance that claims a token file, which works across
worker processes. Everything is top-level and picklable, so the same factories run with
``env_isolation="process"``. This module must stay light: worker processes import it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

BAD = "bad"


def nap(seconds: float) -> None:
    """Block for ``seconds`` in Python bytecode (a thread pool can interrupt it between naps)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)


def claim(token: str | None) -> bool:
    """True for the one caller, in any process, that creates ``token`` first."""
    if token is None:
        return False
    try:
        os.close(os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class Calm:
    """The well-behaved env every hostile one starts from: ``turns`` steps, text from the seed."""

    system_prompt = "Reply with one word."

    def __init__(self, turns: int = 2, token: str | None = None) -> None:
        self.turns, self.seed, self.n = turns, "", 0
        self.chosen = claim(token)  # hostile by token, for faults before reset

    @property
    def hostile(self) -> bool:
        return self.chosen or self.seed.startswith(BAD)

    @property
    def alive(self) -> bool:
        return self.n < self.turns

    @property
    def reward(self) -> Any:
        return self.n / self.turns

    def reset(self, seed: str) -> Any:
        self.seed, self.n = seed, 0
        return f"Game {seed}: the board is empty. Say a word."

    def step(self, action: str) -> Any:
        self.n += 1
        return f"Turn {self.n} of {self.seed}: you wrote {len(action)} characters."

    def close(self) -> None:
        pass


# -- env calls that raise, return the wrong thing, or never return ----------------------------
class StepFault(Calm):
    """A hostile ``step`` first runs :meth:`fault` (raise, hang, print, end the process...)."""

    def fault(self) -> None:
        raise NotImplementedError

    def step(self, action: str) -> Any:
        if self.hostile:
            self.fault()
        return super().step(action)


class StepRaises(StepFault):
    def fault(self) -> None:
        raise ValueError("step exploded")


class ResetRaises(Calm):
    def reset(self, seed: str) -> Any:
        if seed.startswith(BAD):
            raise KeyError("no such level")
        return super().reset(seed)


class WrongType(Calm):
    """``step`` returns ``value`` (an int, None, bytes, ...) instead of text."""

    def __init__(self, value: Any = 42, **kw: Any) -> None:
        super().__init__(**kw)
        self.value = value

    def step(self, action: str) -> Any:
        text = super().step(action)
        return self.value if self.hostile else text


class Unsendable(Calm):
    """``step`` returns an object that cannot be pickled (a lock)."""

    def step(self, action: str) -> Any:
        text = super().step(action)
        return threading.Lock() if self.hostile else text


class BadReward(Calm):
    """``reward`` is ``value`` (NaN, inf, a string) at the end."""

    def __init__(self, value: Any = float("nan"), **kw: Any) -> None:
        super().__init__(**kw)
        self.value = value

    @property
    def reward(self) -> Any:
        return self.value if self.hostile else super().reward


class AliveRaises(Calm):
    @property
    def alive(self) -> bool:
        if self.hostile and self.n:
            raise RuntimeError("alive is broken")
        return super().alive


class AliveBlocks(Calm):
    @property
    def alive(self) -> bool:
        if self.hostile and self.n:
            nap(30)
        return super().alive


class RewardRaises(Calm):
    @property
    def reward(self) -> Any:
        if self.hostile:
            raise ZeroDivisionError("no score yet")
        return super().reward


class RewardBlocks(Calm):
    @property
    def reward(self) -> Any:
        if self.hostile:
            nap(30)
        return super().reward


class SystemPromptRaises(Calm):
    """Read when the env is opened, before any seed: hostile by token."""

    @property  # type: ignore[override]
    def system_prompt(self) -> str:
        if self.hostile:
            raise LookupError("prompt file missing")
        return Calm.system_prompt


class MaxTurnsBlocks(Calm):
    @property
    def max_turns(self) -> int:
        if self.hostile:
            nap(30)
        return 4


class Hang(StepFault):
    """``step`` never returns, in Python code (a thread can be interrupted there)."""

    def fault(self) -> None:
        nap(60)


class SleepInC(StepFault):
    """``step`` blocks in one C call: only a process can be stopped there."""

    def fault(self) -> None:
        time.sleep(60)


class SpawnsAndHangs(StepFault):
    """Starts a program that outlives the step, then hangs."""

    def fault(self) -> None:
        import subprocess

        child = subprocess.Popen(["sleep", "60"])
        with open(os.path.join(self.seed.split(":", 1)[1], "pid"), "w") as out:
            out.write(str(child.pid))
        time.sleep(60)


class ExitsLater(Calm):
    """Leaves a thread behind on close that ends the process a little later."""

    def close(self) -> None:
        threading.Timer(0.2, os._exit, args=(5,)).start()


class Busy(StepFault):
    """``step`` spins holding the GIL."""

    def fault(self) -> None:
        while True:
            pass


# -- the process itself dies (process isolation only) ------------------------------------------
class Segfault(StepFault):
    def fault(self) -> None:
        ctypes.string_at(0)


class Exits(StepFault):
    def fault(self) -> None:
        os._exit(3)


class Killed(StepFault):
    """Killed with SIGKILL, as the kernel's out-of-memory killer does."""

    def fault(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


# -- text that is too big or cannot be encoded ---------------------------------------------------
class Surrogate(Calm):
    """A lone surrogate, as a JSON ``"\\ud800"`` escape decodes to."""

    def step(self, action: str) -> Any:
        text = super().step(action)
        return text + " \ud800 end" if self.hostile else text


class HugeReply(Calm):
    def step(self, action: str) -> Any:
        text = super().step(action)
        return text + "x" * (50 * 1024 * 1024) if self.hostile else text


class HugeFirstPrompt(Calm):
    def reset(self, seed: str) -> Any:
        text = super().reset(seed)
        return text + " wall" * 200_000 if seed.startswith(BAD) else text


# -- side effects ----------------------------------------------------------------------------
class Printer(StepFault):
    """Writes megabytes to stdout and stderr on every step."""

    def fault(self) -> None:
        block = "noise " * (1024 * 1024 // 6)
        for _ in range(3):
            print(block)
            print(block, file=sys.stderr)


class ThreadSpawner(Calm):
    """Starts helper threads on reset and stops them on close."""

    def reset(self, seed: str) -> Any:
        self.stop = threading.Event()
        self.helpers = [threading.Thread(target=self.stop.wait) for _ in range(3)]
        for helper in self.helpers:
            helper.start()
        return super().reset(seed)

    def close(self) -> None:
        self.stop.set()
        for helper in self.helpers:
            helper.join()


class CloseRaises(Calm):
    def close(self) -> None:
        if self.hostile:
            raise OSError("socket already closed")


class SlowClose(Calm):
    def close(self) -> None:
        if self.hostile:
            time.sleep(2)


# -- factories that do not return a fresh env -----------------------------------------------
def none_once(token: str) -> Any:
    """Returns None once, fresh envs otherwise."""
    return None if claim(token) else Calm()


def not_an_env_once(token: str) -> Any:
    return "an env, promise" if claim(token) else Calm()


class SameInstanceTwice:
    """A factory that returns its first env again on its second call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.made: list[Calm] = []

    def __call__(self) -> Calm:
        with self.lock:
            env = self.made[0] if len(self.made) == 1 else Calm()
            self.made.append(env)
            return env


# -- a mix, for the soak benchmark -------------------------------------------------------------
KINDS: dict[str, type[Calm]] = {
    "raise": StepRaises,
    "int": WrongType,
    "nan": BadReward,
    "alive": AliveRaises,
    "hang": Hang,
    "sleep": SleepInC,
    "busy": Busy,
    "surrogate": Surrogate,
    "huge": HugeReply,
    "print": Printer,
    "threads": ThreadSpawner,
    "slowclose": SlowClose,
    "segfault": Segfault,
    "exit": Exits,
    "kill": Killed,
}
CRASHES = ("segfault", "exit", "kill")  # they take the whole process: process isolation only


class Mixed:
    """Plays as the kind its seed names (``"bad-hang-7"`` hangs), calm otherwise."""

    system_prompt = Calm.system_prompt

    def __init__(self) -> None:
        self.inner: Calm = Calm()

    def reset(self, seed: str) -> Any:
        kind = seed.split("-")[1] if seed.startswith(BAD) else ""
        self.inner = KINDS.get(kind, Calm)()
        return self.inner.reset(seed)

    def step(self, action: str) -> Any:
        return self.inner.step(action)

    @property
    def alive(self) -> bool:
        return self.inner.alive

    @property
    def reward(self) -> Any:
        return self.inner.reward

    def close(self) -> None:
        self.inner.close()


# -- processors and hooks: third-party code of the trainer's own process ----------------------
class Unprintable:
    """A value whose ``str()`` raises, as a processor's odd ``reasoning`` may be."""

    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    __repr__ = __str__


class LyingStr(str):
    """A ``str`` whose ``__len__`` says 3 whatever it holds."""

    def __len__(self) -> int:
        return 3


def misbehave(kind: str) -> Any:
    """What a hostile processor or hook does instead of its job; a value for ``"value:"``."""
    if kind == "raise":
        raise ValueError("the regex gave up")
    if kind == "exit":
        raise SystemExit(4)
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "hang":  # in Python code: a thread can be interrupted there
        nap(30)
    if kind == "sleep":  # blocked in one C call, as a backtracking regex is
        time.sleep(5)
    return None


class HostileProcessor:
    """Wraps a real processor; its first call of ``method`` does ``kind`` instead (one episode
    of a batch is hit, whichever calls first), every other call is the wrapped processor's."""

    def __init__(self, inner: Any, method: str, kind: str) -> None:
        self.inner, self.method, self.kind = inner, method, kind
        self.stop_tokens, self.turn_close = inner.stop_tokens, inner.turn_close
        self.turn_separator = inner.turn_separator
        self.lock = threading.Lock()
        self.fired = False

    def _first(self, method: str) -> bool:
        with self.lock:
            hit = method == self.method and not self.fired
            self.fired = self.fired or hit
            return hit

    def init_system_input(self, prompt: str) -> str:
        return self.inner.init_system_input(prompt)

    def append_user_input(self, prompt: str) -> Any:
        if self._first("append_user_input"):
            if self.kind == "int":
                return 7
            misbehave(self.kind)
        return self.inner.append_user_input(prompt)

    def parse_agent_output(self, completion: str) -> Any:
        if self._first("parse_agent_output"):
            if self.kind == "unprintable":
                return Unprintable(), "word"
            if self.kind == "lying":
                return "", LyingStr("word " * 100)
            if self.kind == "bytes":
                return "", b"word"
            misbehave(self.kind)
        return self.inner.parse_agent_output(completion)


class HostileHook:
    """A hook plugin whose ``on_episode_end`` does ``kind`` for seeds starting with ``bad``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.heard: list[str] = []

    def on_episode_end(self, episode: dict[str, Any]) -> None:
        self.heard.append(episode["seed"])
        if str(episode["seed"]).startswith(BAD):
            misbehave(self.kind)


# -- values at the boundary -------------------------------------------------------------------
class AliveIs(Calm):
    """``alive`` is ``value`` (a string, an int, a numpy bool) once the hostile episode stepped."""

    def __init__(self, value: Any = "false", **kw: Any) -> None:
        super().__init__(**kw)
        self.value = value

    @property
    def alive(self) -> Any:
        if self.hostile and self.n:
            return self.value
        return super().alive


class BadSuccess(Calm):
    """A good reward, and a ``success`` extra that raises or is not a bool."""

    def __init__(self, kind: str = "raise", **kw: Any) -> None:
        super().__init__(**kw)
        self.kind = kind

    def success(self) -> Any:
        if self.kind == "raise":
            raise RuntimeError("success is undecided")
        return "yes"


class LyingReply(Calm):
    """``step`` returns a str subclass whose ``__len__`` claims 3 characters."""

    def step(self, action: str) -> Any:
        text = super().step(action)
        return LyingStr(text + "x" * 5000) if self.hostile else text


class OddError(Exception):
    """An exception whose message holds a lone surrogate, or whose ``str()`` raises."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind

    def __str__(self) -> str:
        if self.kind == "unprintable":
            raise RuntimeError("no message either")
        return "broken \ud800 pipe " + "!" * 10_000


class OddErrorStep(StepFault):
    def __init__(self, kind: str = "surrogate", **kw: Any) -> None:
        super().__init__(**kw)
        self.kind = kind

    def fault(self) -> None:
        raise OddError(self.kind)


# -- start-up checks: every seed is hostile ----------------------------------------------------
class StartFails(Calm):
    """``reset`` (for every seed), ``seeds`` or ``demonstrate`` does ``kind``: raise, hang,
    segfault; ``wrong`` (demonstrate only) returns a string, not a list of actions."""

    def __init__(self, kind: str = "raise", at: str = "reset", **kw: Any) -> None:
        super().__init__(**kw)
        self.kind, self.at = kind, at

    def _fail(self) -> None:
        if self.kind == "segfault":
            ctypes.string_at(0)
        if self.kind == "hang":
            nap(60)
        if self.kind == "sleep":
            time.sleep(60)
        raise KeyError("the level file is missing")

    def seeds(self, split: str, count: int) -> list[str]:
        if self.at == "seeds":
            self._fail()
        return [f"{split}-{i}" for i in range(count)]

    def reset(self, seed: str) -> Any:
        if self.at == "reset":
            self._fail()
        return super().reset(seed)

    def demonstrate(self, seed: str) -> Any:
        if self.at == "demonstrate":
            if self.kind == "wrong":
                return "left, up"
            self._fail()
        return ["left", "up"]


class SlowDemonstration(Calm):
    """Builds its episode's start on first use, in ``demonstrate`` as in ``reset`` (as TextWorld
    makes a game), and declares the time that takes."""

    reset_timeout = 8.0

    def demonstrate(self, seed: str) -> list[str]:
        time.sleep(3.0)  # past the step timeout of 2 s, within the declared 8 s
        return ["left"]


def refuses_its_options(**options: Any) -> Calm:
    """An env factory that refuses a combination of options, as a registered factory's
    ``__init__`` does through the registry (one sentence, a usage error)."""
    from trl_env.errors import PluginOptionError

    raise PluginOptionError("Could not create environment 'bad': width 3 is below height 5.")


# -- process-wide state: what a thread-isolated env shares with the trainer ------------------
class Wanderer(Calm):
    """On reset, moves the process's working directory (to ``$TRL_ENV_WANDER_TO``) and takes
    ``sys.stdout`` and ``sys.stderr`` into buffers it never gives back."""

    def reset(self, seed: str) -> Any:
        import contextlib
        import io

        os.chdir(os.environ.get("TRL_ENV_WANDER_TO", "/"))
        contextlib.redirect_stdout(io.StringIO()).__enter__()
        contextlib.redirect_stderr(io.StringIO()).__enter__()
        return super().reset(seed)


DELETED_ON: list[str] = []  # the thread each DelRecorder's __del__ ran on


class DelRecorder(Calm):
    """Notes the thread its ``__del__`` runs on, and blocks there for ``block`` seconds."""

    block = 0.0

    def __del__(self) -> None:
        DELETED_ON.append(threading.current_thread().name)
        if self.block:
            nap(self.block)
