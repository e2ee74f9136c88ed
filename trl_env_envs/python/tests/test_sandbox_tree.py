"""Limits on the whole process tree of a run, and runs beyond the concurrency cap waiting."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest

from trl_env_python import sandbox as sandbox_module
from trl_env_python.env import PythonEnv
from trl_env_python.sandbox import Limits, MiB, Sandbox, UidPool

# Four children, each holding 100 MiB of touched memory (b"x" * n writes every page) for a
# while: 400 MiB together, though each child stays far below its own 512 MiB RLIMIT_AS.
FORKING_HOG = """
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (100 << 20)
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("every child finished")
"""


def test_forked_children_share_one_memory_budget(leftovers: Callable[..., list[int]]) -> None:
    limits = Limits(wall_seconds=30, memory_bytes=512 * MiB, total_memory_bytes=256 * MiB)
    result = Sandbox(limits).run(FORKING_HOG)
    assert result.status == "memory_limit", result.text()
    assert result.used_memory is not None and result.used_memory > 256 * MiB
    assert "every child finished" not in result.output
    note = result.text()
    assert "[killed: the program's processes together used" in note
    assert note.endswith("MiB of memory; the limit is 256 MiB]")
    assert leftovers() == []


def test_the_same_program_under_a_larger_budget_runs_to_the_end() -> None:
    limits = Limits(wall_seconds=30, memory_bytes=512 * MiB, total_memory_bytes=1024 * MiB)
    result = Sandbox(limits).run(FORKING_HOG)
    assert (result.status, result.output) == ("ok", "every child finished\n")


def test_the_tree_process_count_holds_where_rlimit_nproc_does_not() -> None:
    # Without a uid of its own (root keeps uid 0, which RLIMIT_NPROC ignores), only the
    # watchdog's count of the tree stops a program that keeps forking.
    if os.geteuid() != 0:
        pytest.skip("as non-root RLIMIT_NPROC counts all of the user's processes and binds first")
    code = (
        "import os, time\n"
        "for _ in range(8):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(5)\n"
        "        os._exit(0)\n"
        "time.sleep(5)\n"
    )
    result = Sandbox(Limits(wall_seconds=30, processes=4), drop_user=False).run(code)
    assert result.status == "process_limit", result.text()
    assert result.used_processes is not None and result.used_processes > 4
    assert result.text().endswith("processes at once; the limit is 4]")


def test_runs_beyond_the_cap_wait_for_a_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = UidPool(slots=2)
    monkeypatch.setattr(sandbox_module, "UIDS", pool)
    box = Sandbox(Limits(wall_seconds=3.0))
    results = []

    def run() -> None:
        results.append(box.run("import time; time.sleep(1.0); print('done')"))

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [r.status for r in results] == ["ok"] * 6, [r.text() for r in results]
    assert pool.peak == 2
    # Six runs of a second or more through two slots: the last two waited two seconds or
    # more, and waiting plus running passed the 3 s wall clock, which only the run counts.
    assert max(r.queued_seconds for r in results) >= 2.0
    assert max(r.queued_seconds + r.seconds for r in results) > 3.0


def test_env_option_reaches_the_sandbox() -> None:
    env = PythonEnv(total_memory_mb=256, timeout=30.0)
    env.reset("train-0")
    reply = env.step(f"```python\n{FORKING_HOG}\n```")
    assert "[killed: the program's processes together used" in reply
    assert "the limit is 256 MiB]" in reply and env.alive
