"""Process trees of env workers: find every descendant, kill them all, die with the parent.

A worker is a child subreaper, so the programs its env starts (``setsid`` or not) stay in its
tree and are found under ``/proc`` by :func:`descendants`. A worker also dies with its parent:
the kernel sends it SIGKILL when the trainer's thread that started it ends
(``PR_SET_PDEATHSIG``; one thread that lives as long as the trainer starts every worker). That
needs no Python code to run, so a worker stuck in one C call that holds the GIL goes too; a
watcher thread also ends the env's programs when it can run first.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

STOP_SECONDS = 2.0  # how long a stop waits for processes to go before killing them
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


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


def alive(pid: int) -> bool:
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
    end = time.monotonic() + STOP_SECONDS
    while time.monotonic() < end:
        living = [p for p in descendants(pid) if alive(p)]
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


# -- in the worker process ------------------------------------------------------------------------
def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux: process groups still catch most
        return False


def become_subreaper() -> None:
    """Orphans of the env's programs (``setsid`` ones too) are reparented to this worker."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def end_programs() -> None:
    """Kill and reap every process the env started (as subreaper, every orphan is ours)."""
    me = os.getpid()
    end = time.monotonic() + STOP_SECONDS
    while time.monotonic() < end:
        living = [p for p in descendants(me) if alive(p)]
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


def exit_with_parent(parent: int) -> None:
    """Die when the parent dies, even while env code is stuck in C holding the GIL.

    The kernel's parent-death signal (SIGKILL) needs no Python code to run; the watcher thread,
    when it runs first, also ends the env's programs. Checked after arming: a parent that died
    before is not noticed by the kernel.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        end_programs()
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="trl-env-parent-watch").start()
