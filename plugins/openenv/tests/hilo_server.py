"""Serve the hi-lo game in its own process: ``python hilo_server.py [SLOTS [EVERY SECONDS]]``.

Binds a free port on 127.0.0.1, prints ``PORT <n>`` and serves until killed; the tests kill it
mid-episode to see what a crashing server does to a running episode. ``SLOTS`` is the session
limit (32); every ``EVERY``-th session's steps take ``SECONDS`` more (none by default).
"""

from __future__ import annotations

import socket
import sys


def main() -> None:
    # The app never mounts openenv's Gradio web UI, but importing openenv.core imports Gradio
    # anyway (openenv guards that import); hiding it halves this process's start-up time.
    sys.modules["gradio"] = None  # type: ignore[assignment]
    import uvicorn
    from hilo_game import make_app  # this script's folder is on sys.path

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    args = sys.argv[1:]
    slots = int(args[0]) if args else 32
    every, seconds = (int(args[1]), float(args[2])) if len(args) >= 3 else (0, 0.0)
    app = make_app(slots, every, seconds)
    config = uvicorn.Config(app, log_level="warning", ws_ping_interval=None)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
