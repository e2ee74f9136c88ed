"""Env servers under load: episodes spread over `trl-env serve` processes, one of them killed.

    .venv/bin/python bench/serve.py [--episodes 2000] [--servers 4] [--sessions 16]
                                    [--workers 32] [--kill-at 0.1] [--json]

Starts ``--servers`` ``trl-env serve --env guess`` processes on 127.0.0.1 and plays
``--episodes`` episodes on them through ``trl_env_openenv.fleet`` (the code behind
``--env-server``), ``--workers`` at once. Actions come from a scripted policy, not a model:
bisection on the guess game's higher/lower answers, so the figures are the env path's alone
(OpenEnv protocol, server, worker process per session). When a ``--kill-at`` share of the
episodes has ended, one server is SIGKILLed and restarted on its port.

Prints: records (one per episode, must equal ``--episodes``: 0 lost), how they ended (done, or
error naming the killed server), episodes/s on the servers against the same seeds played
in-process by the same driver (a ratio from one run), and the spread over the servers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """One `trl-env serve --env guess` process on a free loopback port."""

    def __init__(self, sessions: int, port: int | None = None) -> None:
        self.sessions = sessions
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "trl_env", "serve", "--env", "guess"),
                *("--port", str(self.port), "--max-sessions", str(sessions)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"trl-env serve at {self.url} did not start") from None
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> None:
        self.kill()
        self.__init__(self.sessions, self.port)  # type: ignore[misc]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bisect(env: Any, seed: str) -> dict[str, Any]:
    """Play one guess episode by bisection; the record of how it went."""
    record: dict[str, Any] = {"seed": seed, "status": "done", "error": "", "turns": 0}
    record["started"] = time.monotonic()
    try:
        env.reset(seed)
        low, high = 1, 100
        while env.alive and record["turns"] < 12:
            guess = (low + high) // 2
            reply = env.step(str(guess))
            record["turns"] += 1
            if "higher" in reply:
                low = guess + 1
            elif "lower" in reply:
                high = guess - 1
        record["reward"] = float(env.reward)
    except Exception as exc:
        record.update(status="error", error=f"{type(exc).__name__}: {exc}")
    finally:
        record["server"] = getattr(env, "server", "")
        try:
            env.close()
        except Exception as exc:
            record["close_error"] = str(exc)
    return record


def play(make_env: Any, seeds: list[str], workers: int, on_end: Any = None) -> tuple[list, float]:
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def one(seed: str) -> None:
        record = bisect(make_env(), seed)
        with lock:
            records.append(record)
            ended = len(records)
        if on_end is not None:
            on_end(ended)

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, seeds))
    return records, time.perf_counter() - start


def run(episodes: int, servers: int, sessions: int, workers: int, kill_at: float) -> dict:
    from trl_env import load_env
    from trl_env_openenv.fleet import EnvServers

    seeds = [f"train-{i}" for i in range(episodes)]
    local, local_seconds = play(lambda: load_env("guess"), seeds, workers)

    fleet_procs = [Server(sessions) for _ in range(servers)]
    try:
        for server in fleet_procs:
            server.wait_ready()
        fleet = EnvServers([s.url for s in fleet_procs], slot_timeout=120.0, timeout=60.0)
        doomed = fleet_procs[-1]
        killed = threading.Event()
        restarted: list[float] = []
        waiters: list[threading.Thread] = []

        def on_end(ended: int) -> None:
            if ended >= kill_at * episodes and not killed.is_set():
                killed.set()
                doomed.restart()  # SIGKILL, then a fresh server on the same port
                restarted.append(time.monotonic())
                waiters.append(threading.Thread(target=ready_again, daemon=True))
                waiters[-1].start()

        def ready_again() -> None:
            doomed.wait_ready()
            restarted.append(time.monotonic())

        # Warm-up off the clock: openenv-core's import and each server's first workers.
        play(fleet, [f"warm-{i}" for i in range(servers * 2)], workers)
        for server in fleet.servers:
            server.played = 0
        records, seconds = play(fleet, seeds, workers, on_end)
        ended = time.monotonic()
        doomed.wait_ready()
        for waiter in waiters:  # done before the servers go: it would see its server die
            waiter.join(timeout=30)
    finally:
        for server in fleet_procs:
            server.kill()

    statuses = Counter(r["status"] for r in records)
    errors = [r for r in records if r["status"] == "error"]
    local_rewards = {r["seed"]: r.get("reward") for r in local}
    same = sum(
        1 for r in records if r["status"] == "done" and r.get("reward") == local_rewards[r["seed"]]
    )
    spread = Counter(r["server"] for r in records)
    back = [r for r in records if r["server"] == doomed.url and restarted]
    after_restart = sum(r["started"] > restarted[0] for r in back)
    return {
        "episodes": episodes,
        "servers": servers,
        "sessions_per_server": sessions,
        "workers": workers,
        "policy": "scripted bisection (no model)",
        "records": len(records),
        "lost": episodes - len({r["seed"] for r in records}),
        "statuses": dict(statuses),
        "errors_naming_the_killed_server": sum(doomed.url in r["error"] for r in errors),
        "done_with_the_local_reward": same,
        "sessions_left_open": sum(r.get("close_error") is not None for r in records),
        "episodes_per_s_servers": round(episodes / seconds, 1),
        "episodes_per_s_in_process": round(episodes / local_seconds, 1),
        "servers_vs_in_process": round(local_seconds / seconds, 3),
        "spread": {url: spread.get(url, 0) for url in [s.url for s in fleet_procs]},
        "killed": doomed.url,
        "killed_server_episodes_after_its_restart": after_restart,
        "killed_server_ready_again_after_s": (
            round(restarted[1] - restarted[0], 1) if len(restarted) > 1 else None
        ),
        "run_went_on_after_the_kill_for_s": round(ended - restarted[0], 1) if restarted else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=16, help="--max-sessions of each server")
    parser.add_argument("--workers", type=int, default=32, help="episodes played at once")
    parser.add_argument("--kill-at", type=float, default=0.1, help="share of episodes ended")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.episodes, args.servers, args.sessions, args.workers, args.kill_at)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:32} {value}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
