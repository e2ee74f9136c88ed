"""Run untrusted Python code in a separate, limited, isolated process; never raise.

``Sandbox().run(code)`` writes ``code`` to ``main.py`` in a fresh temporary directory, runs it
through ``_launcher.py`` (the child half: namespaces, limits, uid, clean-up) and returns a
:class:`RunResult` with the output, cut at ``Limits.output_bytes``, and why the run ended.

What is enforced where (the README has the full table):

- always: a separate process per run, a new session; RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE,
  RLIMIT_NOFILE, RLIMIT_NPROC, no core files; a wall-clock timeout after which every process
  of the run is killed; output read incrementally and cut at a byte cap (the run is killed
  when it passes it); an environment that inherits nothing; a fresh working directory, removed
  afterwards; stdin at end-of-file; a watchdog on the whole process tree (its total memory
  and process count, every 50 ms); runs beyond the 256 slots of a process wait for one.
- as root: the program runs under a uid of its own (so RLIMIT_NPROC binds and it cannot touch
  the trainer's files or ``/proc/<pid>/environ``), with ``no_new_privs``.
- where namespaces are allowed (root, or unprivileged user namespaces): no network (a new,
  empty network namespace), a new pid namespace, a private ``/proc``, a size-capped tmpfs as
  the working directory and every other mount read-only, fresh empty ``/tmp``, ``/run`` and
  ``/var/run`` (host services keep their Unix sockets there).
- on x86_64 and aarch64 Linux: a seccomp filter that refuses Unix-domain sockets (``socket``
  with ``AF_UNIX``, datagram ``socketpair``, ``io_uring``), so no host socket can be reached.

Each isolation step is best effort; :attr:`RunResult.isolation` says which ones applied, and
``Sandbox(require=...)`` turns a missing one into a ``setup_error`` instead of running.
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

LAUNCHER = Path(__file__).with_name("_launcher.py")
MiB = 1024 * 1024
# Fixed values, nothing from the trainer's environment: secrets cannot leak through it.
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    # Thread pools count against RLIMIT_NPROC and reserve address space.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# Dedicated uids: 2**30 + (trainer pid) * 256 + slot, one per concurrent run of a process.
UID_BASE, UID_SLOTS, PID_SPAN = 1 << 30, 256, 1 << 22
NOBODY = 65534
STOP_GRACE = 3.0  # seconds the launcher gets to kill and reap everything after SIGTERM
DRAIN_GRACE = 0.5  # seconds to collect output still in the pipe once the launcher exited


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. Sizes in bytes; CPU and ``memory_bytes`` are per process.

    ``total_memory_bytes`` and ``processes`` hold for the run's whole process tree (a program
    that forks gets one budget, not one per child); see the README for how, where.
    """

    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_bytes: int = 512 * MiB  # RLIMIT_AS: address space, so a bit above real use
    total_memory_bytes: int = 1024 * MiB  # memory of every process of the run together
    file_bytes: int = 16 * MiB  # RLIMIT_FSIZE: largest file the program may write
    workdir_bytes: int = 64 * MiB  # size of the tmpfs working directory, where available
    processes: int = 32  # RLIMIT_NPROC: processes and threads of the sandbox uid
    open_files: int = 64
    output_bytes: int = 64 * 1024
    code_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, not {value!r}")


@dataclass(frozen=True)
class RunResult:
    """How a run ended.

    ``status``: ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (wall clock),
    ``cpu_limit``, ``output_limit``, ``memory_limit`` (the tree's memory together passed
    ``total_memory_bytes``), ``process_limit`` (the tree held more than ``processes``),
    ``killed`` (another signal, e.g. SIGSEGV after a failed allocation), ``rejected`` (code too
    large) or ``setup_error`` (the sandbox could not start; ``error`` says why).
    ``queued_seconds``: time spent waiting for a free run slot, not counted in ``seconds``.
    """

    status: str
    output: str = ""
    exit_code: int | None = None
    truncated: bool = False
    seconds: float = 0.0
    cpu_seconds: float | None = None
    error: str = ""
    isolation: dict[str, bool] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    used_memory: int | None = None  # bytes the tree held when it was stopped (memory_limit)
    used_processes: int | None = None  # processes the tree held when stopped (process_limit)
    queued_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def note(self) -> str:
        """One readable line on how the run ended; empty for a clean exit."""
        lim = self.limits
        notes = {
            "ok": "",
            "error": f"[exit code {self.exit_code}]",
            "timeout": f"[killed: still running after {lim.wall_seconds:g} s]",
            "cpu_limit": f"[killed: CPU time limit of {lim.cpu_seconds} s exceeded]",
            "output_limit": f"[killed: output passed {lim.output_bytes} bytes; the rest is lost]",
            "memory_limit": (
                f"[killed: the program's processes together used "
                f"{-(-(self.used_memory or 0) // MiB)} MiB of memory; the limit is "
                f"{lim.total_memory_bytes // MiB} MiB]"
            ),
            "process_limit": (
                f"[killed: the program ran {self.used_processes} processes at once; the limit "
                f"is {lim.processes}]"
            ),
            "killed": f"[killed by signal {_signal_name(self.exit_code)}]",
            "rejected": f"[not run: {self.error}]",
            "setup_error": f"[sandbox error: {self.error}]",
        }
        text = notes.get(self.status, f"[{self.status}]")
        # A failed allocation in C code often ends in one of these signals.
        crashed = self.exit_code in (-signal.SIGSEGV, -signal.SIGBUS, -signal.SIGABRT)
        if "MemoryError" in self.output[-2000:] or (self.status == "killed" and crashed):
            text += f" [memory limit: {lim.memory_bytes // MiB} MiB]"
        return text.strip()

    def text(self, max_chars: int | None = None) -> str:
        """Output (cut to ``max_chars`` characters) and note together, as a model sees them."""
        output = self.output.rstrip("\n")
        if max_chars is not None and len(output) > max_chars:
            output = f"{output[:max_chars]}\n[... cut: {len(output) - max_chars} more characters]"
        parts = [output] if output.strip() else []
        if self.truncated and self.status != "output_limit":
            parts.append(f"[output cut at {self.limits.output_bytes} bytes]")
        if self.note():
            parts.append(self.note())
        return "\n".join(parts) if parts else "(no output)"


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return "?"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return str(-code)


# -- uids ------------------------------------------------------------------------------------
def _uid_mapped(first: int, count: int) -> bool:
    """Whether uids ``first .. first+count-1`` exist in this user namespace."""
    try:
        with open("/proc/self/uid_map") as fh:
            extents = [tuple(int(x) for x in line.split()) for line in fh if line.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= first and first + count <= inside + size for inside, _, size in extents)


class UidPool:
    """Run slots of this process, each with a uid of its own, so RLIMIT_NPROC counts one run.

    At most ``slots`` runs at once; a run beyond that waits for a slot to free instead of
    failing. ``peak`` is the most slots ever held at once (for tests and logs).
    """

    def __init__(self, slots: int = UID_SLOTS) -> None:
        if not 1 <= slots <= UID_SLOTS:
            raise ValueError(f"slots must be between 1 and {UID_SLOTS}, not {slots}")
        self.slots = slots
        self.peak = 0
        self._free = threading.Condition()
        self._busy: set[int] = set()

    @contextmanager
    def take(self) -> Iterator[int]:
        """Wait for a free slot; its uid, or "nobody" where the uids are not mapped."""
        with self._free:
            self._free.wait_for(lambda: len(self._busy) < self.slots)
            slot = min(set(range(self.slots)) - self._busy)
            self._busy.add(slot)
            self.peak = max(self.peak, len(self._busy))
        try:
            base = UID_BASE + (os.getpid() % PID_SPAN) * UID_SLOTS
            # A user namespace with a small uid map: share "nobody" (NPROC then counts all runs).
            yield base + slot if _uid_mapped(base, UID_SLOTS) else NOBODY
        finally:
            with self._free:
                self._busy.discard(slot)
                self._free.notify()


UIDS = UidPool()


# -- the sandbox -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Sandbox:
    """Settings for running code; :meth:`run` may be called from many threads at once.

    ``drop_user``: run as a dedicated uid (default: when root). ``cut_network``, ``pid``,
    ``filesystem``: try to cut the network, give the run its own pid namespace and make the file
    system read-only but for a tmpfs working directory. ``deny_unix_sockets``: a seccomp filter
    refuses Unix-domain sockets (a new network namespace does not cut those: they are files),
    and, with the file system step, ``/tmp``, ``/run`` and ``/var/run`` are fresh and empty.
    ``require``: isolation keys (see :attr:`RunResult.isolation`) that must apply, else the run
    is a ``setup_error``.
    """

    limits: Limits = field(default_factory=Limits)
    python: str = sys.executable
    python_args: tuple[str, ...] = ("-I", "-B", "-u")
    drop_user: bool | None = None
    cut_network: bool = True
    pid: bool = True
    filesystem: bool = True
    deny_unix_sockets: bool = True
    require: frozenset[str] = frozenset()
    tmp_dir: str | None = None

    def run(self, code: str) -> RunResult:
        """Run ``code`` as a Python program. Never raises (except on programming errors)."""
        queued = time.monotonic()
        start = queued
        data = code.encode("utf-8", "replace")
        if len(data) > self.limits.code_bytes:
            return RunResult(
                "rejected",
                error=f"the code is {len(data)} bytes; the limit is {self.limits.code_bytes}",
                limits=self.limits,
            )
        drop = os.geteuid() == 0 if self.drop_user is None else self.drop_user
        try:
            with UIDS.take() as uid:
                # The wall clock starts once the run has a slot: waiting is not the program's time.
                start = time.monotonic()
                if "dedicated_user" in self.require and (not drop or uid == NOBODY):
                    raise RuntimeError("isolation missing: dedicated_user")
                result = self._run(data, uid if drop else None, start)
                return replace(result, queued_seconds=start - queued)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return RunResult(
                "setup_error",
                error=str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}",
                seconds=time.monotonic() - start,
                limits=self.limits,
            )

    def _run(self, data: bytes, uid: int | None, start: float) -> RunResult:
        workdir = tempfile.mkdtemp(prefix="trl-env-sandbox-", dir=self.tmp_dir)
        status_r, status_w = os.pipe()
        try:
            Path(workdir, "main.py").write_bytes(data)
            os.chmod(Path(workdir, "main.py"), 0o644)
            config = self._config(workdir, uid, status_w)
            try:
                proc = subprocess.Popen(
                    [self.python, "-I", "-S", str(LAUNCHER), json.dumps(config)],
                    cwd=workdir,
                    env={},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    pass_fds=(status_w,),
                    start_new_session=True,
                )
            finally:
                os.close(status_w)
            assert proc.stdout is not None
            try:
                output, reason = collect(proc, start + self.limits.wall_seconds, self.limits)
            finally:
                stop(proc)
                proc.stdout.close()
            report = read_status(status_r)
        finally:
            os.close(status_r)
            shutil.rmtree(workdir, ignore_errors=True)
        return self._result(output, reason, report, uid, time.monotonic() - start)

    def _config(self, workdir: str, uid: int | None, status_fd: int) -> dict[str, object]:
        lim = self.limits
        return {
            "workdir": workdir,
            "uid": uid,
            "status_fd": status_fd,
            "parent_pid": os.getpid(),
            "net": self.cut_network,
            "fs": self.filesystem,
            "pid": self.pid,
            "tmpfs_bytes": lim.workdir_bytes,
            # The parent decides the uid; the launcher checks the rest before starting the program.
            "require": sorted(self.require - {"dedicated_user"}),
            "limits": {
                "cpu_seconds": max(1, math.ceil(lim.cpu_seconds)),  # RLIMIT_CPU counts seconds
                "memory_bytes": int(lim.memory_bytes),
                "total_memory_bytes": int(lim.total_memory_bytes),
                "file_bytes": int(lim.file_bytes),
                "processes": int(lim.processes),
                "open_files": int(lim.open_files),
            },
            "argv": [self.python, *self.python_args, "main.py"],
            "expose": interpreter_paths(self.python),
            "keep": interpreter_prefixes(self.python),
            "unix": self.deny_unix_sockets,
            "env": {**BASE_ENV, "HOME": workdir, "TMPDIR": workdir},
        }

    def _result(
        self,
        output: bytes,
        reason: str | None,
        report: dict[str, object],
        uid: int | None,
        seconds: float,
    ) -> RunResult:
        applied = report.get("applied")
        isolation = {k: v is True for k, v in applied.items()} if isinstance(applied, dict) else {}
        isolation["dedicated_user"] = uid is not None and uid != NOBODY and bool(applied)
        text = output[: self.limits.output_bytes].decode("utf-8", "replace")
        truncated = len(output) > self.limits.output_bytes
        exit_code = report.get("exit")
        cpu = report.get("cpu")
        result = RunResult(
            "ok",
            output=text,
            truncated=truncated,
            seconds=seconds,
            cpu_seconds=float(cpu) if isinstance(cpu, int | float) else None,
            isolation=isolation,
            limits=self.limits,
            exit_code=exit_code if isinstance(exit_code, int) else None,
        )
        if report.get("error"):
            error = str(report["error"]).removeprefix("sandbox setup failed: OSError: ")
            return replace(result, status="setup_error", error=error)
        memory, processes = report.get("memory"), report.get("processes")
        if reason is None and isinstance(memory, int):
            return replace(result, status="memory_limit", used_memory=memory)
        if reason is None and isinstance(processes, int):
            return replace(result, status="process_limit", used_processes=processes)
        return replace(result, status=self._status(reason, result.exit_code, result.cpu_seconds))

    def _status(self, reason: str | None, exit_code: int | None, cpu: float | None) -> str:
        if reason is not None:
            return reason
        if exit_code is None:
            return "setup_error"
        if exit_code == 0:
            return "ok"
        if exit_code > 0:
            return "error"
        # SIGXCPU at the soft limit; SIGKILL at the hard one, if SIGXCPU was caught.
        used_up = cpu is not None and cpu >= self.limits.cpu_seconds - 0.05
        if exit_code == -signal.SIGXCPU or (exit_code == -signal.SIGKILL and used_up):
            return "cpu_limit"
        return "killed"


def interpreter_prefixes(python: str) -> list[str]:
    """Where the program's interpreter and its standard library live (a venv and its base)."""
    real_dir = os.path.dirname(os.path.realpath(python))
    paths = [real_dir, os.path.dirname(real_dir)]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        paths += [sys.prefix, sys.base_prefix, sys.exec_prefix]
    return sorted(set(paths))


def interpreter_paths(python: str) -> list[str]:
    """Directories the program's interpreter reads: its prefix, stdlib and site-packages.

    For this process's own interpreter that is ``sys.path`` (without the current directory)
    and the prefixes; for another one, the directory of its binary and the one above.
    """
    real_dir = os.path.dirname(os.path.realpath(python))
    paths = [real_dir, os.path.dirname(real_dir)]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        cwd = os.getcwd()
        paths += [sys.prefix, sys.base_prefix, sys.exec_prefix]
        paths += [p for p in sys.path if p and os.path.abspath(p) != cwd and os.path.isdir(p)]
    return sorted(set(paths))


# -- reading the output ----------------------------------------------------------------------
def collect(
    proc: subprocess.Popen[bytes], deadline: float, limits: Limits
) -> tuple[bytes, str | None]:
    """Read output until the launcher exits, the deadline passes or the cap is crossed.

    Never holds more than ``output_bytes + 1`` bytes. Returns the bytes and ``"timeout"``,
    ``"output_limit"`` or None.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    cap = limits.output_bytes
    buf = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    eof = exited = False
    drain_until: float | None = None
    try:
        while True:
            now = time.monotonic()
            end = deadline if drain_until is None else drain_until
            if now >= end:
                return bytes(buf), ("timeout" if drain_until is None else None)
            wait = end - now if pidfd is not None else min(end - now, 0.02)
            for ready, _ in poller.poll(wait * 1000):
                if ready == fd:
                    chunk = _read(fd)
                    if chunk == b"":
                        eof = True
                        poller.unregister(fd)
                    elif chunk:
                        buf += chunk[: cap + 1 - len(buf)]
                        if len(buf) > cap:
                            return bytes(buf), "output_limit"
                elif ready == pidfd:
                    exited = True
                    poller.unregister(pidfd)
            if pidfd is None and not exited:
                exited = _has_exited(proc.pid)
            if exited and eof:
                return bytes(buf), None
            if exited and drain_until is None:
                drain_until = time.monotonic() + DRAIN_GRACE
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _read(fd: int) -> bytes | None:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3 or not Linux: poll every 20 ms instead
        return None


def _has_exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (its pid stays reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Ask the launcher to kill and reap everything; SIGKILL the session if it does not."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


def read_status(fd: int) -> dict[str, object]:
    """Merge the JSON lines the launcher stages wrote (first error wins)."""
    os.set_blocking(fd, False)
    data = bytearray()
    while len(data) < MiB:
        chunk = _read(fd)
        if not chunk:
            break
        data += chunk
    report: dict[str, object] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            if "error" in report:
                item.pop("error", None)
            report.update(item)
    return report


_PROBE_LOCK = threading.Lock()
_PROBED: dict[Sandbox, dict[str, bool]] = {}


def capabilities(sandbox: Sandbox | None = None) -> dict[str, bool]:
    """The isolation ``sandbox`` gets on this machine (one trivial run, cached)."""
    sandbox = sandbox or Sandbox()
    with _PROBE_LOCK:
        if sandbox not in _PROBED:
            _PROBED[sandbox] = dict(sandbox.run("pass").isolation)
        return dict(_PROBED[sandbox])
