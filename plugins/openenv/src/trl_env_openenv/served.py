"""The OpenEnv client set up for a ``trl-env serve`` server (used by ``--env-server``).

A trl-env server takes the seed as the string it is, sends the env's text in the observation's
``text`` field and the env's current reward with every step (the last one is the episode's),
so greedy episodes played there equal those played locally.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .env import OpenEnvEnv


def served_client(
    url: str,
    *,
    timeout: float,
    connect_timeout: float,
    credentials: Any = None,
    token: str | None = None,
) -> OpenEnvEnv:
    """A client for one episode on the ``trl-env serve`` server at ``url``, which gets the
    fleet's ``token`` (:func:`trl_env_openenv.auth.fleet_token`).

    No retries and no slot wait of its own: the caller (:mod:`trl_env_openenv.fleet`) picks another
    server when this one is busy or down.
    """
    env = OpenEnvEnv(
        url=url,
        seed_mode="str",
        observation_field="text",
        reward_mode="last",
        timeout=timeout,
        connect_timeout=connect_timeout,
        retries=0,
        slot_timeout=0,
        max_reply_mb=16,  # the server cuts text at 500,000 characters; JSON may escape them
        system_prompt="(the served env's)",
    )
    # credentials are kept out of the URL that messages show (see .auth)
    credentials = tuple(credentials) if credentials is not None else None
    env.options = replace(env.options, credentials=credentials, token=token)
    return env
