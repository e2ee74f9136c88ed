"""The serve kinds of bench/soak.py: episodes on `trl-env serve` while clients attack it.

Two servers (``--env guess``, a shared token, a short ``--idle-timeout``) play episodes through
``trl_env_openenv.fleet`` (the code behind ``--env-server``) with bench/serve.py's scripted
bisection, while hostile clients run beside them, each kind in turn, in a loop:

- ``reaped``: a session reset, left idle past ``--idle-timeout``, then reset again on the same
  WebSocket (OpenEnv's GenericEnvClient with two episodes and a pause; it once leaked a worker);
- ``idle``: a WebSocket that never sends (must be closed by the server);
- ``token``: every route but /health without the token, or with a wrong one (must be 401);
- ``mcp``: ``POST /mcp`` asking for a session (must hold none);
- ``reset``: ``POST /reset`` over HTTP (answered or refused at once, never queued).

Then every server must answer /health 200 with no session open (nothing wedged), and, on a
server of its own each, a step that hangs under a 600 s step timeout must not keep SIGTERM
(``--drain-timeout 2``), a second SIGTERM or SIGINT from stopping it within about a second
of the drain. Figures: episodes lost (must be 0), attacks and how each ended, seconds to stop.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IDLE = 3.0  # --idle-timeout of the soak's servers
DRAIN = 2.0  # --drain-timeout of the drain checks
ROUTES = [("GET", "/trl-env"), ("GET", "/docs"), ("GET", "/schema"), ("GET", "/state")]
ROUTES += [("POST", "/reset"), ("POST", "/step"), ("POST", "/mcp")]


def _helpers() -> Any:
    from trl_env.testing.modules import load_path

    return load_path(ROOT / "plugins" / "openenv" / "tests" / "serving.py", "soak_serving")


def _bench() -> Any:
    from trl_env.testing.modules import load_path

    return load_path(ROOT / "bench" / "serve.py", "soak_serve_bench")


def _http(url: str, method: str = "GET", token: str | None = None, timeout: float = 30.0) -> int:
    request = urllib.request.Request(url, data=b"{}" if method == "POST" else None, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _ws(url: str, token: str) -> Any:
    from websockets.sync.client import connect

    return connect(
        url.replace("http://", "ws://") + "/ws",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=30,
    )


def _attack(kind: str, url: str, token: str, tally: dict[str, dict[str, int]]) -> None:
    """One attack of ``kind`` on the server at ``url``; how it ended, counted in ``tally``."""
    from websockets.exceptions import ConnectionClosed

    def count(outcome: str) -> None:
        tally.setdefault(kind, {}).setdefault(outcome, 0)
        tally[kind][outcome] += 1

    if kind == "token":
        for method, path in ROUTES:
            for wrong in (None, "wrong-" + token[:8]):
                status = _http(url + path, method, wrong)
                count("refused 401" if status == 401 else f"LET IN {status}")
        return
    if kind == "mcp":
        status = _http(url + "/mcp", "POST", token)
        count("refused" if status in (404, 503) else f"ANSWERED {status}")
        return
    if kind == "reset":
        start = time.monotonic()
        try:
            status = _http(url + "/reset", "POST", token, timeout=30)
        except OSError:
            status = 0
        said = {200: "answered", 503: "refused"}.get(status, f"HTTP {status}")
        count(said if time.monotonic() - start < 10 else f"SLOW {said}")
        return
    try:
        connection = _ws(url, token)
    except Exception as exc:  # all sessions taken: the server said so
        count(f"no session ({type(exc).__name__})")
        return
    with connection:
        try:
            if kind == "reaped":
                connection.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
                connection.recv(timeout=30)
            if kind in ("reaped", "idle"):
                connection.recv(timeout=IDLE * 4 + 10)  # the server closes it when idle
                count("LEFT OPEN")
        except ConnectionClosed:
            count("closed by the server")
        except TimeoutError:
            count("LEFT OPEN")
        if kind == "reaped":
            try:  # the second episode on the same socket
                connection.send(json.dumps({"type": "reset", "data": {"seed": 2}}))
                connection.recv(timeout=10)
                count("SECOND RESET ANSWERED on a closed session")
            except (ConnectionClosed, TimeoutError):
                pass


def _stop_time(signals: tuple[int, ...], envs: Path, serving: Any) -> dict[str, Any]:
    """Seconds from the first signal to the exit of a server whose only step hangs."""
    args = ("--env", "crashy", "--step-timeout", "600", "--drain-timeout", str(DRAIN))
    with serving.Served(*args, extra_path=envs) as server:
        token = os.environ["TRL_ENV_SERVE_TOKEN"]
        with _ws(server.url, token) as connection:
            connection.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            connection.recv(timeout=60)
            connection.send(json.dumps({"type": "step", "data": {"message": "hang"}}))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with urllib.request.urlopen(
                    urllib.request.Request(
                        server.url + "/trl-env", headers={"Authorization": f"Bearer {token}"}
                    ),
                    timeout=10,
                ) as response:
                    if json.loads(response.read()).get("calls", {}).get("step"):
                        break
                time.sleep(0.05)
            start = time.monotonic()
            for sig in signals:
                server.proc.send_signal(sig)
                time.sleep(0.1)
            try:
                code = server.proc.wait(120)
            except Exception:
                code = None
            seconds = time.monotonic() - start
    names = "+".join(signal.Signals(s).name for s in signals)
    bound = (DRAIN if signals == (signal.SIGTERM,) else 0.0) + 1.0
    return {"signals": names, "exit": code, "seconds": round(seconds, 2), "bound": bound}


def run(episodes: int = 200, workers: int = 8) -> dict[str, Any]:
    """The serve soak; the figures as a dict (see :func:`healthy`)."""
    from trl_env_openenv.fleet import EnvServers

    serving, bench = _helpers(), _bench()
    saved = os.environ.get("TRL_ENV_SERVE_TOKEN")
    os.environ["TRL_ENV_SERVE_TOKEN"] = token = secrets.token_urlsafe(24)
    import tempfile

    envs = serving.fake_distribution(Path(tempfile.mkdtemp(prefix="trl-env-soak-serve-")))
    tally: dict[str, dict[str, int]] = {}
    args = ("--env", "guess", "--max-sessions", "6", "--idle-timeout", str(IDLE))
    try:
        with serving.fleet(2, *args) as servers:
            urls = [s.url for s in servers]
            stop = threading.Event()

            def attacker(offset: int) -> None:
                kinds = ("reaped", "idle", "token", "mcp", "reset")
                i = offset
                while not stop.is_set():
                    _attack(kinds[i % len(kinds)], urls[i % len(urls)], token, tally)
                    i += 1

            attackers = [threading.Thread(target=attacker, args=(k,)) for k in range(3)]
            for thread in attackers:
                thread.start()
            fleet = EnvServers(urls, slot_timeout=120.0, timeout=60.0)
            seeds = [f"train-{i}" for i in range(episodes)]
            records, seconds = bench.play(fleet, seeds, workers)
            stop.set()
            for thread in attackers:
                thread.join(IDLE * 6 + 60)
            # Nothing wedged: every server free again once the attackers are gone.
            deadline = time.monotonic() + IDLE * 4 + 60
            free = False
            while time.monotonic() < deadline and not free:
                free = all(_http(u + "/health") == 200 for u in urls)
                time.sleep(0.2)
        stops = [
            _stop_time(sigs, envs, serving)
            for sigs in ((signal.SIGTERM,), (signal.SIGTERM, signal.SIGTERM), (signal.SIGINT,))
        ]
    finally:
        if saved is None:
            os.environ.pop("TRL_ENV_SERVE_TOKEN", None)
        else:
            os.environ["TRL_ENV_SERVE_TOKEN"] = saved
    statuses: dict[str, int] = {}
    for record in records:
        statuses[record["status"]] = statuses.get(record["status"], 0) + 1
    return {
        "episodes": episodes,
        "records": len(records),
        "lost": episodes - len({r["seed"] for r in records}),
        "statuses": statuses,
        "errors": [r["error"] for r in records if r["status"] != "done"][:5],
        "episodes_per_s": round(episodes / seconds, 1) if seconds else 0.0,
        "attacks": tally,
        "free_after": free,
        "stops": stops,
    }


def healthy(r: dict[str, Any]) -> bool:
    outcomes = [o for kinds in r["attacks"].values() for o in kinds]
    return (
        r["lost"] == 0
        and r["statuses"].get("done", 0) == r["episodes"]
        and all(o.startswith(GOOD) for o in outcomes)
        and r["free_after"]
        and all(s["exit"] == 0 and s["seconds"] < s["bound"] + SLACK for s in r["stops"])
    )


# How an attack may end; anything else (a route answered without the token, an idle socket left
# open, a second reset answered, a slow or failed HTTP reset) is a break.
GOOD = ("refused", "answered", "closed by the server", "no session")
SLACK = 3.0  # seconds of scheduling on a loaded machine, far below the 600 s step timeout


def report(r: dict[str, Any]) -> list[str]:
    lines = [
        f"serve    {r['records']:>9} {r['lost']:>5}  (episodes on 2 guarded servers under "
        f"attack, {r['episodes_per_s']} ep/s)",
        f"{'':<8} statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items())),
    ]
    for kind, outcomes in sorted(r["attacks"].items()):
        shown = ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items()))
        lines.append(f"{'':<8} {kind}: {shown}")
    lines.append(f"{'':<8} every server free afterwards: {'yes' if r['free_after'] else 'NO'}")
    for s in r["stops"]:
        lines.append(
            f"{'':<8} {s['signals']} with a hung step: exit {s['exit']} after {s['seconds']} s "
            f"(bound {s['bound']:g} s)"
        )
    for error in r["errors"]:
        lines.append(f"{'':<8} ! {error[:200]}")
    return lines
