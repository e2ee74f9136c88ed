"""Who may use a ``trl-env serve`` server, and what it tells strangers: the contract between the
server and its clients, importable without openenv-core.

- The shared token is ``TRL_ENV_SERVE_TOKEN`` in the environment of the server and of its
  clients (an environment variable, so it is not on a command line that ``ps`` shows). With it
  set, every route but ``/health`` asks for ``Authorization: Bearer <token>`` on HTTP requests
  and on the WebSocket handshake, and answers 401 otherwise.
- ``GET /trl-env`` names the env's options and gives a digest of their values
  (:func:`options_digest`), never the values: an ``--env-arg`` may carry a password. The
  digest is salted per server (``options_salt``, drawn when it starts) and slow (scrypt), so
  it proves nothing about another server and a guess at a short secret costs tens of
  milliseconds, not a microsecond.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

TOKEN_VAR = "TRL_ENV_SERVE_TOKEN"
SCHEME = b"bearer"


def read_token(environ: Mapping[str, str] | None = None, variable: str = TOKEN_VAR) -> str | None:
    """The shared token (or the token in ``variable``) from the environment; None when unset.
    ``ValueError`` (one sentence) when it is set but could not be sent in a header: empty,
    spaces, or not printable ASCII."""
    value = (os.environ if environ is None else environ).get(variable)
    if value is None:
        return None
    value = value.strip()  # as the client reads it (a trailing newline from a file)
    if not value or not all("!" <= c <= "~" for c in value):
        raise ValueError(
            f"{variable} must be printable ASCII with no spaces (for example the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'); it is "
            f"{'empty' if not value else 'not'}."
        )
    return value


def auth_header(token: str) -> dict[str, str]:
    """The header a client sends with every request and WebSocket handshake."""
    return {"Authorization": f"Bearer {token}"}


def authorized(headers: Iterable[tuple[bytes, bytes]], token: str) -> bool:
    """Whether ASGI ``headers`` carry ``Authorization: Bearer <token>``, compared in constant
    time (both sides hashed first, so neither the token's length nor its prefix leaks)."""
    sent = b""
    for name, value in headers:
        if name.lower() == b"authorization":
            sent = value
            break
    scheme, _, credentials = sent.strip().partition(b" ")
    expected = hashlib.sha256(token.encode()).digest()
    match = hmac.compare_digest(hashlib.sha256(credentials.strip()).digest(), expected)
    return match and scheme.lower() == SCHEME


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` is reachable from this machine only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def exposure_warning(host: str, port: int, token: str | None) -> str | None:
    """The warning for a server that anyone on the network may use; None when it is guarded
    or listens on loopback only."""
    if token is not None or is_loopback(host):
        return None
    return (
        f"Warning: serving on {host}:{port} with no {TOKEN_VAR}: anyone who can reach this "
        "port can play the env, read what it serves and hold its sessions. Set "
        f"{TOKEN_VAR} to a long random string here and in the trainer's environment."
    )


SALT_BYTES = 16
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}  # 16 MiB and tens of milliseconds a digest


def new_salt() -> str:
    """A server's own salt for its options digest, drawn when it starts."""
    return secrets.token_hex(SALT_BYTES)


def options_digest(options: Mapping[str, Any], salt: str) -> str:
    """A salted scrypt digest of the options as canonical JSON: a client compares it with the
    digest of its own options under the server's ``salt`` to check that the server serves the
    same env, without the server saying them. ``ValueError`` for a salt that is not hex."""
    canonical = json.dumps(dict(options), sort_keys=True, default=str, separators=(",", ":"))
    return _digest(canonical, salt)


@functools.lru_cache(maxsize=256)
def _digest(canonical: str, salt: str) -> str:
    if not 2 * SALT_BYTES <= len(salt) <= 128:
        raise ValueError(f"an options salt of {len(salt)} characters")
    return hashlib.scrypt(canonical.encode(), salt=bytes.fromhex(salt), **_SCRYPT).hex()
