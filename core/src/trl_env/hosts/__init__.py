"""Where an env runs: one door from an env of a run (its :class:`~trl_env.EnvSpec`) to the env
of each episode.

An :class:`EnvHost` owns every opening of its env for a run: the start-up checks (seeds, first
prompt, demonstrations, options) and the episodes of every batch and curriculum stage, each
opening with the options it is given. Its kind is one choice, made once by :func:`host_kind`
from the rollout options, among the kinds registered through the ``register_env_hosts`` hook:

- ``thread`` and ``process``, trl-env's own (:mod:`trl_env.hosts.local`), registered by its
  built-in plugin as a third party's kind is: envs in this process, every call on the engine's
  call pool with the step timeout; or in worker processes a deadline can kill
  (:mod:`trl_env.hosts.pool`);
- a plugin's kind, named by ``env_isolation`` (``--env-isolation KIND``) or chosen by the
  rollout option it registered as its own (trl-env-openenv's ``servers``: ``env_servers``).

``auto``, the default, is no kind: it takes what the env asks for
(:func:`trl_env.registry.declared_isolation`, read without importing the env), else ``thread``.

:func:`open_host` is the door; whoever opens a host closes it (a :class:`~trl_env.player.Player`
keeps one per env for its run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..boundary import EnvHandle
from ..config import Isolation, RolloutConfig
from ..errors import UsageError

if TYPE_CHECKING:
    from ..plugins import Registration
    from ..protocols import Env
    from ..spec import EnvSpec


@runtime_checkable
class EnvHost(Protocol):
    """Makes the env of each episode of one env spec; what the engine asks of every kind."""

    label: str  # names the env in messages
    # The engine's deadline for each env call; None: the host enforces its own (a worker that
    # misses it is killed).
    call_timeout: float | None
    gate: Any  # a ``callpool.Slots`` that an opening must hold first, or None

    def open(self, index: int, options: Mapping[str, Any]) -> EnvHandle:
        """The env of a batch's ``index``-th episode on this host, made with ``options`` (the
        spec's, a curriculum stage's over them), checked; a job: it may run env code."""
        ...

    def close(self) -> None:
        """Let go of what the host holds (worker processes, connections)."""
        ...


HostFactory = Callable[["EnvSpec", RolloutConfig], EnvHost]


def kinds() -> dict[str, Registration]:
    """Every kind of env host registered (``register_env_hosts``): kind -> its registration."""
    from ..plugins import manager

    return manager().env_hosts()


def host_kind(cfg: RolloutConfig, spec: EnvSpec | str | Callable[..., Any] | None = None) -> str:
    """The kind of host the envs of ``spec`` live in, in a run with these options: the kind a
    set option selects (``env_servers``), else ``env_isolation`` (``auto``: what the env asks
    for, else ``thread``); one sentence when they disagree or the kind is not registered."""
    found = kinds()
    asked = str(cfg.env_isolation)
    selected = sorted(
        k for k, r in found.items() if r.selected_by and getattr(cfg, r.selected_by, None)
    )
    if len(selected) > 1:
        options = " and ".join(found[k].selected_by for k in selected)
        raise UsageError(f"{options} each say where envs run ({', '.join(selected)}); give one.")
    if selected:
        (kind,) = selected
        if asked not in (Isolation.AUTO, kind):
            option = found[kind].selected_by
            raise UsageError(
                f"env_isolation is {asked!r} but {option} is set, which plays the envs on the "
                f"{kind!r} host; give one of them (or env_isolation {kind!r})."
            )
        return kind
    if asked == Isolation.AUTO:
        from ..registry import declared_isolation
        from ..spec import EnvSpec

        env = spec.env if isinstance(spec, EnvSpec) else spec  # a registered name or a factory
        return declared_isolation(env) or Isolation.THREAD.value
    if asked not in found:
        raise UsageError(
            f"env_isolation {asked!r} is no registered kind of env host; choose one of "
            f"{', '.join(sorted(found))}, or auto (`trl-env list` says who registers each)."
        )
    return asked


def open_host(spec: EnvSpec, cfg: RolloutConfig) -> EnvHost:
    """The host of ``spec`` in the kind ``cfg`` asks for; the caller closes it."""
    return kinds()[host_kind(cfg, spec)].factory(spec, cfg)


def given_host(envs: Sequence[Env], cfg: RolloutConfig) -> EnvHost:
    """A host of env instances made by the caller, one per episode of one batch: they live in
    this process, so only the ``thread`` kind can play them."""
    from .local import GivenEnvs

    kind = host_kind(cfg)
    if kind != Isolation.THREAD:
        raise UsageError(
            f"Env instances play in this process only (env_isolation 'thread'); the {kind!r} "
            "host needs a registered env name or a factory, to make the envs where they run."
        )
    return GivenEnvs(envs, cfg)


__all__ = ["EnvHost", "HostFactory", "given_host", "host_kind", "kinds", "open_host"]
