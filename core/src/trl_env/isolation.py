"""Env code in worker processes: a crash, a hang or hostile code ends one episode, not the run.

Each env lives in a worker process of an :class:`EnvProcessPool`; to everything above it the env
is a :class:`RemoteEnv`, an :class:`~trl_env.protocols.Env` whose every method and attribute read
is a call into the worker with a deadline. A call past its deadline kills the worker and every
process it started (a process can always be stopped, a thread cannot); a worker that dies
(segfault, ``os._exit``, out-of-memory kill) is reported with its signal or exit code, and the
next episode gets a fresh one.

The worker is a boundary, not only a crash guard:

- What a worker sends back is data, never code: length-prefixed JSON of plain values (str,
  numbers, bool, None, lists, dicts), capped at :data:`MAX_REPLY_BYTES` and checked for shape
  before use. Nothing a worker sends is unpickled. (What the trainer sends, the env factory, is
  pickled: the worker needs it to build the env, and it comes from the trainer's own code.)
- Workers start with a scrubbed environment (:data:`SAFE_ENV`; secrets such as ``HF_TOKEN`` only
  when named in ``pass_env``), optionally as another user (``user``, when the trainer is root),
  and are replaced after ``max_episodes`` episodes.
- A worker is a child subreaper: programs its env starts (``setsid`` or not) stay in its tree,
  and the tree is killed when the env is dropped, when the call times out and when the pool
  closes.

Workers are fresh interpreters started with :mod:`subprocess` (exec, never a bare fork, so a
parent holding torch and threads is safe). Not ``multiprocessing``: its spawn and forkserver
methods leave a resource tracker running after the pool is closed, and speak pickle.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .callpool import Slots
from .errors import UsageError
from .protocols import Env

STARTUP_SECONDS = 60.0  # a fresh interpreter importing the env's module; not env time
MAX_REPLY_BYTES = 256 * 2**20  # the largest reply the trainer reads from a worker
_MAX_ERROR_CHARS = 4000  # an env's exception message, as kept
_STOP_SECONDS = 2.0  # how long close() lets an idle worker exit before killing it
_HEADER = struct.Struct(">Q")
_PR_SET_CHILD_SUBREAPER = 36

# What a worker's environment keeps of the trainer's: what Python, a venv, locales and temporary
# files need. Anything else (tokens, keys, proxies with passwords) only when asked for by name.
SAFE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "TMPDIR",
    "TMP",
    "TEMP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUTF8",
    "PYTHONIOENCODING",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONNOUSERSITE",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "LD_LIBRARY_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
)
SAFE_ENV_PREFIXES = ("LC_", "TRL_ENV_")


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
        self._launch = _Launch.make(pass_env, user)
        self._init = _init_message(source, dict(options or {}))
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

    def open(self, timeout: float | None, *, slot_held: bool = False) -> RemoteEnv:
        """A fresh env in an idle worker, or in a new one while fewer than ``max_workers`` run.

        ``timeout`` bounds the factory call, and is the deadline of the env's calls. Waiting for
        a slot is not env time (every episode holding one ends, by its own timeouts), and
        neither is starting a new interpreter (bounded by ``STARTUP_SECONDS``).
        """
        if not slot_held:
            self.slots.acquire()
        try:
            worker = self._open_worker(timeout)
        except BaseException:
            self.slots.release()
            raise
        return RemoteEnv(self, worker, timeout)

    def _open_worker(self, timeout: float | None) -> _Worker:
        while True:
            worker = self._take()
            reused = worker is not None
            if worker is None:
                worker = self._start()
            try:
                worker.ask(["open"], timeout)
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
    success = _read("success")
    system_prompt = _read("system_prompt")
    max_turns = _read("max_turns")
    reset_timeout = _read("reset_timeout")
    slot_wait_seconds = _read("slot_wait_seconds")

    def seeds(self, split: str, count: int) -> Any:
        found = self.call("seeds", split, count)
        return [f"{split}-{i}" for i in range(count)] if found is None else found

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


# -- how workers are started ---------------------------------------------------------------------
class _Launch:
    """The environment and user a worker process starts with."""

    def __init__(self, env: dict[str, str], user: tuple[int, int] | None) -> None:
        self.env, self.user = env, user

    @classmethod
    def make(cls, pass_env: tuple[str, ...], user: str | int | None) -> _Launch:
        env = {
            k: v
            for k, v in os.environ.items()
            if k in SAFE_ENV or k.startswith(SAFE_ENV_PREFIXES) or k in pass_env
        }
        if user is None or user == "":
            return cls(env, None)
        import pwd

        try:
            entry = pwd.getpwuid(int(user)) if str(user).isdigit() else pwd.getpwnam(str(user))
        except (KeyError, ValueError):
            raise UsageError(f"env_user {user!r} is not a user of this machine.") from None
        if os.geteuid() != 0:
            raise UsageError(
                f"env_user {user!r} needs the trainer to run as root, to start env workers "
                "as another user."
            )
        env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
        return cls(env, (entry.pw_uid, entry.pw_gid))


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
    def start(cls, init: list[Any], launch: _Launch) -> _Worker:
        ours, theirs = socket.socketpair()
        user: dict[str, Any] = {}
        if launch.user is not None:
            user = {"user": launch.user[0], "group": launch.user[1], "extra_groups": []}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno()), _PACKAGE_ROOT],
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
                _send(self.sock, message)
            except (OSError, ValueError):  # the worker is gone; the next ask reports how
                self.broken = True

    def ask(self, message: list[Any], timeout: float | None) -> Any:
        with self._asking:  # one call at a time: replies come back in order
            if self.broken:
                raise EnvCrashed("the env's worker process is gone")
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                self.sock.settimeout(timeout)
                _send(self.sock, message)
                reply = _receive(self.sock, deadline, MAX_REPLY_BYTES)
            except TimeoutError:
                self.stop(graceful=False)
                raise EnvTimeout(
                    f"no reply within {timeout:g}s; the env's worker was killed"
                ) from None
            except _BadReply as bad:
                self.stop(graceful=False)
                raise EnvCrashed(f"the env's worker process sent {bad}; it was killed") from None
            except (EOFError, OSError, ValueError):
                raise self._crashed() from None
            except BaseException:
                # Interrupted mid-call (Ctrl-C, or the engine's thread pool giving up on this
                # thread): the worker's reply would answer the next call, so the worker goes.
                self.stop(graceful=False)
                raise
        kind, value = _checked_reply(reply)
        if kind == "raised":
            raise EnvRaised(*value)
        if kind == "unsendable":
            from .boundary import EnvMisbehaved

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
                    self.proc.wait(_STOP_SECONDS)
                    return
                except subprocess.TimeoutExpired:
                    pass
            # Killed before our end is closed: a thread waiting on it sees EOF, not a dead handle.
            if self.proc.returncode is None:
                kill_tree(self.proc.pid)
            self.proc.wait()
            self.sock.close()


# -- the wire: length-prefixed JSON of plain values ------------------------------------------------
class _BadReply(Exception):
    """A worker sent something that is not a reply (too big, not JSON, the wrong shape)."""


def _send(sock: socket.socket, message: Any) -> None:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    sock.sendall(_HEADER.pack(len(data)))
    sock.sendall(data)


def _receive(sock: socket.socket, deadline: float | None, cap: int) -> Any:
    """One message, read whole before ``deadline`` (``TimeoutError``) and at most ``cap`` bytes."""
    (size,) = _HEADER.unpack(_read_exactly(sock, _HEADER.size, deadline))
    if size > cap:
        raise _BadReply(f"a reply of {size} bytes, over the limit of {cap}")
    data = _read_exactly(sock, size, deadline)
    try:
        return json.loads(data.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise _BadReply(f"a reply that is not JSON ({type(exc).__name__})") from None


def _read_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            n = sock.recv_into(view[got:])
        except BlockingIOError:  # a zero timeout raced a late byte
            continue
        if n == 0:
            raise EOFError
        got += n
    return bytes(buf)


def _checked_reply(reply: Any) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raised", (type, message, where))`` from what a worker sent."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "ok":
        return "ok", reply[1]
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "unsendable":
        return "unsendable", str(reply[1])[:_MAX_ERROR_CHARS]
    if (
        isinstance(reply, list)
        and len(reply) == 4
        and reply[0] == "raised"
        and all(isinstance(part, str) for part in reply[1:])
    ):
        type_name, message, where = reply[1][:200], reply[2][:_MAX_ERROR_CHARS], reply[3][:500]
        return "raised", (type_name, message, where)
    raise EnvCrashed("the env's worker process sent a reply of the wrong shape")


# -- killing a worker's tree ----------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of each of its threads, recursively), from /proc."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (OSError, ValueError):
                kids = []
            found += kids
            todo += kids
    return found


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it, ``setsid`` or not.

    The worker is stopped first and is a subreaper, so orphans of the processes killed here are
    reparented to it and found by the next pass (and, unreaped, their pids cannot be reused).
    """
    try:
        os.kill(pid, signal.SIGSTOP)
    except OSError:
        return
    end = time.monotonic() + _STOP_SECONDS
    while time.monotonic() < end:
        living = [p for p in descendants(pid) if _alive(p)]
        if not living:
            break
        for child in living:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)
    try:
        os.killpg(pid, signal.SIGKILL)  # the worker leads its process group
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


# -- the parent's first message: how to rebuild the env factory in a fresh interpreter --------
def _init_message(source: str | Callable[[], Env], options: dict[str, Any]) -> list[Any]:
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
    main = _main_module() if b"__main__" in data else None
    return ["init", sys.path, os.getcwd(), main, base64.b64encode(data).decode("ascii")]


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
    sock = socket.socket(fileno=fd)
    _become_subreaper()
    _exit_with_parent(os.getppid())
    factory: Callable[[], Any] | None = None
    failure: tuple[str, str, str] | None = None
    try:
        factory = _factory_from(_receive(sock, None, 2**40))
    except BaseException as exc:
        failure = _describe_exc(exc)
    env: Any = None
    while True:
        try:
            message = _receive(sock, None, 2**40)
        except (EOFError, OSError, _BadReply):
            _end_programs()
            os._exit(0)  # without joining threads the env may have left running
        op = message[0]
        if op == "drop":
            env = None
            _end_programs()
            continue
        if failure is not None:
            _reply(sock, ("raised", *failure), op)
        elif op == "ready":
            _reply(sock, ("ok", None), op)
        elif op == "open":
            env = None
            _end_programs()
            assert factory is not None
            outcome = _run(factory)
            if outcome[0] == "ok":
                env, outcome = outcome[1], ("ok", None)
            _reply(sock, outcome, "the env factory")
        else:
            _, method, args = message
            outcome = _run(functools.partial(_invoke, env, method, tuple(args)))
            _reply(sock, outcome, method)


def _factory_from(init: list[Any]) -> Callable[[], Any]:
    _, path, cwd, main, data = init
    sys.path[:] = path
    try:
        os.chdir(cwd)
    except OSError:  # another user may not enter it; relative paths then start at /
        pass
    if main is not None:
        _load_main(*main)
    name, factory, options = pickle.loads(base64.b64decode(data))  # the trainer's own message
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
    from .protocols import missing_members

    env = factory()
    if env is None:
        raise TypeError(f"{label} returned None, not an env")
    missing = missing_members(env)
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
    if method in ("reset", "step"):
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
    try:
        message = str(exc)
    except Exception:  # a __str__ that raises
        message = f"<{type(exc).__name__} whose message cannot be read>"
    return type(exc).__name__, message, where


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON data, or TypeError. numpy and torch scalars become Python ones."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if depth > 32:
        raise TypeError("it is nested too deeply")
    if isinstance(value, str):
        return str.__str__(value)  # a subclass's methods may lie; its characters do not
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, list | tuple):
        return [plain(item, depth + 1) for item in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {str.__str__(k): plain(v, depth + 1) for k, v in value.items()}
    item = getattr(value, "item", None)  # numpy's and torch's scalars (shape () both)
    if callable(item) and getattr(value, "shape", None) == ():
        inner = item()
        if type(inner) in (bool, int, float):
            return inner
    raise TypeError(f"a {type(value).__name__} is not plain data")


def _reply(sock: socket.socket, outcome: tuple[Any, ...], what: str) -> None:
    if outcome[0] == "ok":
        try:
            outcome = ("ok", plain(outcome[1]))
        except TypeError as exc:
            outcome = (
                "unsendable",
                f"the env's {what} returned {type(outcome[1]).__name__}, not str or other plain "
                f"data ({exc}); only str, numbers, bool, None, lists and dicts cross from its "
                "worker process",
            )
    try:
        _send(sock, list(outcome))
    except (OSError, ValueError):
        os._exit(0)  # the parent is gone


def _become_subreaper() -> None:
    """Orphans of the env's programs (``setsid`` ones too) are reparented to this worker."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: process groups still catch most
        pass


def _end_programs() -> None:
    """Kill and reap every process the env started (as subreaper, every orphan is ours)."""
    me = os.getpid()
    end = time.monotonic() + _STOP_SECONDS
    while time.monotonic() < end:
        living = [p for p in descendants(me) if _alive(p)]
        for pid in living:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        if not living and not descendants(me):
            return
        time.sleep(0.005)


def _exit_with_parent(parent: int) -> None:
    """Exit when the parent dies, even while env code is stuck (its socket EOF is not read then)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        _end_programs()
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="trl-env-parent-watch").start()
