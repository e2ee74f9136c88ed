"""The two hosts of this machine, trl-env's built-in kinds: envs in the trainer's process
(``thread``), and envs in worker processes (``process``); and the caller's own env instances."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..boundary import EnvHandle, RemoteHandle
from ..config import RolloutConfig
from ..errors import EnvMisbehaved
from ..protocols import Env, not_an_env
from ..spec import EnvSpec


class ThreadHost:
    """Envs of a spec made in this process; the engine runs each call on its call pool with the
    step timeout."""

    gate: Any = None

    def __init__(self, spec: EnvSpec, cfg: RolloutConfig) -> None:
        self.call_timeout = cfg.step_timeout
        self.label = spec.title
        self.make: Callable[[Mapping[str, Any]], Env]
        if isinstance(spec.env, str):
            from ..registry import envs

            # the name is resolved now (one sentence for an unknown one); each env is made only
            # in its episode's opening job, behind the boundary's deadline
            name, factory = spec.env, envs.factory(spec.env)
            self.make = lambda options: envs.build(name, factory, dict(options))
        else:
            made_by = spec.env
            self.make = lambda options: made_by(**options)

    def open(self, index: int, options: Mapping[str, Any]) -> EnvHandle:
        return _checked(self.make(options), self.label)

    def close(self) -> None:
        """Nothing to let go: each env is closed at the end of its episode."""


class GivenEnvs:
    """One env instance per episode of a batch, made by the caller (``batch_rollout``)."""

    gate: Any = None
    label = "the env list passed in"

    def __init__(self, envs: Sequence[Env], cfg: RolloutConfig) -> None:
        self.call_timeout = cfg.step_timeout
        self.given = list(envs)

    def open(self, index: int, options: Mapping[str, Any]) -> EnvHandle:
        return _checked(self.given[index], self.label)

    def close(self) -> None:
        """Nothing to let go: the caller's envs are closed at the end of their episodes."""


def _checked(env: Any, label: str) -> EnvHandle:
    problem = not_an_env(env, label)
    if problem:
        raise EnvMisbehaved(problem)
    return EnvHandle(env, label)


class ProcessHost:
    """Envs of a spec made in worker processes of an
    :class:`~trl_env.hosts.pool.EnvProcessPool`; each call carries its own deadline (the worker
    is killed past it), so the engine sets none. This process imports nothing of the env."""

    call_timeout: float | None = None

    def __init__(self, spec: EnvSpec, cfg: RolloutConfig) -> None:
        from .pool import EnvProcessPool

        if isinstance(spec.env, str):  # one sentence for an unknown name, from metadata only
            from ..registry import envs

            envs.require(spec.env)
        self.step_timeout = cfg.step_timeout
        self.pool = EnvProcessPool.for_config(spec.env, cfg)
        self.gate = self.pool.slots  # an opening starts only once a worker is free for it
        self.label = spec.title

    def open(self, index: int, options: Mapping[str, Any]) -> EnvHandle:
        # run with a slot of the gate held (see boundary.opener)
        remote = self.pool.open(self.step_timeout, slot_held=True, options=options)
        return RemoteHandle(remote, self.label)

    def close(self) -> None:
        self.pool.close()


__all__ = ["GivenEnvs", "ProcessHost", "ThreadHost"]
