"""Child half of the sandbox: isolate, limit, drop privileges, run the program, clean up.

:mod:`trl_env_python.sandbox` starts this file as ``python -I -S _launcher.py CONFIG`` in a new
session with an empty environment. It is a fresh, single-threaded process, so it can fork and
change namespaces safely (``preexec_fn`` in a threaded trainer cannot). Standard library only.

Process tree::

    trainer ── launcher ── init ── program (python main.py)
                           (PID 1 of a new pid namespace when the OS allows it)

- launcher: enters new network, mount and pid namespaces (each best effort), forwards a stop
  request (SIGTERM, also sent when the trainer dies) to init, waits for init.
- init: child subreaper, so every orphan of the program comes back to it; sets up the file
  system (fresh tmpfs over ``/tmp``, ``/run``, ``/var/run``, ``/dev/shm``, ``/var/tmp``: no host
  Unix socket or named pipe is in reach),
  installs a seccomp filter that refuses Unix-domain sockets, starts the program, waits for
  it, then kills and reaps every process left.
- program: own process group, resource limits, dedicated uid, no_new_privs, then ``execve``.

Each stage writes one JSON line to the status pipe (``status_fd``): what isolation was
applied, a setup error, or how the program ended. The program never sees that pipe.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 36, 38, 22
SECCOMP_MODE_FILTER = 2
# Directories anyone may write to, where host processes keep Unix sockets and named pipes; each
# gets a fresh, empty tmpfs. (A read-only mount does not stop a program opening a host's FIFO.)
SHARED_DIRS = ("/tmp", "/run", "/var/run", "/dev/shm", "/var/tmp")
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added in Linux 5.12)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
CLEANUP_SECONDS = 2.0
# How often the tree's total memory and process count are checked: a program may pass the
# total by what it allocates in this time before it is stopped.
WATCH_SECONDS = 0.05
PAGE = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)


class Stop(Exception):
    """Raised by the SIGTERM handler to break out of a wait."""


def _stop(signum: int, frame: object) -> None:
    raise Stop


def _call(what: str, ret: int) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int, what: str) -> None:
    _call(what, _libc.unshare(ctypes.c_int(flags)))


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    args = (enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data or None))
    _call(f"mount {target}", _libc.mount(*args))


class _MountAttr(ctypes.Structure):
    # struct mount_attr (linux/mount.h); like _SockFilter below, the kernel's layout, field by field
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _set_readonly(path: str, readonly: bool, recursive: bool) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY)
    flags = AT_RECURSIVE if recursive else 0
    ret = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _call(f"mount_setattr {path}", ret)


def _prctl(option: int, value: int) -> None:
    _call(f"prctl {option}", _libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0))


# -- seccomp: no Unix-domain sockets ---------------------------------------------------------------
# (audit arch, socket, socketpair, io_uring_setup) per machine; io_uring can create sockets
# without the socket syscall, so it goes too.
_SYSCALLS = {"x86_64": (0xC000003E, 41, 53, 425), "aarch64": (0xC00000B7, 198, 199, 425)}
_X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers
_LD_W_ABS, _JEQ_K, _JGE_K, _AND_K, _RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
AF_UNIX, SOCK_DGRAM, SOCK_TYPE_MASK = 1, 2, 0xF


class _SockFilter(ctypes.Structure):
    # struct sock_filter (linux/filter.h)
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def unix_socket_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The classic BPF program: ``socket(AF_UNIX, ...)``, ``socketpair(AF_UNIX, SOCK_DGRAM)``
    (a datagram socket may ``sendto`` any socket path), ``io_uring_setup`` and calls of another
    ABI fail with EPERM; everything else is allowed. A connected stream pair stays allowed
    (asyncio and subprocess make one; it reaches nothing)."""
    arch, sock, pair, uring = _SYSCALLS[machine]
    nr, arg0, arg1 = 0, 16, 24  # offsets in struct seccomp_data (low words, little endian)
    other_abi = _X32_BIT if machine == "x86_64" else 0xFFFFFFFF
    # (code, jump if true, jump if false, k); jumps count from the next instruction.
    return [
        (_LD_W_ABS, 0, 0, 4),  # 0: A = arch
        (_JEQ_K, 1, 0, arch),  # 1: native -> 3
        (_RET_K, 0, 0, _DENY),  # 2
        (_LD_W_ABS, 0, 0, nr),  # 3: A = syscall number
        (_JGE_K, 0, 1, other_abi),  # 4: x32 -> 5, else 6
        (_RET_K, 0, 0, _DENY),  # 5
        (_JEQ_K, 4, 0, sock),  # 6: -> 11
        (_JEQ_K, 5, 0, pair),  # 7: -> 13
        (_JEQ_K, 1, 0, uring),  # 8: -> 10
        (_RET_K, 0, 0, _ALLOW),  # 9
        (_RET_K, 0, 0, _DENY),  # 10
        (_LD_W_ABS, 0, 0, arg0),  # 11: socket(family, ...)
        (_JEQ_K, 6, 5, AF_UNIX),  # 12: AF_UNIX -> 19, else 18
        (_LD_W_ABS, 0, 0, arg0),  # 13: socketpair(family, type, ...)
        (_JEQ_K, 0, 3, AF_UNIX),  # 14: AF_UNIX -> 15, else 18
        (_LD_W_ABS, 0, 0, arg1),  # 15
        (_AND_K, 0, 0, SOCK_TYPE_MASK),  # 16: without SOCK_NONBLOCK / SOCK_CLOEXEC
        (_JEQ_K, 1, 0, SOCK_DGRAM),  # 17: -> 19, else 18
        (_RET_K, 0, 0, _ALLOW),  # 18
        (_RET_K, 0, 0, _DENY),  # 19
    ]


def deny_unix_sockets() -> None:
    """Install :func:`unix_socket_filter` for this process and every process it starts."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        raise OSError(f"no seccomp filter for the {machine} architecture")
    prog = unix_socket_filter(machine)
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)  # lets a process without CAP_SYS_ADMIN install it
    ret = _libc.prctl(
        PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0
    )
    _call("seccomp filter", ret)


def cover_shared_dirs(keep: list[str]) -> None:
    """A fresh tmpfs over each of :data:`SHARED_DIRS` that exists and holds none of ``keep``."""
    done: set[str] = set()
    for path in SHARED_DIRS:
        real = os.path.realpath(path)
        if real in done or not os.path.isdir(real):
            continue
        if any(
            os.path.realpath(k) == real or os.path.realpath(k).startswith(real + os.sep)
            for k in keep
        ):
            raise OSError(f"{real} holds the interpreter")
        _mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=1777")
        done.add(real)


class Status:
    """The status pipe: one JSON object per line."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **item: object) -> None:
        try:
            os.write(self.fd, (json.dumps(item) + "\n").encode())
        except OSError:  # the trainer stopped listening; nothing more to say
            pass


def _try(applied: dict[str, object], key: str, fn: object, *args: object) -> bool:
    """Run one isolation step; record True or the reason it failed. Best effort by design."""
    try:
        fn(*args)  # type: ignore[operator]
    except OSError as exc:
        applied[key] = exc.strerror or str(exc)
        return False
    applied[key] = True
    return True


# -- launcher --------------------------------------------------------------------------------
def enter_namespaces(cfg: dict, applied: dict[str, object]) -> None:
    """New user (when not root), network, mount and pid namespaces, each if allowed."""
    if not (cfg["net"] or cfg["fs"] or cfg["pid"]):
        return
    if os.geteuid() != 0:
        uid, gid = os.getuid(), os.getgid()

        def user_ns() -> None:
            _unshare(CLONE_NEWUSER, "unshare user namespace")
            for path, text in (
                ("/proc/self/setgroups", "deny"),
                ("/proc/self/uid_map", f"{uid} {uid} 1"),
                ("/proc/self/gid_map", f"{gid} {gid} 1"),
            ):
                with open(path, "w") as fh:
                    fh.write(text)

        if not _try(applied, "user_namespace", user_ns):
            return
    if cfg["net"]:
        _try(applied, "network", _unshare, CLONE_NEWNET, "unshare network namespace")
    if cfg["fs"] and _try(applied, "mount_namespace", _unshare, CLONE_NEWNS, "unshare mount"):
        # Private first: nothing mounted below may show up in the trainer's namespace.
        _try(applied, "mount_namespace", _mount, None, "/", None, MS_REC | MS_PRIVATE)
    if cfg["pid"]:
        _try(applied, "pid_namespace", _unshare, CLONE_NEWPID, "unshare pid namespace")


def _hold_stop() -> None:
    """Block SIGTERM (a stop request stays pending), even if one is being handled right now."""
    while True:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            return
        except Stop:
            continue


def _allow_stop() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def launcher(cfg: dict) -> None:
    status = Status(cfg["status_fd"])
    applied: dict[str, object] = {}
    signal.signal(signal.SIGTERM, _stop)
    _hold_stop()  # a stop request waits until init exists to forward it to
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the trainer died: clean up all the same
        if os.getppid() != cfg["parent_pid"]:
            return
        enter_namespaces(cfg, applied)
        init_pid = os.fork()
    except Exception as exc:
        status.send(error=f"sandbox setup failed: {type(exc).__name__}: {exc}")
        return
    if init_pid == 0:
        init(cfg, applied, status)
    try:
        _allow_stop()
        # Wait without reaping: init's pid stays ours, so the kill below cannot hit a stranger.
        os.waitid(os.P_PID, init_pid, os.WEXITED | os.WNOWAIT)
    except Stop:
        pass
    _hold_stop()
    if os.waitid(os.P_PID, init_pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        os.kill(init_pid, signal.SIGTERM)
    os.waitpid(init_pid, 0)


# -- init ------------------------------------------------------------------------------------
def _cover_point(path: str) -> str | None:
    """The top-most directory above ``path`` that others may not enter (e.g. ``/root``)."""
    parts = os.path.abspath(path).split(os.sep)[1:]
    for i in range(1, len(parts)):
        ancestor = os.sep + os.sep.join(parts[:i])
        try:
            if not os.stat(ancestor).st_mode & 0o001:
                return ancestor
        except OSError:
            return None
    return None


def expose(paths: list[str]) -> None:
    """Make ``paths`` (the interpreter and its libraries) reachable for the sandbox uid.

    A path under a directory others may not enter (pyenv in ``/root``) is bind-mounted into a
    small tmpfs laid over that directory, which hides everything else in it.
    """
    covers: dict[str, list[str]] = {}
    for path in sorted({os.path.realpath(p) for p in paths if os.path.exists(p)}):
        cover = _cover_point(path)
        if cover and not any(path.startswith(p + os.sep) for p in covers.get(cover, [])):
            covers.setdefault(cover, []).append(path)
    for cover, inside in covers.items():
        fds = {p: os.open(p, os.O_PATH) for p in inside}
        try:
            _mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
            for path, fd in fds.items():
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        finally:
            for fd in fds.values():
                os.close(fd)


def prepare_files(cfg: dict, applied: dict[str, object]) -> None:
    """A size-capped tmpfs as the working directory, the rest of the file system read-only."""
    workdir, uid = cfg["workdir"], cfg["uid"]
    owner = uid if uid is not None else os.getuid()
    with open(os.path.join(workdir, "main.py"), "rb") as fh:
        code = fh.read()
    if cfg["fs"] and applied.get("mount_namespace") is True:
        # Before the working directory, which may lie under /tmp; made read-only with the rest.
        _try(applied, "private_tmp", cover_shared_dirs, cfg.get("keep", cfg["expose"]))
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        if applied.get("pid_namespace") is True:
            # Only the sandbox's own processes show in /proc.
            flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
            _try(applied, "private_proc", _mount, "proc", "/proc", "proc", flags)
        if uid is not None:
            # The working directory too: its parent may be closed to others (pytest's tmp_path).
            _try(applied, "interpreter_exposed", expose, [*cfg["expose"], workdir])
        options = f"size={cfg['tmpfs_bytes']},mode=0700,uid={owner},gid={owner}"
        tmpfs = ("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, options)
        own_mount = _try(applied, "tmpfs_workdir", _mount, *tmpfs) or _try(
            applied, "bind_workdir", _mount, workdir, workdir, None, MS_BIND
        )
        if own_mount and _try(applied, "readonly_root", _set_readonly, "/", True, True):
            _set_readonly(workdir, False, False)
    os.chdir(workdir)  # again: the tmpfs now covers the directory the launcher started in
    if applied.get("tmpfs_workdir") is True:
        with open("main.py", "wb") as fh:
            fh.write(code)
    elif uid is not None:
        os.chown(workdir, uid, uid)


def init(cfg: dict, applied: dict[str, object], status: Status) -> None:
    """Start the program, wait for it, then kill and reap everything. Never returns."""
    code = 0
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the program are reparented to us
        prepare_files(cfg, applied)
        if cfg.get("unix", True):
            _try(applied, "unix_sockets_denied", deny_unix_sockets)
        status.send(applied=applied)
        missing = [key for key in cfg["require"] if applied.get(key) is not True]
        if missing:
            raise OSError(f"isolation missing: {', '.join(missing)}")
        child = os.fork()
        if child == 0:
            program(cfg, status)
        _allow_stop()
        supervise(child, cfg["limits"], status)
    except (Stop, ChildProcessError):
        pass
    except BaseException as exc:
        status.send(error=f"sandbox setup failed: {type(exc).__name__}: {exc}")
        code = 1
    finally:
        _hold_stop()
        kill_all()
        os._exit(code)


# -- the tree watchdog ------------------------------------------------------------------------
def supervise(child: int, limits: dict, status: Status) -> None:
    """Wait for the program, reaping orphans; stop when the whole tree passes its limits.

    Per-process rlimits cannot bound a program that forks: every child gets its own
    RLIMIT_AS. So every ``WATCH_SECONDS`` the memory (PSS, so pages shared after ``fork``
    count once) and the number of processes of the whole tree are summed, and passing
    ``total_memory_bytes`` or ``processes`` ends the run (the caller kills everything).
    """
    pidfd = None
    try:
        pidfd = os.pidfd_open(child)
    except (AttributeError, OSError):  # Linux < 5.3: sleep between checks instead
        pass
    try:
        while True:
            while True:
                pid, wstatus, usage = os.wait4(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == child:
                    cpu = usage.ru_utime + usage.ru_stime
                    status.send(exit=os.waitstatus_to_exitcode(wstatus), cpu=cpu)
                    return
            tree = descendants()
            if len(tree) > limits["processes"]:
                status.send(processes=len(tree))
                return
            used = sum(map(memory_of, tree))
            if used > limits["total_memory_bytes"]:
                status.send(memory=used)
                return
            if pidfd is None:
                time.sleep(WATCH_SECONDS)
            else:
                select.select([pidfd], [], [], WATCH_SECONDS)
    finally:
        if pidfd is not None:
            os.close(pidfd)


# The same walk as trl_env.hosts.tree.descendants, kept apart on purpose: this file runs under
# `python -I -S` (no site-packages, so no trl_env), and it reads /proc as the new pid namespace
# numbers it, with a fallback for kernels without /proc/PID/task/TID/children.
def descendants() -> list[int]:
    """Every process below this one: orphans come back to us (subreaper), so this is the tree.

    Pids as the mounted ``/proc`` numbers them (``/proc/self``, not ``os.getpid()``: in a new
    pid namespace without a private ``/proc`` our pid 1 names another process there).
    """
    found: list[int] = []
    todo = [int(os.readlink("/proc/self"))]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:  # a child belongs to the thread that forked it
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except FileNotFoundError:  # no CONFIG_PROC_CHILDREN: scan every process's parent
                kids = _children(pid) if tid == str(pid) else []
            except (OSError, ValueError):
                kids = []
            found += kids
            todo += kids
    return found


def memory_of(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (resident size where PSS is unavailable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0  # already gone


def _children(me: int) -> list[int]:
    try:
        with open(f"/proc/{me}/task/{me}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:  # kernel without CONFIG_PROC_CHILDREN: scan every process's parent
        pass
    kids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                if int(fh.read().rsplit(")", 1)[1].split()[1]) == me:
                    kids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def kill_all() -> None:
    """SIGKILL every process of the sandbox and reap it; bounded by ``CLEANUP_SECONDS``.

    As PID 1 of our own pid namespace, ``kill(-1)`` reaches exactly the sandbox. Otherwise we
    kill our children until none are left: as subreaper we inherit every orphan.
    """
    me = os.getpid()
    deadline = time.monotonic() + CLEANUP_SECONDS
    while time.monotonic() < deadline:
        try:
            if me == 1:
                os.kill(-1, signal.SIGKILL)
            else:
                for pid in _children(me):
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        time.sleep(0.002)


# -- program ---------------------------------------------------------------------------------
def program(cfg: dict, status: Status) -> None:
    """Limit, drop privileges and ``execve`` the interpreter on main.py. Never returns."""
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _allow_stop()  # the signal mask survives execve
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        # A file over RLIMIT_FSIZE then fails with a readable OSError instead of a signal.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limits = cfg["limits"]
        for name, value in (
            ("RLIMIT_CORE", 0),
            ("RLIMIT_FSIZE", limits["file_bytes"]),
            ("RLIMIT_NOFILE", limits["open_files"]),
            ("RLIMIT_AS", limits["memory_bytes"]),
            ("RLIMIT_NPROC", limits["processes"]),
        ):
            resource.setrlimit(getattr(resource, name), (value, value))
        # SIGXCPU at the soft limit, SIGKILL one second later if it is caught.
        cpu = limits["cpu_seconds"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        uid = cfg["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries cannot give root back
        parent = os.getppid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setresuid, which clears it
        if os.getppid() != parent:
            os._exit(126)
        os.set_inheritable(cfg["status_fd"], False)
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    except PermissionError as exc:
        status.send(
            error=f"sandbox setup failed: {exc}; the sandbox uid cannot reach the interpreter "
            "(install Python where every user may read it, or keep the filesystem isolation)"
        )
    except BaseException as exc:
        status.send(error=f"sandbox setup failed: {type(exc).__name__}: {exc}")
    os._exit(127)


if __name__ == "__main__":
    launcher(json.loads(sys.argv[1]))
