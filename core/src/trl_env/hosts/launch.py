"""How an env's worker process starts: its environment, its user, its first message.

Workers are fresh interpreters started with :mod:`subprocess` (exec, never a bare fork, so a
parent holding torch and threads is safe). Not ``multiprocessing``: its spawn and forkserver
methods leave a resource tracker running after the pool is closed, and speak pickle. Every
worker is started by one spawner thread that lives as long as the trainer, since the kernel's
parent-death signal (see :mod:`trl_env.hosts.tree`) follows the thread that started a process.

Workers start with a scrubbed environment (:data:`SAFE_ENV`, a fixed list; secrets such as
``HF_TOKEN`` or ``TRL_ENV_SERVE_TOKEN`` only when named in ``pass_env``), optionally as another
user (``user``, when the trainer is root).
The first message rebuilds the env factory in the worker: it is pickled, since it comes from
the trainer's own code; nothing the worker sends back ever is.
"""

from __future__ import annotations

import base64
import functools
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import UsageError
from ..protocols import Env
from .worker import describe_factory

# What a worker's environment keeps of the trainer's: what Python, a venv, locales, temporary
# files and caches need, and trl-env's own settings that decide what a worker loads. Anything
# else (tokens, keys, proxies with passwords, TRL_ENV_SERVE_TOKEN: a fixed list, never a prefix
# of trl-env's, whose next variable may be a secret) only when asked for by name.
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
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRL_ENV_PLUGINS",  # which distributions the worker may load, as in the trainer
    "TRL_ENV_PLUGIN_TIMEOUT",
    "TRL_ENV_CACHE",  # trl-env's own cache (tiny models)
    "TRL_ENV_VERBOSE",
)
SAFE_ENV_PREFIXES = ("LC_",)


class Launch:
    """The environment and user a worker process starts with."""

    def __init__(self, env: dict[str, str], user: tuple[int, int] | None) -> None:
        self.env, self.user = env, user

    @classmethod
    def make(cls, pass_env: tuple[str, ...], user: str | int | None) -> Launch:
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


def init_message(source: str | Callable[[], Env], options: dict[str, Any]) -> list[Any]:
    if isinstance(source, str):
        from ..registry import envs

        # A name registered in this process travels as its factory; an installed env's module
        # is imported by the worker alone, never by the trainer.
        payload: Any = (source, envs.registered_here(source), options)
        label = f"env {source!r}"
    elif callable(source):
        if options:
            source = functools.partial(source, **options)
        payload, label = (None, source, {}), f"the env factory {describe_factory(source)}"
    else:
        raise UsageError(f"An env source is a registered name or a factory, not {source!r}.")
    try:
        data = pickle.dumps(payload)
    except Exception as exc:
        raise UsageError(
            f"{label[0].upper()}{label[1:]} cannot be sent to a worker process ({exc}); with "
            "env_isolation='process' pass a registered env name, or a class or function "
            "defined at the top level of a module (functools.partial of one works too)."
        ) from None
    main = _main_module() if b"__main__" in data else None
    return ["init", sys.path, os.getcwd(), main, base64.b64encode(data).decode("ascii")]


def _main_module() -> tuple[str, str] | None:
    """How the worker can load the parent's ``__main__``, for factories defined in a script."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and not spec.name.endswith("__main__"):
        return ("module", spec.name)
    path = getattr(main, "__file__", None)
    return ("path", os.path.abspath(path)) if path else None


# -- starting a worker ---------------------------------------------------------------------------
# The package's own folder goes first: the parent may have found trl_env through sys.path alone.
BOOT = (
    "import sys; sys.path.insert(0, sys.argv[2]); "
    "from trl_env.hosts.worker import serve; serve(int(sys.argv[1]))"
)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def spawn(**popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(**popen)`` run on the spawner thread (which never ends before the
    trainer), so a worker's parent-death signal comes when the trainer dies, not when the pool
    thread that asked for the worker does."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawn_forever, name="trl-env-spawner", daemon=True)
            _spawner.start()
    done: Future[subprocess.Popen[bytes]] = Future()
    _requests.put((functools.partial(subprocess.Popen, **popen), done))
    return done.result()


def _spawn_forever() -> None:
    while True:
        start, done = _requests.get()
        try:
            done.set_result(start())
        except BaseException as exc:  # handed to the caller's thread
            done.set_exception(exc)
