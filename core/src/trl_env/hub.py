"""Whether a hub model id can be had now, said in one sentence within seconds.

Offline, transformers retries a download for about a minute before failing with a long
message; a run that cannot get its model should say so before it starts. A model found in the
local cache is always fine; otherwise the hub must be allowed (``HF_HUB_OFFLINE`` unset) and
answer a TCP connection within :data:`CONNECT_TIMEOUT` seconds.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from .errors import UsageError

CONNECT_TIMEOUT = 3.0
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
# What a command that takes --model accepts instead of a hub id
MODEL_INSTEAD = "pass a local path or `--model tiny`"


def check_reachable(model_id: str, instead: str = MODEL_INSTEAD) -> None:
    """Return if ``model_id`` is cached or the hub answers; else a :class:`UsageError`.
    ``instead`` says what the command accepts in place of a hub id (its own flag's values)."""
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:  # the light core without the hub client: the loader will say it
        return
    try:
        cached = try_to_load_from_cache(model_id, "config.json")
    except Exception:  # not a repo id the hub client accepts: the loader's message is better
        return
    if isinstance(cached, str):
        return
    if constants.HF_HUB_OFFLINE:
        raise UsageError(
            f"Model {model_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is "
            f"set; download it once while online, or {instead}."
        )
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return  # a proxy decides what is reachable; let the download try through it
    endpoint = urlsplit(constants.ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(
            f"Cannot reach {host} to download model {model_id!r} ({reason}) and it is not in "
            f"the local cache; connect, or {instead}."
        ) from None
