"""What reading one worker reply costs the trainer: time, memory, and the longest GIL pause.

    .venv/bin/python bench/frames.py [--cases NAME,...] [--timeout S] [--json]

Each case is a frame a worker may send (a typical step reply, hostile ones), written by a thread
onto a socket pair and read by ``trl_env.hosts.frames.receive`` with the trainer's own limits,
in a fresh interpreter per case (so peak memory is that case's alone). Reported: the wall time
of ``receive``; how far the process's peak RSS rose above what it held before (the frame
itself, built before, is not counted); the longest pause of a ticker thread that sleeps 1 ms
in a loop meanwhile (how long other threads of the trainer, its scheduler, a server's
``/health``, waited for the GIL); and whether the reply was read or refused. A case that runs
past ``--timeout`` is stopped and reported as such. Run it against another checkout's code with
``PYTHONPATH=OTHER/core/src`` to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

KB, MB = 2**10, 2**20
TEXT = ("You see a small room. " * 100)[:2000]


def frame(name: str) -> bytes:
    """The frame of ``name``, built from bytes (so building it costs little beyond its size)."""
    if name == "step-2KB":  # a typical step reply: its text and the rest of the tuple
        return json.dumps(["ok", [TEXT, 0.0, False, {"turn": 3}]]).encode()
    if name == "step-32KB":  # text at the default max_env_chars
        return json.dumps(["ok", (TEXT * 17)[: 32 * KB]]).encode()
    if name == "seeds-100k":
        return json.dumps(["ok", [f"train-{i}" for i in range(100_000)]]).encode()
    if name.startswith("escaped-open-"):  # a string of escaped quotes that never closes
        size = _size(name)
        return b'["ok", "' + b'\\"' * (size // 2)
    if name.startswith("escaped-"):  # the same, closed: JSON, 16 M escapes at 32 MB
        size = _size(name)
        return b'["ok", "' + b'\\"' * (size // 2) + b'"]'
    if name.startswith("ascii-astral-"):  # one astral character: a str of 4 bytes a character
        size = _size(name)
        return b'["ok", "' + "😀".encode() + b"x" * size + b'"]'
    if name.startswith("lists-"):  # many empty lists: refused by the count of values
        count = _size(name) // 3
        return b'["ok", [' + b"[]," * count + b"[]]]"
    raise SystemExit(f"unknown case {name}")


def _size(name: str) -> int:
    figure = name.rsplit("-", 1)[1]
    return int(figure[:-2]) * (MB if figure.endswith("MB") else KB)


CASES = (
    "step-2KB",
    "step-32KB",
    "seeds-100k",
    "escaped-open-60KB",
    "escaped-open-1MB",
    "escaped-32MB",
    "ascii-astral-32MB",
    "lists-4MB",
)


def child(name: str) -> None:
    import socket
    import threading

    from trl_env.hosts import frames

    data = frame(name)
    ours, theirs = socket.socketpair()
    pauses = [0.0]
    reading = threading.Event()
    done = threading.Event()

    def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            if reading.is_set():
                pauses[0] = max(pauses[0], now - last - 0.001)
            last = now

    def writer() -> None:
        theirs.sendall(frames.HEADER.pack(len(data)))
        theirs.sendall(data)

    tick = threading.Thread(target=ticker, daemon=True)
    tick.start()
    before = _rss_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak (VmHWM) starts again from what the process holds now
    threading.Thread(target=writer, daemon=True).start()
    reading.set()
    start = time.perf_counter()
    try:
        value = frames.receive(ours, None, frames.MAX_REPLY_BYTES, frames.MAX_REPLY_VALUES)
        outcome = "read" if value is not None else "read (null)"
    except frames.BadReply as bad:
        outcome = f"refused: {bad}"
    seconds = time.perf_counter() - start
    reading.clear()
    done.set()
    peak = _rss_kb("VmHWM")
    print(
        json.dumps(
            {
                "case": name,
                "bytes": len(data),
                "seconds": seconds,
                "rss_growth_mb": (peak - before) / 1024,
                "longest_pause_ms": pauses[0] * 1000,
                "outcome": outcome[:80],
            }
        )
    )


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/self/status")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case (120)")
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    rows = []
    for name in args.cases.split(","):
        try:
            run = subprocess.run(
                [sys.executable, __file__, "--child", name],
                capture_output=True,
                text=True,
                timeout=args.timeout,
                env=os.environ,
            )
            row = (
                json.loads(run.stdout)
                if run.returncode == 0
                else {"case": name, "error": run.stderr[-300:]}
            )
        except subprocess.TimeoutExpired:
            row = {"case": name, "outcome": f"still running after {args.timeout:g}s (stopped)"}
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    if not args.json:
        with open("/proc/loadavg") as load:
            print(f"load average: {load.read().split()[0]}")
        print(f"{'case':20} {'bytes':>10} {'seconds':>9} {'RSS +MB':>8} {'pause ms':>9}  outcome")
        for row in rows:
            if "seconds" not in row:
                print(f"{row['case']:20} {row.get('outcome', row.get('error', ''))}")
                continue
            print(
                f"{row['case']:20} {row['bytes']:>10} {row['seconds']:>9.4f} "
                f"{row['rss_growth_mb']:>8.1f} {row['longest_pause_ms']:>9.1f}  {row['outcome']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
