"""Env code in worker processes: a crash, a hang or hostile code ends one episode, not the run.

Each env lives in a worker process of an :class:`EnvProcessPool`; to everything above it the env
is a :class:`RemoteEnv`, an :class:`~trl_env.protocols.Env` whose every method and attribute read
is a call into the worker with a deadline. A call past its deadline kills the worker and every
process it started (a process can always be stopped, a thread cannot); a worker that dies
(segfault, ``os._exit``, out-of-memory kill) is reported with its signal or exit code, and the
next episode gets a fresh one. Workers are replaced after ``max_episodes`` episodes.

How workers start: :mod:`trl_env.hosts.launch`; what they run: :mod:`trl_env.hosts.worker`;
what crosses between them: :mod:`trl_env.hosts.frames`; their process trees:
:mod:`trl_env.hosts.tree`.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..callpool import Slots
from ..errors import EnvCrashed, EnvMisbehaved, EnvRaised, EnvTimeout, UsageError
from ..protocols import Env
from . import frames
from .launch import BOOT, PACKAGE_ROOT, Launch, init_message, spawn
from .tree import STOP_SECONDS, kill_tree
from .worker import pickled

STARTUP_SECONDS = 60.0  # a fresh interpreter importing the env's module; not env time


class EnvProcessPool:
    """Worker processes that each hold one env at a time, reused from episode to episode.

    ``slots`` counts episodes holding a worker (at most ``max_workers``). A scheduler takes a
    slot before it runs :meth:`open` (``slot_held=True``), so that waiting for a worker is
    never a blocked thread; :meth:`open` without one waits for a slot itself.
    """

    def __init__(
        self,
        source: str | Callable[[], Env],
        options: dict[str, Any] | None = None,
        *,
        max_workers: int = 64,
        pass_env: tuple[str, ...] = (),
        user: str | int | None = None,
        max_episodes: int | None = None,
    ) -> None:
        if max_workers < 1:
            raise UsageError("An env process pool needs at least one worker.")
        if max_episodes is not None and max_episodes < 1:
            raise UsageError("env_max_episodes must be at least 1.")
        self.max_workers, self.max_episodes = max_workers, max_episodes
        self.workers_started = 0
        self.workers_recycled = 0  # replaced after max_episodes
        self.slots = Slots(max_workers)
        self._launch = Launch.make(pass_env, user)
        self._init = init_message(source, dict(options or {}))
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._reserved = 0  # workers being started outside the lock
        self._closed = False

    @classmethod
    def for_config(
        cls, source: str | Callable[[], Env], cfg: Any, options: dict[str, Any] | None = None
    ) -> EnvProcessPool:
        """A pool with the worker options of a :class:`~trl_env.config.RolloutConfig`."""
        return cls(
            source,
            options,
            max_workers=cfg.env_workers,
            pass_env=tuple(cfg.env_pass_env),
            user=cfg.env_user,
            max_episodes=cfg.env_max_episodes,
        )

    @property
    def live_workers(self) -> int:
        with self._cond:
            return len(self._live)

    def open(
        self,
        timeout: float | None,
        *,
        slot_held: bool = False,
        options: Mapping[str, Any] | None = None,
    ) -> RemoteEnv:
        """A fresh env in an idle worker, or in a new one while fewer than ``max_workers`` run;
        made with ``options`` (a curriculum stage's, say) instead of the pool's own.

        ``timeout`` bounds the factory call, and is the deadline of the env's calls. Waiting for
        a slot is not env time (every episode holding one ends, by its own timeouts), and
        neither is starting a new interpreter (bounded by ``STARTUP_SECONDS``).
        """
        # the trainer's own data, as the first message is: pickled, never sent back
        message = ["open"] if options is None else ["open", pickled(dict(options))]
        if not slot_held:
            self.slots.acquire()
        try:
            worker = self._open_worker(message, timeout)
        except BaseException:
            self.slots.release()
            raise
        return RemoteEnv(self, worker, timeout)

    def _open_worker(self, message: list[Any], timeout: float | None) -> _Worker:
        while True:
            worker = self._take()
            reused = worker is not None
            if worker is None:
                worker = self._start()
            try:
                worker.ask(message, timeout)
            except EnvCrashed:
                self._give_back(worker)
                if not reused:
                    raise
                # A reused worker that died after its liveness check (a thread its last env
                # left behind ended it): not this episode's doing; it gets another worker.
                continue
            except BaseException:
                self._give_back(worker)
                raise
            worker.episodes += 1
            return worker

    def _start(self) -> _Worker:
        """A new worker in the slot :meth:`_take` reserved, ready to open an env."""
        try:
            worker = _Worker.start(self._init, self._launch)
        except BaseException:
            with self._cond:
                self._reserved -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._reserved -= 1
            self.workers_started += 1
            self._live.add(worker)
            if self._closed:
                self._discard(worker)
                raise EnvCrashed("the env process pool was closed")
        try:
            worker.ask(["ready"], STARTUP_SECONDS)
        except BaseException:
            self._give_back(worker)
            raise
        return worker

    def close(self) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones are killed; all are reaped."""
        with self._cond:
            self._closed = True
            workers = list(self._live)
            idle = set(self._idle)
            self._idle.clear()
            self._live.clear()
            self._cond.notify_all()
        for worker in workers:
            worker.stop(graceful=worker in idle, because="the env process pool was closed")

    def __enter__(self) -> EnvProcessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bookkeeping ---------------------------------------------------------------------
    def _take(self) -> _Worker | None:
        """An idle worker, or None after reserving room for a new one.

        A slot holder always finds one or the other (each holds at most one worker); the wait
        below only covers a worker being given back right now.
        """
        with self._cond:
            while True:
                if self._closed:
                    raise EnvCrashed("the env process pool was closed")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.proc.poll() is None:
                        return worker
                    self._discard(worker)  # died idle (a thread its env left): not this episode's
                if len(self._live) + self._reserved < self.max_workers:
                    self._reserved += 1
                    return None
                self._cond.wait(1.0)

    def _give_back(self, worker: _Worker) -> None:
        with self._cond:
            spent = self.max_episodes is not None and worker.episodes >= self.max_episodes
            if worker.broken or self._closed or spent:
                self.workers_recycled += spent and not worker.broken and not self._closed
                self._discard(worker)
            else:
                self._idle.append(worker)
            self._cond.notify()

    def _discard(self, worker: _Worker) -> None:
        self._live.discard(worker)
        worker.stop(graceful=False)


_DEFAULT: Any = object()


def _read(name: str) -> Any:
    """A property of :class:`RemoteEnv` that reads the worker's env's attribute ``name``."""
    return property(lambda self: self.call(name))


class RemoteEnv:
    """One episode's env, living in a worker process, seen as an :class:`Env` with its extras.

    Methods and attribute reads go to the worker with the deadline ``timeout`` (``reset`` gets
    ``reset_deadline`` when set); an attribute the env lacks reads as None, as
    ``getattr(env, name, None)`` would, so the usual defaults of the extras apply.
    """

    def __init__(self, pool: EnvProcessPool, worker: _Worker, timeout: float | None) -> None:
        self._pool: EnvProcessPool | None = pool
        self._worker = worker
        self.timeout = timeout
        self.reset_deadline: float | None = None

    def call(self, method: str, *args: Any, timeout: float | None = _DEFAULT) -> Any:
        """``reset``/``step``/``close`` call the env's method; any other name reads an attribute
        (calling it when it is callable, with ``args``)."""
        if self._pool is None:
            raise RuntimeError(f"{method} called on an env that was already released")
        deadline = self.timeout if timeout is _DEFAULT else timeout
        return self._worker.ask(["call", method, list(args)], deadline)

    # -- the Env protocol and its extras --------------------------------------------------
    def reset(self, seed: str) -> Any:
        return self.call("reset", seed, timeout=self.reset_deadline or self.timeout)

    def step(self, action: str) -> Any:
        return self.call("step", action)

    alive = _read("alive")
    reward = _read("reward")
    turn_reward = _read("turn_reward")
    success = _read("success")
    system_prompt = _read("system_prompt")
    max_turns = _read("max_turns")
    reset_timeout = _read("reset_timeout")
    slot_wait_seconds = _read("slot_wait_seconds")

    def seeds(self, split: str, count: int) -> Any:
        found = self.call("seeds", split, count)
        return [f"{split}-{i}" for i in range(count)] if found is None else found

    def demonstrate(self, seed: str) -> Any:
        """The env's ``demonstrate`` extra (None when it has none), with reset's deadline: a
        demonstration may build the episode's start as reset does."""
        return self.call("demonstrate", seed, timeout=self.reset_deadline or self.timeout)

    def has(self, name: str) -> bool:
        """Whether the worker's env has a method ``name`` (an extra, such as ``demonstrate``)."""
        return self._worker.ask(["has", name], self.timeout) is True

    def close(self) -> None:
        self.call("close")

    def release(self) -> None:
        """The episode is over: the worker goes back to the pool (or away, if it is broken)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not self._worker.broken:
            self._worker.tell(["drop"])  # let the env (and its programs) go now
        pool._give_back(self._worker)
        pool.slots.release()


class _Worker:
    """The parent's end of one worker process."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc, self.sock = proc, sock
        self.broken = False
        self.episodes = 0
        self.stopped_because = ""  # set when the pool, not the env, ended the process
        self._lock = threading.Lock()  # close() may stop a worker another thread is asking
        self._asking = threading.Lock()

    @classmethod
    def start(cls, init: list[Any], launch: Launch) -> _Worker:
        ours, theirs = socket.socketpair()
        user: dict[str, Any] = {}
        if launch.user is not None:
            user = {"user": launch.user[0], "group": launch.user[1], "extra_groups": []}
        try:
            proc = spawn(
                args=[sys.executable, "-c", BOOT, str(theirs.fileno()), PACKAGE_ROOT],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # env prints must not flood the trainer's terminal
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=launch.env,
                cwd="/",  # the worker moves to the trainer's directory if it may
                start_new_session=True,  # Ctrl-C reaches the trainer, which stops workers itself
                **user,
            )
        except OSError as exc:
            ours.close()
            who = f" as uid {launch.user[0]}" if launch.user else ""
            raise EnvCrashed(f"the env's worker process could not start{who}: {exc}") from None
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        worker = cls(proc, ours)
        worker.tell(init)
        return worker

    def tell(self, message: list[Any]) -> None:
        """Send without waiting for a reply (the worker's first message, dropping an env)."""
        with self._asking:
            try:
                self.sock.settimeout(STARTUP_SECONDS)  # a worker that reads nothing is broken
                frames.send(self.sock, message)
            except (OSError, ValueError):  # the worker is gone; the next ask reports how
                self.broken = True

    def ask(self, message: list[Any], timeout: float | None) -> Any:
        with self._asking:  # one call at a time: replies come back in order
            if self.broken:
                raise EnvCrashed("the env's worker process is gone")
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                self.sock.settimeout(timeout)
                frames.send(self.sock, message)
                reply = frames.receive(
                    self.sock, deadline, frames.MAX_REPLY_BYTES, frames.MAX_REPLY_VALUES
                )
            except TimeoutError:
                self.stop(graceful=False)
                raise EnvTimeout(
                    f"no reply within {timeout:g}s; the env's worker was killed"
                ) from None
            except frames.BadReply as bad:
                self.stop(graceful=False)
                raise EnvCrashed(f"the env's worker process sent {bad}; it was killed") from None
            except (EOFError, OSError, ValueError):
                raise self._crashed() from None
            except BaseException:
                # Interrupted mid-call (Ctrl-C, or the engine's thread pool giving up on this
                # thread): the worker's reply would answer the next call, so the worker goes.
                self.stop(graceful=False)
                raise
        kind, value = frames.checked_reply(reply)
        if kind == "raised":
            raise EnvRaised(*value)
        if kind == "unsendable":
            raise EnvMisbehaved(value)
        return value

    def _crashed(self) -> EnvCrashed:
        self.stop(graceful=False)
        code = self.proc.returncode
        if self.stopped_because:
            how = self.stopped_because
        elif code is None:
            how = "the env's worker process stopped answering"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            how = f"the env's worker process was killed by {name}"
            if -code == signal.SIGKILL:
                how += " (out of memory, or killed from outside)"
        else:
            how = f"the env's worker process exited with code {code}"
        return EnvCrashed(how)

    def stop(self, graceful: bool, because: str = "") -> None:
        """End the process and everything it started, and reap it (no zombie)."""
        with self._lock:
            self.broken = True
            self.stopped_because = self.stopped_because or because
            if graceful:
                self.sock.close()  # the idle worker kills its programs and exits
                try:
                    self.proc.wait(STOP_SECONDS)
                    return
                except subprocess.TimeoutExpired:
                    pass
            # Killed before our end is closed: a thread waiting on it sees EOF, not a dead handle.
            if self.proc.returncode is None:
                kill_tree(self.proc.pid)
            self.proc.wait()
            self.sock.close()
