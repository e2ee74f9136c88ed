"""Where an env runs: one door from what a run asks for to an env ready for its episode.

An :class:`EnvHost` makes the env of each episode of one env source and says how its calls are
guarded. The kind is one choice, made once by :func:`host_kind` from the rollout options:

- ``thread``: in this process; every call runs on the engine's call pool with the step timeout
  (:mod:`trl_env.hosts.local`);
- ``process``: in worker processes that a deadline can kill (:mod:`trl_env.hosts.pool`);
- a plugin's kind, registered through the ``register_env_hosts`` hook: ``servers``, the env
  servers of ``--env-server`` (trl-env-openenv), chosen whenever ``env_servers`` is set.

:func:`open_host` is the door. A caller that plays many batches keeps the host it got (its
workers or server health last) and passes it again as the env source; one made for a single
batch is closed by that batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ..boundary import EnvHandle, EnvSource
from ..config import Isolation, RolloutConfig
from ..errors import UsageError

SERVERS = "servers"


@runtime_checkable
class EnvHost(Protocol):
    """Makes the env of each episode; what the engine asks of every kind of host."""

    label: str  # names the env source in messages
    # The engine's deadline for each env call; None: the host enforces its own (a worker that
    # misses it is killed).
    call_timeout: float | None
    gate: Any  # a ``callpool.Slots`` that an opening must hold first, or None

    def open(self, index: int) -> EnvHandle:
        """The env of the batch's ``index``-th episode of this source, checked (a job: it may
        run env code)."""
        ...

    def close(self) -> None:
        """Let go of what the host holds (worker processes, connections)."""
        ...


HostFactory = Callable[[EnvSource, RolloutConfig, int], EnvHost]


def host_kind(cfg: RolloutConfig, source: EnvSource | None = None) -> str:
    """Where the envs of ``source`` in a run with these options live: ``servers``, ``process``
    or ``thread`` (``auto``: what the env asks for, else ``thread``)."""
    if cfg.env_servers:
        return SERVERS
    if Isolation(cfg.env_isolation) is Isolation.AUTO:
        from ..registry import declared_isolation

        return declared_isolation(source) or Isolation.THREAD.value
    return Isolation(cfg.env_isolation).value


def open_host(source: EnvSource | EnvHost, cfg: RolloutConfig, count: int = 0) -> EnvHost:
    """The host of ``source`` (a registered name, an env factory, ``count`` env instances, or a
    host kept by the caller, returned as it is) in the kind ``cfg`` asks for."""
    if isinstance(source, EnvHost):
        return source
    kind = host_kind(cfg, source)
    factories = kinds()
    if kind not in factories:
        raise UsageError(
            f"Env host {kind!r} is not registered (env_servers needs the trl-env-openenv "
            "package: pip install trl-env-openenv)."
            if kind == SERVERS
            else f"Env host {kind!r} is not registered."
        )
    return factories[kind](source, cfg, count)


def kinds() -> dict[str, HostFactory]:
    """Every kind of host: the built-in ``thread`` and ``process``, and the plugins' own."""
    from ..plugins import manager
    from .local import ProcessHost, ThreadHost

    found: dict[str, HostFactory] = {"thread": ThreadHost, "process": ProcessHost}
    found.update(manager().env_hosts())
    return found


__all__ = ["SERVERS", "EnvHost", "EnvSource", "HostFactory", "host_kind", "kinds", "open_host"]
