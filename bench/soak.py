"""Soak benchmark: thousands of episodes, a tenth of them hostile, in both env isolation modes.

    .venv/bin/python bench/soak.py [--quick] [--episodes N] [--batch N]
                                   [--modes thread,process,serve] [--serve-episodes N]
                                   [--env-workers N] [--json]

Episodes are played in batches of ``--batch`` with ``batch_rollout`` on the qwen3 tiny model
(2 new tokens a turn, 2 turns, step timeout 0.5 s). Every tenth seed is hostile, cycling through
the catalogue of ``tests/faults/hostile_envs.py``: raising, hanging in Python and in C, spinning
holding the GIL, wrong types, NaN rewards, unencodable and 50 MB replies, printing megabytes,
spawning threads, slow close, a reset that never ends in an env declaring ``reset_timeout = inf``
(capped by the engine), and in process isolation also segfaults, ``os._exit``, SIGKILL, a
worker writing a pickle payload in place of its reply, one reading ``HF_TOKEN`` (set in this
process during the soak) from its own environment, one reading it from the trainer's
``/proc/PID/environ`` (without ``env_user`` it can: docs/reliability.md; the report counts it
apart) and one leaving a ``setsid`` program running.
For each mode it prints episodes completed, episodes lost (a batch that raised loses all of
its episodes; must be 0), calm episodes that did not end normally (must be 0), peak Python
threads, peak worker processes, peak memory (PSS of this process and its workers), and
throughput against the same seeds played with no fault; and, for the process boundary, whether
the pickle payload ran (must not), how many episodes saw the secret and how many programs were
left running (both must be 0 under process isolation).

Mode ``serve`` (bench/soak_serve.py) plays episodes on two ``trl-env serve`` servers guarded by
a token while hostile clients attack them (idle sessions reset again after the reaper, idle
sockets, requests without the token, ``POST /mcp``, HTTP resets), then checks that nothing is
wedged and that SIGTERM, a second SIGTERM and SIGINT stop a server whose step hangs.

Then the per-step overhead of process isolation: the same calm 40-turn episodes played with an
instant generation backend in both modes, so the wall time per step is the engine's and the env
boundary's alone; and the time to start one worker process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "faults"))

import boundary_envs as B  # light, and importable by worker processes
import hostile_envs as H

KINDS, PROCESS_ONLY = B.SOAK_KINDS, B.PROCESS_ONLY
SECRET = "hf_soak_secret_do_not_leak"

STEP_TIMEOUT = 0.5
ISOLATION_MODES = ("thread", "process")
MODES = (*ISOLATION_MODES, "serve")


def soak_seeds(count: int, mode: str, every: int = 10) -> list[str]:
    """``count`` seeds, one in ``every`` hostile, the hostile kinds taken in turn."""
    kinds = [k for k in KINDS if mode == "process" or k not in PROCESS_ONLY]
    seeds = []
    for i in range(count):
        if i % every == every // 2:
            seeds.append(f"{H.BAD}-{kinds[(i // every) % len(kinds)]}-{i}")
        else:
            seeds.append(f"calm-{i}")
    return seeds


@dataclass
class Peaks:
    """Highest Python thread count, worker count and memory (PSS, this process and its workers)."""

    threads: int = 0
    memory: int = 0
    children: int = 0
    samples: int = 0


def pss(pid: int) -> int:
    """Proportional set size in bytes: shared pages counted once across processes.

    Not RSS: a worker between fork and exec shares the whole parent, and summing RSS counted
    those pages once per worker (11 GB for 50 workers of 18 MB each).
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # gone, or no /proc: counted as nothing
        pass
    return 0


@contextmanager
def watch(period: float = 0.02) -> Iterator[Peaks]:
    import psutil

    peaks = Peaks()
    me = psutil.Process()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            children = me.children(recursive=True)
            total = pss(me.pid) + sum(pss(child.pid) for child in children)
            peaks.children = max(peaks.children, len(children))
            peaks.threads = max(peaks.threads, threading.active_count() - 1)  # not the sampler
            peaks.memory = max(peaks.memory, total)
            peaks.samples += 1
            stop.wait(period)

    sampler = threading.Thread(target=sample, name="soak-sampler", daemon=True)
    sampler.start()
    try:
        yield peaks
    finally:
        stop.set()
        sampler.join()


@dataclass
class Soak:
    """The figures of one mode, with or without faults."""

    mode: str
    faults: bool
    episodes: int = 0
    completed: int = 0
    lost: int = 0
    calm_harmed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    peak_threads: int = 0
    peak_workers: int = 0
    peak_memory_mb: float = 0.0
    pwned: bool = False  # the pickle payload ran in this process
    leaked: int = 0  # episodes whose text holds the secret, read from their own environment
    proc_leaked: int = 0  # ... read from another process's /proc/PID/environ
    left_running: int = 0  # programs started by envs, alive after the soak
    errors: list[str] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0


def leftover_programs() -> int:
    """Sleepers an env started (by their argument) still running, anywhere on the machine."""
    import psutil

    count = 0
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[-1:] == [B.SLEEP_TAG] and proc.info["status"] != psutil.STATUS_ZOMBIE:
            count += 1
    return count


@contextmanager
def planted(marker: str) -> Iterator[None]:
    """A secret in this process's environment and in that of another process of this user (as
    in the shell that started a trainer: /proc shows a process's environment as it started),
    and where a pickle payload would write."""
    import subprocess

    saved = {k: os.environ.get(k) for k in ("HF_TOKEN", B.SOAK_MARKER)}
    os.environ.update(HF_TOKEN=SECRET, **{B.SOAK_MARKER: marker})
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(86400)"])
    try:
        yield
    finally:
        holder.kill()
        holder.wait()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def soak(
    stack: Any,
    mode: str,
    episodes: int,
    batch: int,
    faults: bool,
    env_workers: int | None = None,
) -> Soak:
    import tempfile

    from trl_env import batch_rollout

    seeds = soak_seeds(episodes, mode) if faults else [f"calm-{i}" for i in range(episodes)]
    out = Soak(mode, faults, episodes)
    workers = {"env_workers": env_workers} if env_workers else {}
    folder = tempfile.mkdtemp(prefix="trl-env-soak-")
    marker = os.path.join(folder, "pwned")
    before = leftover_programs()
    start = time.perf_counter()
    # In thread isolation env prints land in this process; the report must stay readable.
    with (
        open(os.devnull, "w") as null,
        redirect_stdout(null),
        redirect_stderr(null),
        planted(marker),
        watch() as peaks,
    ):
        for first in range(0, len(seeds), batch):
            chunk = seeds[first : first + batch]
            try:
                records = batch_rollout(
                    chunk,
                    env=B.SoakMixed,
                    processor=stack.processor,
                    tokenizer=stack.tokenizer,
                    model=stack.model,
                    max_new_tokens=2,
                    step_timeout=STEP_TIMEOUT,
                    env_isolation=mode,
                    env_pass_env=(B.SOAK_MARKER,),  # where the pickle payload would write
                    seed=first,
                    **workers,
                )
            except Exception as exc:  # the figure this benchmark exists for: must stay 0
                out.lost += len(chunk)
                out.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            out.lost += len(chunk) - len(records)
            for ep in records:
                out.completed += 1
                seen = SECRET in (ep.text or "")
                if ep.seed.startswith(f"{H.BAD}-{B.PROC_SECRET}-"):
                    out.proc_leaked += seen
                else:
                    out.leaked += seen
                out.statuses[ep.status] = out.statuses.get(ep.status, 0) + 1
                if not ep.seed.startswith(H.BAD) and ep.status not in ("done", "max_turns"):
                    out.calm_harmed += 1
                    out.errors.append(f"calm {ep.seed}: {ep.status} {ep.error}")
    out.seconds = time.perf_counter() - start
    out.pwned = os.path.exists(marker)
    out.left_running = max(0, leftover_programs() - before)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    out.peak_threads, out.peak_workers = peaks.threads, peaks.children
    out.peak_memory_mb = peaks.memory / 2**20
    return out


# -- per-step overhead of process isolation -----------------------------------------------------
class InstantSession:
    """Generation that costs nothing: every turn is one stop token."""

    def generate(self, turns: Any, stop_ids: Any) -> list[Any]:
        from trl_env.backends.base import Sample

        stop = min(stop_ids)
        return [Sample([stop], [0.0], True) for _ in turns]

    def release(self, rows: Any) -> None:
        pass

    def close(self) -> None:
        pass


class InstantBackend:
    def session(self, params: Any) -> InstantSession:
        return InstantSession()


def overhead(stack: Any, episodes: int, turns: int, repeats: int) -> dict[str, float]:
    """Wall seconds per env step in each mode (median of ``repeats``), and one worker's start."""
    import functools
    import statistics

    from trl_env import batch_rollout
    from trl_env.hosts.pool import EnvProcessPool

    per_step: dict[str, float] = {}
    for mode in ISOLATION_MODES:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            records = batch_rollout(
                [f"o-{i}" for i in range(episodes)],
                env=functools.partial(H.Calm, turns=turns),
                processor=stack.processor,
                tokenizer=stack.tokenizer,
                backend=InstantBackend(),
                max_turns=turns,
                max_episode_tokens=100_000,
                step_timeout=30.0,
                env_isolation=mode,
            )
            steps = sum(ep.turns for ep in records)
            assert all(ep.status == "done" for ep in records), [ep.error for ep in records]
            times.append((time.perf_counter() - start) / steps)
        per_step[mode] = statistics.median(times)
    starts, trips = [], []
    for _ in range(repeats):
        with EnvProcessPool(H.Calm) as pool:
            begin = time.perf_counter()
            remote = pool.open(timeout=30.0)
            starts.append(time.perf_counter() - begin)
            remote.call("reset", "warm", timeout=30.0)
            begin = time.perf_counter()
            for _ in range(1000):
                remote.call("alive", timeout=30.0)
            trips.append((time.perf_counter() - begin) / 1000)
            remote.release()
    return {
        "step_ms_thread": 1000 * per_step["thread"],
        "step_ms_process": 1000 * per_step["process"],
        "overhead_ms_per_step": 1000 * (per_step["process"] - per_step["thread"]),
        "worker_start_ms": 1000 * statistics.median(starts),
        "round_trip_us": 1e6 * statistics.median(trips),
        "episodes": episodes,
        "turns": turns,
    }


# -- running and reporting -------------------------------------------------------------------
def load_stack() -> Any:
    from trl_env.models import load_model
    from trl_env.resolve import resolve_stack

    stack = resolve_stack("qwen3", {}, "tiny")

    @dataclass
    class Stack:
        processor: Any
        tokenizer: Any
        model: Any

    return Stack(stack.processor, stack.tokenizer, load_model(stack.model_path))


def run(
    episodes: int,
    batch: int,
    modes: tuple[str, ...],
    overhead_repeats: int,
    env_workers: int | None = None,
    serve_episodes: int = 200,
) -> dict[str, Any]:
    stack = load_stack()
    result: dict[str, Any] = {
        "episodes": episodes,
        "batch": batch,
        "env_workers": env_workers,
        "modes": {},
    }
    if "serve" in modes:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import soak_serve

        result["serve"] = soak_serve.run(serve_episodes)
    for mode in (m for m in modes if m != "serve"):
        hostile = soak(stack, mode, episodes, batch, faults=True, env_workers=env_workers)
        calm = soak(stack, mode, episodes, batch, faults=False, env_workers=env_workers)
        result["modes"][mode] = {
            "with_faults": vars(hostile) | {"throughput": hostile.throughput},
            "without_faults": vars(calm) | {"throughput": calm.throughput},
            "throughput_ratio": hostile.throughput / calm.throughput if calm.throughput else 0.0,
        }
    result["overhead"] = overhead(stack, episodes=16, turns=40, repeats=overhead_repeats)
    return result


def report(r: dict[str, Any]) -> str:
    lines = [
        f"trl-env soak: {r['episodes']} episodes per run in batches of {r['batch']}, one in ten "
        f"hostile; qwen3 tiny on CPU, {os.cpu_count()} cores, step timeout {STEP_TIMEOUT:g}s, "
        f"env_workers {r.get('env_workers') or 'default'}",
        "",
        f"{'mode':<8} {'completed':>9} {'lost':>5} {'calm hurt':>9} {'threads':>7} "
        f"{'workers':>7} {'peak MB':>7} {'ep/s':>7} {'ep/s calm':>9} {'ratio':>6}",
    ]
    for mode, m in r["modes"].items():
        h, c = m["with_faults"], m["without_faults"]
        lines.append(
            f"{mode:<8} {h['completed']:>9} {h['lost']:>5} {h['calm_harmed']:>9} "
            f"{h['peak_threads']:>7} {h['peak_workers']:>7} {h['peak_memory_mb']:>7.0f} "
            f"{h['throughput']:>7.1f} "
            f"{c['throughput']:>9.1f} {m['throughput_ratio']:>6.2f}"
        )
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(h["statuses"].items()))
        lines.append(f"{'':<8} statuses with faults: {statuses}")
        lines.append(
            f"{'':<8} boundary: pickle payload ran {'YES' if h['pwned'] else 'no'}, "
            f"episodes that saw HF_TOKEN {h['leaked']}, programs left running {h['left_running']}"
        )
        if mode == "process":
            lines.append(
                f"{'':<8} HF_TOKEN read from the trainer's /proc/PID/environ: {h['proc_leaked']} "
                "episodes (no env_user: the worker is the trainer's user, docs/reliability.md)"
            )
        for error in h["errors"][:5]:
            lines.append(f"{'':<8} ! {error[:200]}")
    if "serve" in r:
        import soak_serve

        lines += soak_serve.report(r["serve"])
    o = r["overhead"]
    lines += [
        "",
        f"per env step ({o['episodes']} calm episodes x {o['turns']} turns, instant generation):"
        f" thread {o['step_ms_thread']:.3f} ms, process {o['step_ms_process']:.3f} ms,"
        f" overhead {o['overhead_ms_per_step']:.3f} ms (worker starts included);",
        f"one worker starts in {o['worker_start_ms']:.0f} ms; one call to a warm worker takes"
        f" {o['round_trip_us']:.0f} us (a step is two: step, then alive)",
    ]
    return "\n".join(lines)


def healthy(r: dict[str, Any]) -> bool:
    if "serve" in r:
        import soak_serve

        if not soak_serve.healthy(r["serve"]):
            return False
    return all(
        m["with_faults"]["lost"] == 0
        and m["without_faults"]["lost"] == 0
        and m["with_faults"]["calm_harmed"] == 0
        and not m["with_faults"]["pwned"]
        and m["with_faults"]["leaked"] == 0
        and m["with_faults"]["left_running"] == 0
        for m in r["modes"].values()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 episodes per run")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per run (2000)")
    parser.add_argument("--batch", type=int, default=50, help="episodes per batch_rollout (50)")
    parser.add_argument(
        "--modes", default="thread,process,serve", help="isolation modes (and serve) to run"
    )
    parser.add_argument(
        "--serve-episodes", type=int, default=None, help="episodes of mode serve (200; 40 quick)"
    )
    parser.add_argument("--overhead-only", action="store_true", help="skip the soak runs")
    parser.add_argument(
        "--env-workers", type=int, default=None, help="env_workers (default: the engine's, 64)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes takes a comma list of {', '.join(MODES)}")
    episodes = args.episodes or (200 if args.quick else 2000)

    import torch

    torch.set_num_threads(1)
    if args.overhead_only:
        modes = ()
    serve_episodes = args.serve_episodes or (40 if args.quick else 200)
    result = run(
        episodes,
        args.batch,
        modes,
        1 if args.quick else 3,
        env_workers=args.env_workers,
        serve_episodes=serve_episodes,
    )
    result["machine"] = {
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0 if healthy(result) else 1


if __name__ == "__main__":
    sys.exit(main())
