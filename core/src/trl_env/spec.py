"""One env as a run asks for it: what to make, with which options, and how it counts in a mixture.

:class:`EnvSpec` is the only place that turns a registered name (or a factory) and options into a
factory of fresh envs, in the spirit of Gymnasium's ``EnvSpec`` and ``make``. Every public
``env=`` is read once at the edge by :func:`trl_env.mixture.as_mixture`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .curriculum import Curriculum
from .errors import UsageError
from .protocols import Env

SEP = "/"  # between a mixture row's label and seed: a label never holds it


@dataclass(frozen=True)
class EnvSpec:
    """One env of a run (alone or in a mixture) and everything it keeps for itself."""

    env: str | Callable[..., Env]  # a registered name, or a factory (called with ``options``)
    weight: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)  # env options
    name: str = ""  # the label; default: the registered name
    processor_options: Mapping[str, Any] | None = None  # None: the run's processor as it is
    max_turns: int | None = None  # None: the run's setting, else the env's own
    curriculum: Curriculum | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.env, str) and not callable(self.env):
            raise UsageError(
                f"An env is a registered name or a factory of envs, not {type(self.env).__name__}."
            )
        if not self.name and not isinstance(self.env, str):
            raise UsageError("An env given as a factory needs a name: EnvSpec(factory, name=...).")
        label = self.label
        if not label or SEP in label or any(c.isspace() for c in label):
            raise UsageError(f"Env name {label!r} must be non-empty, without / or spaces.")
        if not (0 < self.weight < math.inf):  # inf would draw nothing else; NaN never compares
            raise UsageError(
                f"The weight of {label} is {self.weight}; it must be a positive finite number."
            )
        if self.max_turns is not None and self.max_turns < 1:
            raise UsageError(f"max_turns of {label} is {self.max_turns}; it must be at least 1.")

    @property
    def label(self) -> str:
        return self.name or (self.env if isinstance(self.env, str) else "")

    @property
    def title(self) -> str:
        """The env as messages name it: ``the env 'guess'``, ``the env factory mod.make``."""
        if isinstance(self.env, str):
            return f"the env {self.env!r}"
        return f"the env factory {source_name(self.env)}"

    def options_at(self, stage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The options its envs are made with: a curriculum stage's over the spec's own."""
        return {**self.options, **(stage_options or {})}

    def factory(self, stage_options: Mapping[str, Any] | None = None) -> Callable[[], Env]:
        """A picklable factory of fresh envs with this env's options (and a stage's over them),
        made where it is called: a name is resolved through the registry there."""
        options = self.options_at(stage_options)
        if isinstance(self.env, str):
            from .registry import load_env

            return functools.partial(load_env, self.env, **options)
        return functools.partial(self.env, **options) if options else self.env

    @classmethod
    def of(cls, env: str | EnvSpec | Callable[..., Env]) -> EnvSpec:
        """A registered name, a spec, or an env factory (named by its own name) as a spec."""
        if isinstance(env, EnvSpec):
            return env
        if isinstance(env, str):
            return cls(env)
        name = source_name(env).rpartition(".")[2]
        return cls(env, name=re.sub(rf"[{SEP}\s]", "_", name) or "env")

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> EnvSpec:
        """One ``envs`` entry of a config file (``processor_args``, a curriculum as a mapping)."""
        curriculum = entry.get("curriculum")
        return cls(
            entry["env"],
            weight=entry.get("weight", 1.0),
            options=dict(entry.get("options") or {}),
            name=entry.get("name") or "",
            processor_options=dict(entry.get("processor_args") or {}) or None,
            max_turns=entry.get("max_turns"),
            curriculum=Curriculum.from_dict(curriculum, entry["env"]) if curriculum else None,
        )


def source_name(source: Any) -> str:
    """A factory's dotted name (what a ``functools.partial`` wraps, not ``functools.partial``)."""
    while isinstance(source, functools.partial):
        source = source.func
    name = getattr(source, "__qualname__", None) or type(source).__name__
    module = getattr(source, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


# Every form a public ``env=`` takes (read by :func:`trl_env.mixture.as_mixture`).
ENV_FORMS = (
    "a registered name, an EnvSpec, a Mixture, a {name: weight} mapping, a list of names or "
    "EnvSpecs, or an env factory"
)


def wrong_env(env: Any, forms: str = ENV_FORMS) -> UsageError:
    """The one sentence for an ``env=`` that is none of ``forms``."""
    return UsageError(f"env= takes {forms}, not {type(env).__name__}.")
