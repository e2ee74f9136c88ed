"""The wire between the trainer and an env's worker process: length-prefixed JSON of plain values.

What a worker sends back is data, never code: JSON of str, numbers, bool, None, lists and dicts,
at most :data:`MAX_REPLY_BYTES` on the wire (the raw frame, refused from its header before it is
read), and decoded only when what it would cost in memory fits :data:`MAX_REPLY_VALUES` (a reply
of millions of ``[]`` is a few bytes each on the wire and about 60 bytes each once decoded).
Nothing a worker sends is unpickled.

A worker is untrusted, and the trainer reads its replies while other threads (the batch's
scheduler, a ticker, a server's ``/health``) wait for the GIL, so every pass over a reply costs
time linear in its size, and a reply over :data:`SMALL_REPLY` bytes is read window by window
(its UTF-8 in pieces, its strings in pieces of :data:`WINDOW` characters, its structure by
``json``'s own Python scanner, which lets other threads in between values), never by one C call
over the whole of it. What stays one call is building a long string from its pieces (a copy).
A typical step's reply is smaller and takes ``json.loads`` straight (about a millisecond).
"""

from __future__ import annotations

import codecs
import json
import json.decoder
import json.scanner
import re
import socket
import struct
import time
import types
from collections.abc import Iterator
from typing import Any

from ..errors import EnvCrashed

# The largest reply the trainer reads from a worker, as sent: decoded, text costs up to four
# times its UTF-8 bytes (one astral character makes a str four bytes a character), so a reply
# at the cap costs at most about 1 GB while it is decoded; env text is then cut to
# max_env_chars. 50 MB of text (the fault catalogue's huge reply) still fits.
MAX_REPLY_BYTES = 64 * 2**20
# The most JSON values (lists, dicts, numbers, strings...) one reply may hold: a seeds list of a
# million episodes fits; decoded, that many costs about 60 MB whatever their text.
MAX_REPLY_VALUES = 1_000_000
# A reply up to this size is decoded by one json.loads (a few milliseconds at most): each value
# takes two bytes at least, so it holds fewer than MAX_REPLY_VALUES and is not counted first.
SMALL_REPLY = 2**20
# The most characters one pass over a larger reply's strings looks at while it holds the GIL: a
# regular expression stepping through 64 Ki escapes takes a few milliseconds.
WINDOW = 64 * 2**10
MAX_ERROR_CHARS = 4000  # an env's exception message, as kept
HEADER = struct.Struct(">Q")

# One string's body, unit by unit, possessive (no backtracking, so no memory per unit): a run
# of plain characters, a surrogate pair's two escapes, a high surrogate's escape seen with what
# follows it (so a window never ends between a pair's halves), another \u escape, another escape.
_BODY = re.compile(
    r'(?:[^"\\]++'
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}(?=[^\\]|\\[^u]|\\u(?![dD][c-fC-F])[0-9a-fA-F]{4})"
    r"|\\u(?![dD][89abAB])[0-9a-fA-F]{4}"
    r"|\\[^u])*+",
    re.DOTALL,
)
_STRUCTURE = (",", ":", "[", "{")  # each value but the first follows one of these
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]  # C, where there is one


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
    when ``values`` is given, at most that many JSON values (counted before they are built)."""
    (size,) = HEADER.unpack(read_exactly(sock, HEADER.size, deadline))
    if size > cap:
        raise BadReply(f"a reply of {size} bytes, over the limit of {cap}")
    return decode(read_exactly(sock, size, deadline), values)


def decode(data: bytes | bytearray, values: int | None = None) -> Any:
    """The JSON value of ``data``, in linear time and passes of at most :data:`WINDOW`
    characters; :class:`BadReply` when it is not JSON or holds more than ``values`` values."""
    try:
        if len(data) <= SMALL_REPLY and (values is None or len(data) <= values):
            return json.loads(data.decode("utf-8", "surrogatepass"))
        text = _utf8(data)
        del data  # the caller's buffer is the only other copy
        count = value_count(text, stop=values)
        if values is not None and count > values:
            raise BadReply(f"a reply of {count} JSON values, over the limit of {values}")
        return _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise BadReply(f"a reply that is not JSON ({type(exc).__name__})") from None


def _utf8(data: bytes | bytearray) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    view = memoryview(data)
    step = 4 * WINDOW  # bytes: UTF-8 decodes far faster than a regular expression steps
    parts = [decoder.decode(view[at : at + step]) for at in range(0, len(view), step)]
    parts.append(decoder.decode(b"", True))
    return "".join(parts)


def value_count(text: str, stop: int | None = None) -> int:
    """At most how many values ``text`` decodes to, without decoding it: one plus its commas,
    colons and openings outside strings (a dict's key and value count as two); counting ends
    once past ``stop``. With ``stop``, the strings are first counted in (an upper bound, in a
    few C passes) and found and left out only when that bound passes ``stop``."""
    if stop is not None:
        rough = 1 + _marks(text, 0, len(text))
        if rough <= stop:
            return rough
    count, at, end = 1, 0, len(text)
    while at < end:
        window = min(end, at + WINDOW)
        quote = text.find('"', at, window)
        upto = window if quote < 0 else quote
        count += _marks(text, at, upto)
        if stop is not None and count > stop:
            break
        if quote < 0:
            at = window
            continue
        closing = _closing_quote(text, quote + 1)
        if closing < 0:
            break  # not JSON from here on: the decoder stops there too
        at = closing + 1
    return count


def _marks(text: str, start: int, end: int) -> int:
    # each value but the first follows one of these; counted a window at a time
    return sum(
        text.count(mark, at, min(end, at + WINDOW))
        for at in range(start, end, WINDOW)
        for mark in _STRUCTURE
    )


def _closing_quote(text: str, start: int) -> int:
    """The index of the quote that closes the string whose body starts at ``start``, or -1
    where it is not JSON."""
    close = text.find('"', start, start + WINDOW)
    if close >= 0 and text.find("\\", start, close) < 0:
        return close
    *_, cut = _cuts(text, start)
    return cut if cut < len(text) and text[cut] == '"' else -1


def _cuts(text: str, start: int) -> Iterator[int]:
    """Where the string whose body starts at ``start`` may be cut into pieces that decode alone
    (never inside an escape, nor between the halves of a surrogate pair), window by window; the
    last is its closing quote, or where it stops being JSON."""
    at, end = start, len(text)
    while True:
        match = _BODY.match(text, at, min(end, at + WINDOW))
        cut = match.end() if match else at  # it matches the empty string too: never None
        yield cut
        if cut == at or (cut < end and text[cut] == '"'):
            return  # closed, or a broken escape or the end of the text
        at = cut


def _parse_string(text: str, start: int, strict: bool = True) -> tuple[str, int]:
    """``json.decoder.scanstring``, in pieces of at most a window each."""
    close = text.find('"', start, start + WINDOW)
    if close >= 0 and text.find("\\", start, close) < 0:
        return _scanstring(text, start, strict)  # a plain string within a window
    parts: list[str] = []
    at = start
    for cut in _cuts(text, start):
        closed = cut < len(text) and text[cut] == '"'
        if closed and not parts:
            return _scanstring(text, start, strict)  # within a window: in place
        if cut == at and not closed:
            break
        parts.append(_scanstring(text[at:cut] + '"', 0, strict)[0])
        if closed:
            return "".join(parts), cut + 1
        at = cut
    raise json.JSONDecodeError("Unterminated string or bad escape", text, start - 1)


def _windowed_decoder() -> json.JSONDecoder:
    # json's own decoder with its own pure-Python scanner, which lets other threads run between
    # values; strings, dict keys included, are read by the C scanner a window at a time. The
    # dict parser is json's own, given this module's string reader in place of the C one.
    decoder = json.JSONDecoder()
    parse_object = json.decoder.JSONObject  # type: ignore[attr-defined]
    namespace = {**parse_object.__globals__, "scanstring": _parse_string}
    decoder.parse_object = types.FunctionType(  # type: ignore[attr-defined]
        parse_object.__code__, namespace, parse_object.__name__, parse_object.__defaults__
    )
    decoder.parse_string = _parse_string  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder


_DECODER = _windowed_decoder()


def read_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytearray:
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
    return buf


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
