"""Secrets kept out of what trl-env writes: credentials and tokens inside URLs.

A URL may carry a secret: its user information (``http://user:password@host``) or a token in
its query or fragment (``?token=...``, ``&api_key=...``, ``#access_token=...``). What a run
writes for people to read and keep (``config.yaml`` of ``train`` and ``sft``, ``summary.json``,
eval records, ``trl-env view``'s report, error messages) shows such a URL with the secret
replaced by :data:`MASK`; the URL itself is still used, unchanged, to connect. A config read
back with a masked secret in it (``--resume``, ``--config``) asks for the URL again
(:func:`masked_keys`), since the secret was never saved.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

MASK = "***"
# A URL inside any text: a scheme, "://", then everything up to a space, a quote or a bracket.
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]{0,30}://[^\s'\"<>`\\]+")
# Query keys that hold a secret by their name (token, api_key, X-Amz-Signature, password...).
_SECRET_KEY = re.compile(
    r"(?i)(?:^|[_\-.])(?:token|key|apikey|secret|password|passwd|pwd|pass|auth|authorization|"
    r"sig|signature|credential|credentials|session|sessionid|code)$"
)
_MASKED = re.compile(r"://" + re.escape(MASK) + r"@|=" + re.escape(MASK) + r"(?:[&#\s'\"]|$)")


def redact_url(url: str) -> str:
    """``url`` with its user information and its secret-named query values as :data:`MASK`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        authority = MASK + "@" + authority.rsplit("@", 1)[1]
    path, query_sep, query = tail.partition("?")
    if not query_sep:
        path, fragment_sep, fragment = tail.partition("#")
        return f"{scheme}://{authority}{path}{fragment_sep}{_pairs(fragment)}"
    query, fragment_sep, fragment = query.partition("#")
    return f"{scheme}://{authority}{path}?{_pairs(query)}{fragment_sep}{_pairs(fragment)}"


def _pairs(query: str) -> str:
    if "=" not in query:
        return query
    out = []
    for pair in query.split("&"):
        key, eq, _ = pair.partition("=")
        out.append(f"{key}={MASK}" if eq and _SECRET_KEY.search(unquote(key)) else pair)
    return "&".join(out)


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`)."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def redact(value: Any) -> Any:
    """``value`` (str, or lists, tuples and dicts of them) with every URL in it redacted; other
    values as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item) for item in value)
    return value


def masked_keys(value: Any, where: str = "") -> Iterator[str]:
    """The dotted keys of ``value`` whose text holds a masked secret (a config written by a
    run, read back): ``rollout.env_servers``, ``env_args.url``."""
    if isinstance(value, str):
        if _MASKED.search(value):
            yield where
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from masked_keys(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from masked_keys(item, where)
