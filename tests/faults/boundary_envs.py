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

from hostile_envs import CRASHES as H_CRASHES
from hostile_envs import KINDS as H_KINDS
from hostile_envs import Calm, Mixed, nap


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
            fd = int(sys.argv[1])  # the worker's end of its socket (see trl_env.hosts.launch.BOOT)
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


class ManyLists(Calm):
    """``step`` returns millions of empty lists: a few bytes each on the wire, about 60 each
    once decoded by the trainer."""

    def step(self, action: str) -> Any:
        return [[]] * int(action)


class RawFrame(Calm):
    """``step`` writes the frame its action names straight onto the worker's socket, as a
    hostile env may, and exits: ``escaped-open-N`` is N bytes of escaped quotes in a string that
    never closes, ``escaped-N`` the same closed (JSON: a string of N/2 quotes)."""

    def step(self, action: str) -> Any:
        kind, size = action.rsplit("-", 1)
        data = b'["ok", "' + b'\\"' * (int(size) // 2)
        if kind == "escaped":
            data += b'"]'
        fd = int(sys.argv[1])  # the worker's end of its socket (see trl_env.hosts.launch.BOOT)
        os.write(fd, struct.pack(">Q", len(data)))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os._exit(0)


class HoldsTheGil(Calm):
    """``step`` spends minutes in one regular-expression match, a C call that keeps the GIL:
    no Python thread of its worker runs meanwhile."""

    def step(self, action: str) -> Any:
        import re

        return str(re.match(r"(a+)+$", "a" * 64 + "b"))


# -- the soak's kinds (bench/soak.py): hostile to the process boundary --------------------------
SOAK_MARKER = "TRL_ENV_SOAK_MARKER"  # where a pickle payload would write (the soak passes it)
SLEEP_TAG = "299.5"  # the sleepers' argument, to find any left behind


class PickleSoak(Calm):
    """Sends a pickle payload in place of its reply (process isolation only)."""

    def step(self, action: str) -> Any:
        if self.hostile:
            data = pickle.dumps(_Payload(os.environ.get(SOAK_MARKER, "/nonexistent/x")))
            os.write(int(sys.argv[1]), struct.pack(">Q", len(data)) + data)
            nap(30)
        return super().step(action)


class SetsidSoak(Calm):
    """Starts a sleeper in a session of its own and leaves it running."""

    def step(self, action: str) -> Any:
        if self.hostile:
            subprocess.Popen(["sleep", SLEEP_TAG], start_new_session=True)
        return super().step(action)


class SecretSoak(Calm):
    """Puts ``HF_TOKEN`` (if it can see it) into its reply."""

    def step(self, action: str) -> Any:
        text = super().step(action)
        return f"{text} token={os.environ.get('HF_TOKEN', '')}" if self.hostile else text


class ProcSecretSoak(Calm):
    """Puts any ``HF_TOKEN`` it finds in another process's ``/proc/PID/environ`` into its reply:
    what a worker of the trainer's own user (no ``env_user``) can read past the allow-list."""

    def step(self, action: str) -> Any:
        text = super().step(action)
        if not self.hostile:
            return text
        found = ""
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    block = fh.read(1 << 20)
            except OSError:
                continue
            for item in block.split(b"\0"):
                if item.startswith(b"HF_TOKEN="):
                    found = item[len(b"HF_TOKEN=") :].decode("utf-8", "replace")
        return f"{text} token={found}"


PROC_SECRET = "procsecret"


class ResetForever(Calm):
    """``reset`` never ends, in an env declaring ``reset_timeout = inf`` (see SoakMixed)."""

    def reset(self, seed: str) -> Any:
        if seed.startswith("bad"):
            nap(600)
        return super().reset(seed)


SOAK_KINDS = {
    **H_KINDS,
    "pickle": PickleSoak,
    "setsid": SetsidSoak,
    "secret": SecretSoak,
    PROC_SECRET: ProcSecretSoak,
    "resetinf": ResetForever,
}
# harmless, or fatal, in-process
PROCESS_ONLY = (*H_CRASHES, "pickle", "setsid", "secret", PROC_SECRET)


class SoakMixed(Mixed):
    """:class:`hostile_envs.Mixed` with the kinds above, declaring an infinite reset timeout
    (capped by the engine, so ``resetinf`` ends in ``timeout``)."""

    reset_timeout = float("inf")

    def reset(self, seed: str) -> Any:
        kind = seed.split("-")[1] if seed.startswith("bad") else ""
        self.inner = SOAK_KINDS.get(kind, Calm)()
        return self.inner.reset(seed)
