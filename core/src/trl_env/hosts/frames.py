"""The wire between the trainer and an env's worker process: length-prefixed JSON of plain values.

What a worker sends back is data, never code: JSON of str, numbers, bool, None, lists and dicts,
at most :data:`MAX_REPLY_BYTES` long, and decoded only when what it would cost in memory fits
:data:`MAX_REPLY_VALUES` (a reply of millions of ``[]`` is a few bytes each on the wire and about
60 bytes each once decoded). Nothing a worker sends is unpickled.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from typing import Any

from ..errors import EnvCrashed

MAX_REPLY_BYTES = 256 * 2**20  # the largest reply the trainer reads from a worker
# The most JSON values (lists, dicts, numbers, strings...) one reply may hold: a seeds list of a
# million episodes fits; decoded, that many costs about 60 MB whatever their text.
MAX_REPLY_VALUES = 1_000_000
MAX_ERROR_CHARS = 4000  # an env's exception message, as kept
HEADER = struct.Struct(">Q")
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class BadReply(Exception):
    """A worker sent something that is not a reply (too big, not JSON, the wrong shape)."""


def send(sock: socket.socket, message: Any) -> None:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    sock.sendall(HEADER.pack(len(data)))
    sock.sendall(data)


def receive(
    sock: socket.socket, deadline: float | None, cap: int, values: int | None = None
) -> Any:
    """One message, read whole before ``deadline`` (``TimeoutError``), at most ``cap`` bytes and,
    when ``values`` is given, at most that many JSON values (checked before it is decoded)."""
    (size,) = HEADER.unpack(read_exactly(sock, HEADER.size, deadline))
    if size > cap:
        raise BadReply(f"a reply of {size} bytes, over the limit of {cap}")
    data = read_exactly(sock, size, deadline)
    if values is not None:
        count = value_count(data)
        if count > values:
            raise BadReply(f"a reply of {count} JSON values, over the limit of {values}")
    try:
        return json.loads(data.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise BadReply(f"a reply that is not JSON ({type(exc).__name__})") from None


def value_count(data: bytes) -> int:
    """At most how many values ``data`` decodes to: one plus its commas, colons and openings
    outside strings (a dict's key and value count as two), without decoding it."""
    if b'"' in data:
        data = _STRINGS.sub(b'""', data)
    return 1 + data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{")


def read_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            n = sock.recv_into(view[got:])
        except BlockingIOError:  # a zero timeout raced a late byte
            continue
        if n == 0:
            raise EOFError
        got += n
    return bytes(buf)


def checked_reply(reply: Any) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raised", (type, message, where))`` from what a worker sent."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "ok":
        return "ok", reply[1]
    if isinstance(reply, list) and len(reply) == 2 and reply[0] == "unsendable":
        return "unsendable", str(reply[1])[:MAX_ERROR_CHARS]
    if (
        isinstance(reply, list)
        and len(reply) == 4
        and reply[0] == "raised"
        and all(isinstance(part, str) for part in reply[1:])
    ):
        type_name, message, where = reply[1][:200], reply[2][:MAX_ERROR_CHARS], reply[3][:500]
        return "raised", (type_name, message, where)
    raise EnvCrashed("the env's worker process sent a reply of the wrong shape")
