"""The two hosts of this machine: envs in the trainer's process, and envs in worker processes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..boundary import EnvHandle, EnvSource, RemoteHandle
from ..config import RolloutConfig
from ..errors import EnvMisbehaved, UsageError
from ..protocols import Env, missing_members


class ThreadHost:
    """Envs made in this process (a factory, a registered name, or one given env per episode);
    the engine runs each call on its call pool with the step timeout."""

    gate: Any = None

    def __init__(self, source: EnvSource, cfg: RolloutConfig, count: int = 0) -> None:
        self.call_timeout = cfg.step_timeout
        self.given: list[Env] | None = None
        self.factory: Callable[[], Env] | None = None
        if isinstance(source, str):
            from ..registry import envs
            from ..spec import EnvSpec

            # the name is resolved now (one sentence for an unknown one); the env is made only
            # in each episode's opening job, behind the boundary's deadline
            envs.factory(source)
            self.factory = EnvSpec(source).factory()
            self.label = f"the env factory {source!r}"
        elif callable(source):
            self.factory = source
            self.label = f"the env factory {source_name(source)}"
        else:
            self.given = list(source)
            if len(self.given) != count:
                raise UsageError(f"Got {len(self.given)} environments for {count} seeds.")
            self.label = "the env list passed in"

    def open(self, index: int) -> EnvHandle:
        env = self.given[index] if self.given is not None else self.factory()  # type: ignore[misc]
        if env is None or missing_members(env):
            raise EnvMisbehaved(
                f"{self.label} returned {type(env).__name__ if env is not None else 'None'}, "
                "not an env with reset() and step()"
            )
        return EnvHandle(env, self.label)

    def close(self) -> None:
        """Nothing to let go: each env is closed at the end of its episode."""


class ProcessHost:
    """Envs made in worker processes of an :class:`~trl_env.hosts.pool.EnvProcessPool`; each
    call carries its own deadline (the worker is killed past it), so the engine sets none."""

    call_timeout: float | None = None

    def __init__(self, source: EnvSource, cfg: RolloutConfig, count: int = 0) -> None:
        from .pool import EnvProcessPool

        if not isinstance(source, str) and not callable(source):
            raise UsageError(
                "env_isolation='process' needs an env factory or a registered env name, "
                "not env instances: the envs must be built inside the worker processes."
            )
        self.step_timeout = cfg.step_timeout
        self.pool = EnvProcessPool.for_config(source, cfg)
        self.gate = self.pool.slots  # an opening starts only once a worker is free for it
        self.label = (
            f"the env factory {source!r}"
            if isinstance(source, str)
            else f"the env factory {source_name(source)}"
        )

    def open(self, index: int) -> EnvHandle:
        # run with a slot of the gate held (see boundary.opener)
        return RemoteHandle(self.pool.open(self.step_timeout, slot_held=True), self.label)

    def close(self) -> None:
        self.pool.close()


def source_name(source: Any) -> str:
    """A factory's dotted name (what a ``functools.partial`` wraps, not ``functools.partial``)."""
    while isinstance(source, functools.partial):
        source = source.func
    name = getattr(source, "__qualname__", None) or type(source).__name__
    module = getattr(source, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)
