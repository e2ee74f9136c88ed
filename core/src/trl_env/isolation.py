"""Env code in worker processes: a crash, a hang or GIL-bound code ends one episode, not the run.

Each env lives in a worker process of an :class:`EnvProcessPool`; the engine talks to it through
a :class:`RemoteEnv`. A call past its timeout kills the worker (a process can always be stopped,
a thread cannot); a worker that dies (segfault, ``os._exit``, out-of-memory kill) is reported
with its signal or exit code, and the next episode gets a fresh one.

Workers are fresh interpreters started with :mod:`subprocess` (exec, never a bare fork, so a
parent holding torch and threads is safe) and spoken to over a socket pair with the framing and
pickling of :mod:`multiprocessing.connection`. Not ``multiprocessing.Process``: its spawn and
forkserver methods leave a resource tracker (and a fork server) running in the parent after the
pool is closed, and the pool promises to leave no process behind.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any

from .errors import UsageError
from .protocols import Env

STARTUP_SECONDS = 60.0  # a fresh interpreter importing the env's module; not env time
_STOP_SECONDS = 2.0  # how long close() lets an idle worker exit before killing it
_METHODS = ("reset", "step", "close")


class IsolationError(Exception):
    """An env call in a worker process did not return a value."""


class EnvTimeout(IsolationError):
    """The call ran past its timeout; its worker process was killed."""


class EnvCrashed(IsolationError):
    """The worker process died during the call (a signal or an exit code says how)."""


class EnvRaised(IsolationError):
    """The env code raised; ``type_name`` and ``message`` are those of its exception."""

    def __init__(self, type_name: str, message: str, where: str = "") -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name, self.message, self.where = type_name, message, where


class EnvProcessPool:
    """Worker processes that each hold one env at a time, reused from episode to episode."""

    def __init__(
        self,
        source: str | Callable[[], Env],
        options: dict[str, Any] | None = None,
        *,
        max_workers: int = 64,
    ) -> None:
        if max_workers < 1:
            raise UsageError("An env process pool needs at least one worker.")
        self.max_workers = max_workers
        self.workers_started = 0
        self._init = _init_message(source, dict(options or {}))
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._reserved = 0  # workers being started outside the lock
        self._closed = False

    @property
    def live_workers(self) -> int:
        with self._cond:
            return len(self._live)

    def open(self, timeout: float | None) -> RemoteEnv:
        """A fresh env in an idle worker, or in a new one while fewer than ``max_workers`` run.

        ``timeout`` bounds the factory call only. Waiting for a busy worker to come free is not
        env time (every episode holding one ends, by its own timeouts), and neither is starting
        a new interpreter (bounded by ``STARTUP_SECONDS``).
        """
        worker = self._take()
        reused = worker is not None
        if worker is None:
            worker = self._start()
        try:
            worker.ask(("open",), timeout)
        except EnvCrashed:
            self._give_back(worker)
            if not reused:
                raise
            # A reused worker that died after its liveness check (a thread its last env left
            # behind ended it): not this episode's doing; it gets another worker.
            return self.open(timeout)
        except IsolationError:
            self._give_back(worker)
            raise
        return RemoteEnv(self, worker)

    def _start(self) -> _Worker:
        """A new worker in the slot :meth:`_take` reserved, ready to open an env."""
        try:
            worker = _Worker.start(self._init)
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
            worker.ask(("ready",), STARTUP_SECONDS)
        except IsolationError:
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
        """An idle worker, or None after reserving a slot for a new one."""
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
                self._cond.wait()

    def _give_back(self, worker: _Worker) -> None:
        with self._cond:
            if worker.broken or self._closed:
                self._discard(worker)
            else:
                self._idle.append(worker)
            self._cond.notify()

    def _discard(self, worker: _Worker) -> None:
        self._live.discard(worker)
        worker.stop(graceful=False)


class RemoteEnv:
    """One episode's env, living in a worker process."""

    def __init__(self, pool: EnvProcessPool, worker: _Worker) -> None:
        self._pool: EnvProcessPool | None = pool
        self._worker = worker

    def call(self, method: str, *args: Any, timeout: float | None) -> Any:
        """``reset``/``step``/``close`` call the env's method; any other name reads an attribute.

        A read calls the attribute when it is callable (``system_prompt()``) and gives None when
        the env has no such attribute, as ``getattr(env, name, None)`` would.
        """
        if self._pool is None:
            raise RuntimeError(f"{method} called on an env that was already released")
        return self._worker.ask(("call", method, args), timeout)

    def release(self) -> None:
        """The episode is over: the worker goes back to the pool (or away, if it is broken)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not self._worker.broken:
            self._worker.tell(("drop",))  # let the env go now, not when the worker is reused
        pool._give_back(self._worker)


class _Worker:
    """The parent's end of one worker process."""

    def __init__(self, proc: subprocess.Popen[bytes], conn: Connection) -> None:
        self.proc, self.conn = proc, conn
        self.broken = False
        self.stopped_because = ""  # set when the pool, not the env, ended the process
        self._lock = threading.Lock()  # close() may stop a worker another thread is asking
        self._asking = threading.Lock()

    @classmethod
    def start(cls, init: tuple[Any, ...]) -> _Worker:
        ours, theirs = Pipe(duplex=True)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno()), _PACKAGE_ROOT],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # env prints must not flood the trainer's terminal
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # Ctrl-C reaches the trainer, which stops workers itself
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        worker = cls(proc, ours)
        worker.tell(init)
        return worker

    def tell(self, message: tuple[Any, ...]) -> None:
        """Send without waiting for a reply (the worker's first message, dropping an env)."""
        with self._asking:
            try:
                self.conn.send(message)
            except (OSError, ValueError):  # the worker is gone; the next ask reports how
                self.broken = True

    def ask(self, message: tuple[Any, ...], timeout: float | None) -> Any:
        with self._asking:  # one call at a time: replies come back in order
            if self.broken:
                raise EnvCrashed("the env's worker process is gone")
            try:
                self.conn.send(message)
                if not self.conn.poll(timeout):
                    self.stop(graceful=False)
                    raise EnvTimeout(f"no reply within {timeout:g}s; the env's worker was killed")
                kind, *rest = self.conn.recv()
            except (EOFError, OSError, ValueError):
                raise self._crashed() from None
            except IsolationError:
                raise
            except BaseException:
                # Interrupted mid-call (Ctrl-C, or the engine's thread pool giving up on this
                # thread): the worker's reply would answer the next call, so the worker goes.
                self.stop(graceful=False)
                raise
        if kind == "raised":
            raise EnvRaised(*rest)
        return rest[0]

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
        """End the process and reap it (no zombie); closing our end tells an idle worker to exit."""
        with self._lock:
            self.broken = True
            self.stopped_because = self.stopped_because or because
            if graceful:
                self.conn.close()
                try:
                    self.proc.wait(_STOP_SECONDS)
                    return
                except subprocess.TimeoutExpired:
                    pass
            # Killed before our end is closed: a thread waiting on it sees EOF, not a dead handle.
            if self.proc.returncode is None:
                try:  # the worker leads its own process group: programs the env started go too
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:  # already exited, or the group is gone
                    self.proc.kill()
            self.proc.wait()
            self.conn.close()


# -- the parent's first message: how to rebuild the env factory in a fresh interpreter --------
def _init_message(source: str | Callable[[], Env], options: dict[str, Any]) -> tuple[Any, ...]:
    if isinstance(source, str):
        from .registry import envs

        factory: Callable[..., Env] = envs.factory(source)  # an in-process registration too
        payload: Any = (source, factory, options)
        label = f"env {source!r}"
    elif callable(source):
        if options:
            source = functools.partial(source, **options)
        payload, label = (None, source, {}), f"the env factory {_describe(source)}"
    else:
        raise UsageError(f"An env source is a registered name or a factory, not {source!r}.")
    try:
        data = pickle.dumps(payload)
    except Exception as exc:
        if isinstance(source, str) and not _registered_here(source):
            data = pickle.dumps((source, None, options))  # the worker finds it by its entry point
        else:
            raise UsageError(
                f"{label[0].upper()}{label[1:]} cannot be sent to a worker process ({exc}); with "
                "env_isolation='process' pass a registered env name, or a class or function "
                "defined at the top level of a module (functools.partial of one works too)."
            ) from None
    return ("init", sys.path, os.getcwd(), _main_module() if b"__main__" in data else None, data)


def _registered_here(name: str) -> bool:
    from .registry import envs

    return any(i.name == name and i.distribution.startswith("(") for i in envs.infos())


def _describe(factory: Callable[..., Any]) -> str:
    if isinstance(factory, functools.partial):
        return f"partial({_describe(factory.func)})"
    return getattr(factory, "__qualname__", None) or type(factory).__name__


def _main_module() -> tuple[str, str] | None:
    """How the worker can load the parent's ``__main__``, for factories defined in a script."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and not spec.name.endswith("__main__"):
        return ("module", spec.name)
    path = getattr(main, "__file__", None)
    return ("path", os.path.abspath(path)) if path else None


# -- the worker process -----------------------------------------------------------------------
# The package's own folder goes first: the parent may have found trl_env through sys.path alone.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[2]); "
    "from trl_env.isolation import _serve; _serve(int(sys.argv[1]))"
)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _serve(fd: int) -> None:
    """The worker's loop: build envs and run their calls until the parent closes the socket."""
    conn = Connection(fd)
    _exit_with_parent(os.getppid())
    factory: Callable[[], Any] | None = None
    failure: tuple[str, str, str] | None = None
    try:
        factory = _factory_from(conn.recv())
    except BaseException as exc:
        failure = _describe_exc(exc)
    env: Any = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # without joining threads the env may have left running
        op = message[0]
        if op == "drop":
            env = None
            continue
        if failure is not None:
            _reply(conn, ("raised", *failure), op)
        elif op == "ready":
            _reply(conn, ("ok", None), op)
        elif op == "open":
            env = None
            assert factory is not None
            outcome = _run(factory)
            if outcome[0] == "ok":
                env, outcome = outcome[1], ("ok", None)
            _reply(conn, outcome, "the env factory")
        else:
            _, method, args = message
            _reply(conn, _run(functools.partial(_invoke, env, method, args)), method)


def _factory_from(init: tuple[Any, ...]) -> Callable[[], Any]:
    _, path, cwd, main, data = init
    sys.path[:] = path
    os.chdir(cwd)
    if main is not None:
        _load_main(*main)
    name, factory, options = pickle.loads(data)
    if name is None:
        return functools.partial(_checked, factory, f"The env factory {_describe(factory)}")
    from .registry import envs

    if factory is None:
        factory = envs.factory(name)
    return functools.partial(envs.build, name, factory, options)


def _load_main(kind: str, where: str) -> None:
    import runpy
    import types

    module = types.ModuleType("__mp_main__")
    if kind == "module":
        module.__dict__.update(runpy.run_module(where, run_name="__mp_main__"))
    else:
        module.__dict__.update(runpy.run_path(where, run_name="__mp_main__"))
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def _checked(factory: Callable[[], Any], label: str) -> Any:
    env = factory()
    if env is None:
        raise TypeError(f"{label} returned None, not an env")
    # Looked up on the class (or the instance dict): reading a property here would run env code.
    missing = [
        m
        for m in ("reset", "step", "reward", "alive")
        if not hasattr(type(env), m) and m not in getattr(env, "__dict__", {})
    ]
    if missing:
        raise TypeError(
            f"{label} returned a {type(env).__name__}, which is not an env: "
            f"it lacks {', '.join(missing)}"
        )
    return env


def _invoke(env: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method == "close":
        closer = getattr(env, "close", None)
        return closer() if callable(closer) else None
    if method in _METHODS:
        return getattr(env, method)(*args)
    value = getattr(env, method, None)
    return value(*args) if callable(value) else value


def _run(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", call())
    except BaseException as exc:  # SystemExit included: it ends the call, not the worker
        return ("raised", *_describe_exc(exc))


def _describe_exc(exc: BaseException) -> tuple[str, str, str]:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return type(exc).__name__, str(exc), where


def _reply(conn: Connection, outcome: tuple[Any, ...], what: str) -> None:
    try:
        conn.send(outcome)  # pickled whole before a byte is written
    except Exception as exc:
        value = outcome[1] if len(outcome) > 1 else None
        conn.send(
            (
                "raised",
                "PicklingError",
                f"{what} returned a {type(value).__name__}, which cannot be sent back from "
                f"the worker process: {exc}",
                "",
            )
        )


def _exit_with_parent(parent: int) -> None:
    """Exit when the parent dies, even while env code is stuck (its socket EOF is not read then)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="trl-env-parent-watch").start()
