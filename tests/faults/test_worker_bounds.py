"""Bounds of the process boundary that cost the trainer if missing: a worker's reply is counted
before it is decoded, and a worker dies with its parent even while stuck in C with the GIL."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import boundary_envs as B
import pytest

from trl_env.errors import EnvCrashed
from trl_env.hosts import frames
from trl_env.hosts.pool import EnvProcessPool

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.timeout(180)


def test_value_count_counts_values_outside_strings() -> None:
    assert frames.value_count(b"[[],[],[]]") == 7  # 1 + 2 commas + 4 openings: at most
    assert frames.value_count(b'"a,b:[c{"') == 1  # one string, whatever it holds
    assert frames.value_count(b'{"k": "v,\\\\", "n": [1, 2]}') == 7


def test_a_reply_of_many_empty_lists_is_refused_before_it_is_decoded(no_leaks) -> None:
    count = 1_500_000  # 4.5 MB on the wire; decoded, about 90 MB
    with EnvProcessPool(B.ManyLists, max_workers=1) as pool:
        remote = pool.open(timeout=30.0)
        remote.call("reset", "ok", timeout=30.0)
        # The peak of what Python allocated during the call, not RSS: in a suite's worker
        # process RSS also moves with the allocator's arenas and other tests' threads (it once
        # read 23 MB here, over a bound it had always met by luck).
        tracemalloc.start()
        try:
            with pytest.raises(EnvCrashed, match="JSON values, over the limit"):
                remote.call("step", str(count), timeout=60.0)
            grown = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        remote.release()
        # What it cost is about four times the bytes read (the read buffer, its copy, and the
        # two of the pass that blanks strings before counting), not the 20 times decoding takes.
        assert grown < 6 * 3 * count, f"the trainer grew {grown / 2**20:.0f} MB"
        # a reply within the bound is read as it was sent
        again = pool.open(timeout=30.0)
        again.call("reset", "ok", timeout=30.0)
        assert again.call("step", "1000", timeout=30.0) == [[]] * 1000
        again.release()


def test_a_worker_holding_the_gil_dies_with_its_parent(tmp_path: Path) -> None:
    here = Path(B.__file__).parent
    script = tmp_path / "orphan.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(here)!r})\n"
        "import boundary_envs\n"
        "from trl_env.hosts.pool import EnvProcessPool\n"
        "pool = EnvProcessPool(boundary_envs.HoldsTheGil)\n"
        "remote = pool.open(timeout=30)\n"
        "remote.call('reset', 'ok', timeout=30)\n"
        "print(__import__('psutil').Process().children()[0].pid, flush=True)\n"
        "remote.call('step', 'x', timeout=None)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    time.sleep(1.0)  # the worker is inside the match, holding the GIL
    assert psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
    parent.kill()
    parent.wait()
    end = time.monotonic() + 10.0
    while _running(worker) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _running(worker), "the worker outlived its killed parent"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
