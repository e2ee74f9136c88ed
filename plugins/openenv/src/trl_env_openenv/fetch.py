"""HTTP GETs to a server with a total deadline, a size cap and the ``Authorization`` header its
caller chose for that server (:func:`trl_env_openenv.auth.headers`), if any."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from typing import Any
from urllib.parse import urlsplit


class ServerDeadline(Exception):
    """An HTTP request to a server did not finish within its total deadline."""


def http_get(
    url: str, timeout: float, limit: int = 1 << 20, auth: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    """GET ``url``: its status, content type and body (at most ``limit`` + 1 bytes read: more
    than ``limit`` says it was cut), all within ``timeout`` seconds in total.

    A server that drips its answer a byte at a time cannot hold the caller: at the deadline the
    socket is shut down from this thread (a per-read timeout would wait for each byte anew). A
    redirect is an answer like any other (http.client follows none).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url} is not an http(s) URL")
    make = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = make(parts.hostname or "", parts.port, timeout=timeout)
    result: dict[str, Any] = {}

    def fetch() -> None:
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", path, headers=dict(auth or {}))
            response = conn.getresponse()
            ctype = response.getheader("content-type", "no content type")
            result["value"] = (response.status, ctype, response.read(limit + 1))
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=fetch, name="trl-env-get", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conn.close()
        thread.join(1.0)
        raise ServerDeadline(f"GET {url} did not finish within {timeout:g} s")
    conn.close()
    if "error" in result:
        raise result["error"]
    status, ctype, body = result["value"]
    return status, ctype, body


def get_json(
    url: str, timeout: float, limit: int = 1 << 20, auth: dict[str, str] | None = None
) -> Any:
    """GET ``url`` and parse its JSON body (HTTP 200 only), within ``timeout`` s in total."""
    status, _, body = http_get(url, timeout, limit, auth)
    if len(body) > limit:
        raise ValueError(f"GET {url} answered more than {limit} bytes")
    if status != 200:
        raise ValueError(f"GET {url} answered HTTP {status}")
    return json.loads(body)
