"""What a client says about who it is to one server, and credentials kept out of messages.

A token goes only where it belongs. The fleet's token, ``TRL_ENV_SERVE_TOKEN`` in the trainer's
environment (the contract of :mod:`trl_env_openenv.access`, which ``trl-env serve`` checks), is
sent as ``Authorization: Bearer <token>`` to the ``--env-server`` URLs of a run and nowhere else
(:func:`fleet_token`, read by :mod:`trl_env_openenv.fleet` alone). An ``openenv`` env, and
``trl-env openenv URL``, talk to servers trl-env does not run: they send a token only when told
which variable holds it (option ``token_env``, flag ``--token-env``), so the fleet's token never
reaches a third party's server. Credentials written into a URL
(``http://user:secret@host:port``) are taken out of it at once: the URL without them is what
records and messages show, and they travel only as HTTP Basic auth (when no token is given).
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit

from .access import TOKEN_VAR, auth_header, read_token

Credentials = tuple[str, str]


def split_credentials(url: str) -> tuple[str, Credentials | None]:
    """``url`` without its ``user:password@`` part, and that part (None when it has none)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rsplit("@", 1)[1]
    shown = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return shown, (unquote(parts.username or ""), unquote(parts.password or ""))


def headers(credentials: Credentials | None = None, token: str | None = None) -> dict[str, str]:
    """The ``Authorization`` header of every request to one server: its bearer ``token``, else
    the URL's own credentials, else none."""
    if token is not None:
        return auth_header(token)
    if credentials is not None:
        pair = f"{credentials[0]}:{credentials[1]}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
    return {}


def fleet_token() -> str | None:
    """The token of the run's env servers (``TRL_ENV_SERVE_TOKEN``), for ``--env-server`` URLs
    only; ``ValueError`` (one sentence) for a token no header can carry."""
    return read_token()


def token_from(variable: str) -> str:
    """The token in the environment variable ``variable``; ``ValueError`` (one sentence) when
    it is unset or could not be sent in a header."""
    token = read_token(variable=variable)
    if token is None:
        where = " (the env servers' token: name it only for a server you run)"
        raise ValueError(
            f"{variable} is not set in this environment{where if variable == TOKEN_VAR else ''}."
        )
    return token
