"""The command the deadlock was found with: `trl-env eval` of 8 episodes on 2 env worker
processes finishes, and a Ctrl-C in the middle of such a batch ends it with its workers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trl_env.testing.processes import default_sigint, interrupt_when
from trl_env.testing.timeouts import scaled

psutil = pytest.importorskip("psutil")
TRL_ENV = str(Path(sys.executable).parent / "trl-env")
ARGS = [
    *("eval", "--env", "guess", "--processor", "qwen3", "--episodes", "8"),
    *("--batch-size", "8", "--env-isolation", "process", "--env-workers", "2"),
    *("--max-new-tokens", "4", "--json"),
]


def workers(proc: subprocess.Popen) -> list[int]:
    try:
        kids = psutil.Process(proc.pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for kid in kids:
        try:
            if "trl_env.hosts.worker" in " ".join(kid.cmdline()):
                found.append(kid.pid)
        except psutil.NoSuchProcess:  # gone, or a zombie (its subclass), meanwhile
            continue
    return found


def test_eight_episodes_on_two_workers_finish(tmp_path):
    out = tmp_path / "eval.jsonl"
    done = subprocess.run(
        [TRL_ENV, *ARGS, "--max-turns", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 8 and all(r["status"] != "error" for r in records)


def test_ctrl_c_in_a_batch_waiting_for_workers_ends_it_and_its_workers(tmp_path):
    proc = subprocess.Popen(
        [TRL_ENV, *ARGS, "--episodes", "400", "--max-new-tokens", "16"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    seen: list[int] = []

    def both_up() -> bool:  # both workers up: the other six episodes wait for one
        seen[:] = workers(proc)
        return len(seen) >= 2

    interrupt_when(proc, both_up, "the workers did not start in time", settle=1.0)
    assert proc.returncode != 0
    end = time.monotonic() + scaled(10)
    while any(psutil.pid_exists(p) for p in seen) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(psutil.pid_exists(p) for p in seen)
