"""``make compat``: the TRL and OpenEnv integration tests against each release the index offers.

Each release is installed alone into ``build/compat/PACKAGE-VERSION`` together with whatever pip,
resolving against ``.venv``, says it needs beyond what ``.venv`` has (``pip install --dry-run
--report``: for TRL 1.14-1.15 nothing, for OpenEnv 0.10 a few pins such as ``fastmcp<4``); that
folder goes ahead of ``.venv``'s packages on ``PYTHONPATH`` for one pytest run. TRL and OpenEnv
are pure Python, so an overlay is a faithful install of that release without a venv per release.
A release ``.venv`` already has needs no overlay.

Prints a Markdown table of what passed (docs/compatibility.md holds the last one) and writes it
to ``build/compat/results.md``.

    python tests/compat.py                       # every TRL release in range, both OpenEnvs
    python tests/compat.py --trl 1.15.0 --openenv   # one TRL release, no OpenEnv runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "compat"

# What depends on TRL: the rollout_func contract with a real GRPOTrainer (sampling, processed
# logprobs, budget), GRPO through the vLLM stand-in server, the async worker read by TRL's own
# queue dataset, batcher and collator (and under 1.18's layout), GRPOConfig's fields read from
# TRL's source, a training step, and credit per turn (advantages per token in TRL's loss, and
# credit="episode" being GRPOTrainer bit for bit).
TRL_TESTS = [
    "tests/test_trl_compat.py",
    "tests/test_exactness.py",
    "tests/test_credit.py",
    "tests/test_async_worker.py",
    "tests/test_vllm_grpo.py",
    "tests/test_train.py::test_grpo_trainer_with_groups_and_buffered_generations",
    "tests/test_train.py::test_grpo_fields_read_from_source_equal_grpoconfig",
    "tests/test_train.py::test_help_shows_every_default",
]
# What `train --async` users have beside TRL: TRL's `vllm` extra without vllm (TRL 1.14-1.15's
# async GRPO imports aiohttp).
TRL_EXTRAS = ["aiohttp>=3.13.3"]
# What depends on OpenEnv: the plugin's own suite (OpenEnv's client playing `trl-env serve`, the
# OpenEnv env's episodes and failures) and a rollout against an OpenEnv server.
OPENENV_TESTS = ["plugins/openenv/tests", "tests/test_openenv_rollout.py"]
OPENENV_RELEASES = ["openenv-core==0.3.0", "openenv==0.10.0"]


@dataclass
class Result:
    package: str
    version: str
    overlay: list[str]  # what went ahead of .venv (empty: .venv's own)
    passed: int
    failed: int
    skipped: int
    seconds: float
    summary: str


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def index_versions(package: str) -> list[str]:
    """The releases of ``package`` the configured index offers, oldest first."""
    done = _pip("index", "versions", package)
    match = re.search(r"Available versions: (.*)", done.stdout)
    if not match:
        raise SystemExit(f"pip index versions {package} found none: {done.stderr.strip()}")
    return list(reversed([v.strip() for v in match[1].split(",")]))


def _trl_compat() -> Any:
    sys.path.insert(0, str(ROOT / "core" / "src"))
    from trl_env import trl_compat

    return trl_compat


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def trl_in_range() -> list[str]:
    """Every final TRL release from the lowest supported to the first unsupported, the excluded
    ones included (so the table shows why they are)."""
    tc = _trl_compat()
    return [
        v
        for v in index_versions("trl")
        if re.fullmatch(r"[\d.]+", v) and tc.LOWEST <= _minor(v) < tc.NEXT_UNSUPPORTED
    ]


def claimed(result: Result) -> bool:
    """Whether trl-env's declared range includes this release (OpenEnv: every one run)."""
    if result.package != "trl":
        return True
    return _trl_compat().trl_problem(result.version) is None


def overlay(*requirements: str) -> tuple[Path | None, list[str]]:
    """The folder to put ahead of .venv for ``requirements`` (None: .venv has them all) and the
    pins installed there."""
    done = _pip("install", "--dry-run", "--quiet", "--report", "-", *requirements)
    if done.returncode != 0:
        raise SystemExit(f"pip cannot resolve {requirements} against .venv: {done.stderr[-800:]}")
    report = json.loads(done.stdout)
    pins = [
        f"{item['metadata']['name']}=={item['metadata']['version']}" for item in report["install"]
    ]
    if not pins:
        return None, []
    folder = OUT / requirements[0].replace("==", "-")
    stamp = folder / ".installed"
    if not stamp.exists() or stamp.read_text() != "\n".join(pins):
        done = _pip("install", "--quiet", "--no-deps", "--upgrade", "--target", str(folder), *pins)
        if done.returncode != 0:
            raise SystemExit(f"installing {pins} failed: {done.stderr[-800:]}")
        stamp.write_text("\n".join(pins))
    return folder, pins


def run(requirements: list[str], tests: list[str], pytest_args: list[str]) -> Result:
    """Run ``tests`` with ``requirements[0]`` (``NAME==VERSION``) and the others ahead of .venv."""
    package, version = requirements[0].split("==")
    folder, pins = overlay(*requirements)
    env = dict(os.environ)
    if folder is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    check = f"import importlib.metadata as m; print(m.version({package!r}))"
    seen = subprocess.run(
        [sys.executable, "-c", check], env=env, capture_output=True, text=True, check=False
    ).stdout.strip()
    if seen != version:
        raise SystemExit(f"the overlay for {requirements[0]} gives {package} {seen!r}")
    start = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    done = subprocess.run(
        [*command, *tests], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.monotonic() - start
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    log = OUT / f"{package}-{version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(done.stdout + done.stderr)

    def count(word: str) -> int:
        found = re.search(rf"(\d+) {word}", tail)
        return int(found[1]) if found else 0

    return Result(
        package,
        version,
        [p for p in pins if not p.lower().startswith(f"{package}==")],
        count("passed"),
        count("failed") + count("error"),
        count("skipped"),
        seconds,
        tail.strip("= "),
    )


def table(results: list[Result]) -> str:
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    rows = [
        "| package | version | in trl-env's range | also ahead of .venv "
        "| passed | failed | skipped | seconds |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        extra = ", ".join(r.overlay[:2]) or "-"
        if len(r.overlay) > 2:
            extra += f" (+{len(r.overlay) - 2} more)"
        rows.append(
            f"| {r.package} | {r.version} | {'yes' if claimed(r) else 'no'} | {extra} "
            f"| {r.passed} | {r.failed} | {r.skipped} "
            f"| {r.seconds:.0f} |"
        )
    return "\n".join(rows) + f"\n\n(load average at the end: {load})\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trl", nargs="*", help="TRL releases (default: every one in range)")
    parser.add_argument("--openenv", nargs="*", help="OpenEnv requirements (default: both)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    trl = trl_in_range() if args.trl is None else args.trl
    openenv = OPENENV_RELEASES if args.openenv is None else args.openenv
    results = []
    for version in trl:
        results.append(run([f"trl=={version}", *TRL_EXTRAS], TRL_TESTS, args.pytest_args))
        print(f"trl {version}: {results[-1].summary}", flush=True)
    for requirement in openenv:
        results.append(run([requirement], OPENENV_TESTS, args.pytest_args))
        print(f"{requirement}: {results[-1].summary}", flush=True)
    text = table(results)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.md").write_text(text)
    print(text)
    if any((r.failed or not r.passed) and claimed(r) for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
