"""Start-up benchmark: `trl-env --help` and `trl-env list` against the floor, as ratios.

    .venv/bin/python bench/startup.py [--repeats N] [--json]

The floor is what any trl-env command must do before it can do anything: start Python, import
click and pluggy, and scan the installed distributions' entry points (``importlib.metadata``).
Each repeat runs the floor, ``trl-env --help``, ``trl-env list`` and the tab completion of a
command name (``trl-env <TAB>``, what the shell runs on each key) next to each other (in a
shuffled order), and each command's figure is the median over repeats of its wall time divided
by the floor's in the same repeat, so the machine's speed and load cancel out as far as they
can; the ``cpu`` column is the same ratio in CPU time. ``python -c pass`` is shown for scale.
The target holds both ratios of the three within 1.1x; with ``--strict`` a miss is exit 1.

The commands run with their bytecode cached, as an installed package's is (pip compiles it, and
Python writes it on a first run): ``PYTHONDONTWRITEBYTECODE`` is dropped from their environment,
since with it set trl-env's own modules would be compiled from source on every run while the
floor's libraries, installed, would not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET = 1.1  # of the floor, in wall and in CPU time
FLOOR = (
    "import click, pluggy, importlib.metadata as md\n"
    "eps = md.entry_points()\n"
    "for group in ('trl_env.envs', 'trl_env.processors', 'trl_env.plugins'):\n"
    "    eps.select(group=group)\n"
)
# bytecode cached, as for an installed package (see the docstring)
ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
CHECKED = ("trl-env --help", "trl-env list", "trl-env <TAB>")


def trl_env_script() -> str:
    script = Path(sys.executable).with_name("trl-env")
    found = str(script) if script.exists() else shutil.which("trl-env")
    if found is None:
        sys.exit("no trl-env console script next to this Python or on PATH")
    return found


# What bash asks the CLI when a user presses TAB after `trl-env ` (click's completion protocol).
COMPLETE = {"_TRL_ENV_COMPLETE": "bash_complete", "COMP_WORDS": "trl-env ", "COMP_CWORD": "1"}

Command = tuple[list[str], dict[str, str]]  # argv, and what it adds to the environment


def commands() -> dict[str, Command]:
    script = trl_env_script()
    return {
        "python -c pass": ([sys.executable, "-c", "pass"], {}),
        "floor": ([sys.executable, "-c", FLOOR], {}),
        "trl-env --help": ([sys.executable, script, "--help"], {}),
        "trl-env list": ([sys.executable, script, "list"], {}),
        "trl-env <TAB>": ([sys.executable, script], COMPLETE),
    }


def run(command: Command) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``command``."""
    argv, env = command
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        env={**ENVIRONMENT, **env},
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


Timings = dict[str, list[tuple[float, float]]]


def measure(repeats: int, seed: int = 0) -> Timings:
    cmds = commands()
    rng = random.Random(seed)
    for command in cmds.values():  # warm the file cache and the .pyc files
        run(command)
    times: Timings = {name: [] for name in cmds}
    for _ in range(repeats):
        order = list(cmds)
        rng.shuffle(order)  # no command always runs first (or right after another)
        for name in order:
            times[name].append(run(cmds[name]))
    return times


def summarize(times: Timings) -> dict[str, dict[str, float]]:
    floor = times["floor"]

    def ratio(ts: list[tuple[float, float]], i: int) -> float:
        # CPU time comes in scheduler ticks: a floor run may read 0, and its pair is left out.
        pairs = [t[i] / f[i] for t, f in zip(ts, floor, strict=True) if f[i] > 0]
        return statistics.median(pairs) if pairs else float("nan")

    return {
        name: {
            "median_ms": 1000 * statistics.median(t[0] for t in ts),
            "ratio_to_floor": ratio(ts, 0),
            "cpu_ratio_to_floor": ratio(ts, 1),
        }
        for name, ts in times.items()
    }


def within_target(row: dict[str, float]) -> bool:
    return row["ratio_to_floor"] <= TARGET and row["cpu_ratio_to_floor"] <= TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30, help="paired repeats (default 30)")
    parser.add_argument("--json", action="store_true", help="print every number as JSON")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a target is missed (default: report it)"
    )
    args = parser.parse_args()
    times = measure(args.repeats)
    summary = summarize(times)
    passed = all(within_target(summary[name]) for name in CHECKED)
    if args.json:
        print(json.dumps({"summary": summary, "times_s": times, "target": TARGET}, indent=2))
        return 0 if passed or not args.strict else 1
    print(f"{platform.python_implementation()} {platform.python_version()}, "
          f"{args.repeats} paired repeats; medians")  # fmt: skip
    print(f"{'command':<16} {'wall ms':>8} {'/ floor':>8} {'cpu':>6}  target (both)")
    for name, row in summary.items():
        target = f"<= {TARGET}" if name in CHECKED else ""
        print(
            f"{name:<16} {row['median_ms']:>8.1f} {row['ratio_to_floor']:>8.2f} "
            f"{row['cpu_ratio_to_floor']:>6.2f}  {target}"
        )
    print("PASS" if passed else "FAIL (target missed)")
    return 0 if passed or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())
