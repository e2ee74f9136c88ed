"""How long ``trl-env train`` on its defaults takes to its first GRPO step, from the command.

    .venv/bin/python bench/first_step.py [--repeats N] [--json]

Runs ``trl-env train --env guess --processor qwen3 --max-steps 2 --json`` (the tiny model, the
transformers backend, every other option at its default) in a fresh output folder, reads its
stderr as it comes, and reports per repeat the seconds from the command to the ``step 1/2``
line (the first step done), to the process's exit, and the CPU seconds the process used; then the
medians and the load average before and after. Target (issue 38): the first step within 60 s
of the command on 2 idle cores. The figure is the wall time a user waits: under load it is
longer, which the CPU seconds and the load average show.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_S = 60.0
COMMAND = ["train", "--env", "guess", "--processor", "qwen3", "--max-steps", "2", "--json"]


def once(cli: str) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [cli, *COMMAND, "--output-dir", str(Path(tmp) / "run")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        first = None
        for line in proc.stderr:
            if first is None and line.startswith("step 1/"):
                first = time.perf_counter() - start
        code = proc.wait()
        total = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0 or first is None:
        raise RuntimeError(
            f"`trl-env {' '.join(COMMAND)}` exited with {code} before its first step"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"first_step_s": round(first, 1), "exit_s": round(total, 1), "cpu_s": round(cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    cli = str(Path(sys.executable).with_name("trl-env"))
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs = [once(cli) for _ in range(args.repeats)]
    first = statistics.median(r["first_step_s"] for r in runs)
    result = {
        "command": "trl-env " + " ".join(COMMAND),
        "repeats": runs,
        "first_step_s": first,
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "target_s": TARGET_S,
        "met": first <= TARGET_S,
        "cores": os.cpu_count(),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for k, r in enumerate(runs):
        print(
            f"repeat {k}: first step {r['first_step_s']} s, "
            f"exit {r['exit_s']} s, cpu {r['cpu_s']} s"
        )
    verdict = "met" if result["met"] else "MISSED"
    print(f"median first step: {first} s (target <= {TARGET_S:g} s: {verdict})")
    print(
        f"{result['cores']} cores, load average {load_before} before, {result['load_after']} after"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
