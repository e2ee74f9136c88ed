"""A run folder's life through `trl-env train`: trained to its end, viewed, stopped by signals.

Real runs of the tiny qwen3 model (one or two steps each) and real signals to a real process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.testing.fake_dist import console_script
from trl_env.testing.timeouts import scaled
from trl_env.training import rundir

# Two-step episodes of a few tokens, in batches of 4: a step takes a second or so.
QUICK = [
    *("--env", "guess", "--processor", "qwen3", "--processor-arg", "thinking=false"),
    *("--max-new-tokens", "4", "--max-turns", "2", "--batch-size", "4"),
    *("--num-generations", "2", "--train-seeds", "16", "--no-check"),
]


def read_episodes(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "episodes" / "rank0.jsonl").open()]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder``: its size and modification time, to the nanosecond."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_finished_run_resumes_to_nothing_and_its_report_does_not_block_overwrite(tmp_path):
    out = tmp_path / "run"
    runner = CliRunner()
    first = runner.invoke(cli, ["train", *QUICK, "--max-steps", "1", "--output-dir", str(out)])
    assert first.exit_code == 0, first.output
    assert rundir.is_run(out)  # the mark that lets --overwrite replace this folder, and no other
    before = snapshot(out)

    # Before: "step 2/1", a new checkpoint and final/ replaced.
    again = runner.invoke(cli, ["train", "--output-dir", str(out), "--resume", "--json"])
    assert again.exit_code == 0, again.output
    assert "has already trained 1 steps, of max_steps 1" in again.stderr
    assert "nothing changed" in again.stderr and "--max-steps N (N > 1)" in again.stderr
    assert json.loads(again.stdout)["steps"] == 1  # the run's own summary, as it was
    assert snapshot(out) == before

    # The report `trl-env view` writes into the folder is the run's, not a stranger's.
    viewed = runner.invoke(cli, ["view", str(out)])
    assert viewed.exit_code == 0, viewed.output
    assert (out / "report.html").is_file()
    (out / "notes.txt").write_text("mine")  # a file of the user's still stops it
    refused = runner.invoke(cli, ["train", *QUICK, "--output-dir", str(out), "--overwrite"])
    assert refused.exit_code == 2 and "notes.txt" in refused.output
    assert "report.html" not in refused.output
    (out / "notes.txt").unlink()
    replaced = runner.invoke(
        cli, ["train", *QUICK, "--max-steps", "1", "--output-dir", str(out), "--overwrite"]
    )
    assert replaced.exit_code == 0, replaced.output
    assert not (out / "report.html").exists()

    # A run that has steps left still resumes.
    more = runner.invoke(
        cli, ["train", "--output-dir", str(out), "--resume", "--max-steps", "2", "--json"]
    )
    assert more.exit_code == 0, more.output
    assert json.loads(more.stdout)["steps"] == 2 and "nothing changed" not in more.stderr


# A step long enough (turns of 8 tokens, 6 turns) that a second Ctrl-C lands inside the first.
SLOW = [*QUICK, "--max-new-tokens", "8", "--max-turns", "6", "--save-steps", "500"]


def test_a_run_stopped_by_two_ctrl_cs_names_the_command_that_carries_it_on(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [console_script(), "train", *SLOW, "--max-steps", "500", "--output-dir", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = out / "episodes" / "rank0.jsonl"
    deadline = time.monotonic() + scaled(300)
    while not (log.exists() and log.read_text().count("\n") >= 1):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=scaled(120))
    assert proc.returncode in (130, -signal.SIGINT), stderr[-2000:]
    named = re.search(r"(?:Carry the run on|Continue) with: (trl-env train .*)$", stderr, re.M)
    assert named, stderr[-2000:]
    command = shlex.split(named[1])

    saved = sorted(out.glob("checkpoint-*"))
    if not saved:  # the usual case: stopped inside the first step, before any checkpoint
        assert command[1:] == ["train", "--config", str(out / "config.yaml"), "--overwrite"]
        resumed = CliRunner().invoke(cli, ["train", "--output-dir", str(out), "--resume"])
        assert resumed.exit_code == 2  # before: "train without --resume first", then refused
        assert named[1] in resumed.output.replace("\n", " "), resumed.output
        steps = 1
    else:  # the step ended between the two signals, and saved its checkpoint
        assert command[1:] == ["train", "--output-dir", str(out), "--resume"]
        steps = int(saved[-1].name.split("-")[1]) + 1
    # The command as named, the run kept short.
    ran = CliRunner().invoke(cli, [*command[1:], "--max-steps", str(steps), "--json"])
    assert ran.exit_code == 0, ran.output[-2000:]
    assert json.loads(ran.stdout)["steps"] == steps
    assert {e["step"] for e in read_episodes(out)} == set(range(steps))


# How people keep a log of a run, and what ends it: Ctrl-C (SIGINT) to the pipeline's process
# group, which ends `tee` too; a closed terminal (SIGHUP) with stderr in the same pipe; a reader
# that stops reading (`head`). Either way the pipe dies with the run, and every write to it fails.
PIPELINES = {  # the signal sent to the group, train's redirection, the reader
    "ctrl-c to train | tee": (signal.SIGINT, "", "tee {log}"),
    "hang-up to train 2>&1 | tee": (signal.SIGHUP, "2>&1", "tee {log}"),
    "train | head -n 1": (None, "", "head -n 1"),
}


@pytest.mark.parametrize("case", PIPELINES)
def test_a_run_whose_pipe_dies_with_it_saves_a_checkpoint_and_says_how_to_resume(tmp_path, case):
    sig, redirect, reader = PIPELINES[case]
    reader = reader.format(log=tmp_path / "log")
    out, status = tmp_path / "run", tmp_path / "status"
    train = [console_script(), "train", *SLOW, "--max-steps", "500", "--output-dir", str(out)]
    # A real shell pipeline in a process group of its own, as a terminal runs it; the braces
    # keep train's own exit status (the pipeline's is the reader's), their trap their shell alive
    # to write it (train starts with the signals' default handling all the same).
    script = f"{{ trap : INT HUP; {shlex.join(train)} {redirect}; echo $? > {status}; }} | {reader}"
    proc = subprocess.Popen(
        ["bash", "-c", script],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = out / "episodes" / "rank0.jsonl"
        deadline = time.monotonic() + scaled(300)
        while sig is not None and not (log.exists() and log.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "training never started"
            time.sleep(0.05)
        if sig is not None:
            os.killpg(proc.pid, sig)
        _, stderr = proc.communicate(timeout=scaled(300))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    code = int(status.read_text())
    # before: 1, and no checkpoint (a BrokenPipeError in the progress line stopped the run)
    assert code == 128 + (sig or signal.SIGPIPE), stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    checkpoint = out / f"checkpoint-{summary['steps']}"
    assert summary["checkpoint"] == str(checkpoint) and checkpoint.is_dir()
    assert summary["stopped_by"] == signal.Signals(sig or signal.SIGPIPE).name
    resume = f"trl-env train --output-dir {out} --resume"
    assert summary["next_command"] == resume
    # The closing lines, which the dead pipe could not carry, are in the run folder.
    closing = (out / "closing.txt").read_text()
    assert str(checkpoint) in closing and closing.endswith(f"Continue with: {resume}\n")
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
