"""Where envs run, as a user of the CLI meets it: the host kind is one choice among the
registered ones, and under process isolation no command's own process builds or even imports
an env; a run's envs are built only in its own workers, at most ``--env-workers`` of them.

The env here, ``recorder``, is a real plugin of a fake installed distribution: its module notes
the process that imports it, and each env the process that builds it, with the value of the
variable ``RECORDER_SECRET`` that process sees (what ``--env-pass-env`` lets through).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trl_env.testing.fake_dist import FakeDistributions, console_script
from trl_env.testing.timeouts import scaled

RECORDER = '''
import os

LOG = {log!r}


def note(what):
    with open(LOG, "a", encoding="utf-8") as out:
        out.write(f"{{what}} {{os.getpid()}} {{os.environ.get('RECORDER_SECRET', '-')}}\\n")


note("import")


class Recorder:
    """One turn: saying "done" wins; it demonstrates that."""

    system_prompt = "Reply done."

    def __init__(self, size: int = 3):
        note("build")
        self.size, self.reward, self.alive = size, 0.0, False

    def seeds(self, split, count):
        return [f"{{split}}-{{i}}" for i in range(count)]

    def demonstrate(self, seed):
        return ["done"]

    def reset(self, seed):
        self.reward, self.alive = 0.0, True
        return f"Game {{seed}} of size {{self.size}}: reply done."

    def step(self, action):
        self.alive = False
        self.reward = 1.0 if action.strip() == "done" else 0.0
        return "Over."

    @property
    def success(self):
        return self.reward == 1.0
'''


class Recorded:
    """The recorder's log: who imported and built envs, and what secret each saw."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[tuple[str, int, str]]:
        if not self.path.exists():
            return []
        return [
            (what, int(pid), secret)
            for what, pid, secret in (line.split() for line in self.path.read_text().splitlines())
        ]

    def pids(self, what: str) -> set[int]:
        return {pid for kind, pid, _ in self.lines() if kind == what}


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[tuple[FakeDistributions, Recorded]]:
    log = tmp_path / "recorder.log"
    fakes = FakeDistributions(tmp_path / "site")
    fakes(
        "trl-env-recorder",
        envs={"recorder": "recorder_env:Recorder"},
        modules={"recorder_env": RECORDER.format(log=str(log))},
    )
    yield fakes, Recorded(log)
    fakes.cleanup()


def run(fakes: FakeDistributions, *args: str, stdin: str = "") -> tuple[int, subprocess.Popen]:
    """The real console script, as a user runs it; (exit status, the process)."""
    proc = subprocess.Popen(
        [console_script(), *args],
        env=fakes.env(RECORDER_SECRET="s3cret"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(stdin, timeout=scaled(600))
    assert proc.returncode == 0, (out[-2000:], err[-3000:])
    return proc.returncode, proc


PASS = ("--env-pass-env", "RECORDER_SECRET")
ISOLATED = ("--env-isolation", "process", "--env-workers", "2", *PASS)
SHORT = ("--processor", "qwen3", "--max-new-tokens", "2", "--max-turns", "1")


def assert_isolated(recorded: Recorded, command: subprocess.Popen, workers: int = 2) -> None:
    """Nothing of the env ran in the command's process; envs were built in at most ``workers``
    processes, each of which got the secret it was given by name."""
    assert command.pid not in recorded.pids("import") | recorded.pids("build"), recorded.lines()
    assert 0 < len(recorded.pids("build")) <= workers, recorded.lines()
    assert {secret for _, _, secret in recorded.lines()} == {"s3cret"}


def test_eval_builds_its_envs_only_in_its_own_workers(recorder):
    fakes, recorded = recorder
    _, proc = run(fakes, "eval", "--env", "recorder", *SHORT, "--episodes", "4", *ISOLATED)
    assert_isolated(recorded, proc)


def test_train_builds_its_envs_only_in_its_own_workers(recorder, tmp_path):
    fakes, recorded = recorder
    out = tmp_path / "run"
    args = ["--max-steps", "1", "--batch-size", "2", "--num-generations", "2",
            "--train-seeds", "4", "--report-to", "none", "--output-dir", str(out)]  # fmt: skip
    _, proc = run(fakes, "train", "--env", "recorder", *SHORT, *args, *ISOLATED)
    assert_isolated(recorded, proc)


def test_sft_builds_its_envs_only_in_its_own_workers(recorder, tmp_path):
    fakes, recorded = recorder
    args = ["--processor", "smollm2", "--episodes", "2", "--epochs", "1", "--report-to", "none",
            "--output-dir", str(tmp_path / "run")]  # fmt: skip
    _, proc = run(fakes, "sft", "--env", "recorder", *args, *ISOLATED)
    assert_isolated(recorded, proc)


def test_play_builds_its_env_only_in_a_worker(recorder):
    fakes, recorded = recorder
    args = ("--env-isolation", "process", *PASS)
    _, proc = run(fakes, "play", "--env", "recorder", *args, stdin="done\n")
    assert_isolated(recorded, proc, workers=1)


def test_serve_s_main_process_imports_no_env(recorder):
    """``trl-env serve`` holds the fleet's token: the env's code runs in its workers only."""
    import socket

    fakes, recorded = recorder
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [
            console_script(),
            "serve",
            "--env",
            "recorder",
            "--port",
            str(port),
            "--env-pass-env",
            "RECORDER_SECRET",
        ],
        env=fakes.env(RECORDER_SECRET="s3cret"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        end = time.monotonic() + scaled(120)
        while not recorded.pids("build") and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.2)  # the start-up probe builds one env, in a worker
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=scaled(60))
    assert recorded.pids("build"), err[-3000:]
    assert_isolated(recorded, proc, workers=1)


def test_the_host_kinds_are_listed_with_who_registers_them(recorder):
    fakes, _ = recorder
    listed = subprocess.run(
        [console_script(), "list", "--json"], env=fakes.env(), capture_output=True, text=True,
        timeout=scaled(120), check=True,
    )  # fmt: skip
    kinds = {r["name"]: r["distribution"] for r in json.loads(listed.stdout) if r["kind"] == "host"}
    assert kinds == {"thread": "trl-env", "process": "trl-env", "servers": "trl-env-openenv"}
    shown = subprocess.run(
        [console_script(), "list"], env=fakes.env(), capture_output=True, text=True,
        timeout=scaled(120), check=True,
    ).stdout  # fmt: skip
    assert "Env hosts (--env-isolation):" in shown


def test_an_unknown_host_kind_is_one_sentence_naming_the_registered_ones():
    from click.testing import CliRunner

    from trl_env.cli import cli

    result = CliRunner().invoke(
        cli, ["eval", "--env", "guess", "--processor", "qwen3", "--env-isolation", "fork"]
    )
    assert result.exit_code == 2, result.output
    assert "env_isolation 'fork' is no registered kind of env host" in result.output
    assert "process, servers, thread" in result.output
