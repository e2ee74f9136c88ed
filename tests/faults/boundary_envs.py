"""Envs that test the process boundary itself: what a worker may send back, what it can see,
what it leaves running. Top-level and light, like ``hostile_envs``: worker processes import it."""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from typing import Any

from hostile_envs import Calm, nap

MARKER_ENV = "TRL_ENV_TEST_MARKER"  # passed (TRL_ENV_* is allowed) so the payload knows where


class _Payload:
    """Unpickling this runs a shell command: the classic pickle attack."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


class PicklePayload(Calm):
    """On a bad seed, writes a pickle that would create a file if the trainer unpickled it,
    straight onto the worker's socket, in place of its reply."""

    def step(self, action: str) -> Any:
        if self.hostile:
            marker = self.seed.split(":", 1)[1]
            data = pickle.dumps(_Payload(marker))
            fd = int(sys.argv[1])  # the worker's end of its socket (see isolation._BOOT)
            os.write(fd, struct.pack(">Q", len(data)) + data)
            nap(30)  # the trainer must not wait for a real reply either
        return super().step(action)


class Shows(Calm):
    """``reset`` shows what the env can see: a variable's value, its uid, its pid."""

    def reset(self, seed: str) -> Any:
        super().reset(seed)
        if seed.startswith("env:"):
            return str(os.environ.get(seed[4:], "<unset>"))
        if seed == "uid":
            return str(os.getuid())
        return str(os.getpid())


class Spawner(Calm):
    """``reset`` starts two sleepers, one in a session of its own (``setsid``), and writes their
    pids to the folder its seed names; a ``hang`` seed then sleeps in ``step``."""

    def reset(self, seed: str) -> Any:
        text = super().reset(seed)
        folder = seed.split(":", 1)[1]
        plain = subprocess.Popen(["sleep", "60"])
        detached = subprocess.Popen(["sleep", "61"], start_new_session=True)
        with open(os.path.join(folder, "pids"), "w") as out:
            out.write(f"{plain.pid} {detached.pid}")
        return text

    def step(self, action: str) -> Any:
        if self.seed.startswith("hang"):
            signal.pause()
        return super().step(action)


class SlowReset(Calm):
    """Declares ``reset_timeout``; a ``slow-<seconds>`` seed takes that long to reset."""

    def __init__(self, declared: float = 0.0) -> None:
        super().__init__()
        self.reset_timeout = declared

    def reset(self, seed: str) -> Any:
        if seed.startswith("slow-"):
            nap(float(seed.split("-")[1]))
        return super().reset(seed)


GATE = threading.Event()  # stuck envs wait on it, in C (a lock), until a test sets it


class StuckInC(Calm):
    """On a bad seed, ``step`` blocks in a C-level lock wait that no async exception stops."""

    def step(self, action: str) -> Any:
        if self.hostile:
            GATE.wait()
        return super().step(action)
