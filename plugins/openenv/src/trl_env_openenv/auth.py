"""What a client says about who it is: the serve token, and credentials kept out of messages.

Every HTTP request and WebSocket handshake this package makes to a server sends
``Authorization: Bearer <token>`` when ``TRL_ENV_SERVE_TOKEN`` is set in the trainer's
environment (the contract of :mod:`trl_env_openenv.access`, which ``trl-env serve`` checks).
Credentials written into a URL (``http://user:secret@host:port``) are taken out of it at once:
the URL without them is what records and messages show, and they travel only as HTTP Basic
auth (when no token is set).
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit

from .access import auth_header, read_token

Credentials = tuple[str, str]


def split_credentials(url: str) -> tuple[str, Credentials | None]:
    """``url`` without its ``user:password@`` part, and that part (None when it has none)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rsplit("@", 1)[1]
    shown = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return shown, (unquote(parts.username or ""), unquote(parts.password or ""))


def headers(credentials: Credentials | None = None) -> dict[str, str]:
    """The ``Authorization`` header of every request: the serve token, else the URL's own
    credentials, else none."""
    token = read_token()  # ValueError (one sentence) for a token no header can carry
    if token is not None:
        return auth_header(token)
    if credentials is not None:
        pair = f"{credentials[0]}:{credentials[1]}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
    return {}
