"""Mixtures: several environments in one run, each group of episodes from one env and one seed.

A :class:`Mixture` names its envs by label (an env's registered name unless given another, so
one env can appear twice with different options) and gives each a weight. Training data for a
mixture is a list of *rows*, ``"label/seed"``: TRL repeats each row ``num_generations`` times, so
every GRPO group is one env and one seed, and rows are drawn by weight.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .curriculum import Curriculum
from .errors import UsageError
from .protocols import Env
from .wire import Wire

SEP = "/"
_SPEC = re.compile(r"^(?P<env>[^:/\s]+)(?::(?P<weight>[^:/\s]+))?$")


@dataclass(frozen=True)
class MixtureEnv:
    """One env of a mixture and everything it keeps for itself."""

    env: str | Callable[..., Env]  # a registered name, or a factory (called with ``options``)
    weight: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)  # env options
    name: str = ""  # the label; default: the registered name
    processor_options: Mapping[str, Any] | None = None  # None: the run's processor as it is
    max_turns: int | None = None  # None: the run's setting, else the env's own
    curriculum: Curriculum | None = None

    def __post_init__(self) -> None:
        if not self.name and not isinstance(self.env, str):
            raise UsageError("A mixture env given as a factory needs a name: MixtureEnv(name=...).")
        label = self.label
        if not label or SEP in label or any(c.isspace() for c in label):
            raise UsageError(f"Mixture env name {label!r} must be non-empty, without / or spaces.")
        if not (self.weight > 0):
            raise UsageError(f"The weight of {label} is {self.weight}; it must be positive.")
        if self.max_turns is not None and self.max_turns < 1:
            raise UsageError(f"max_turns of {label} is {self.max_turns}; it must be at least 1.")

    @property
    def label(self) -> str:
        return self.name or (self.env if isinstance(self.env, str) else "")

    def factory(self, stage_options: Mapping[str, Any] | None = None) -> Callable[[], Env]:
        """A picklable factory of fresh envs with this env's options (and its stage's over them)."""
        options = {**self.options, **(stage_options or {})}
        if isinstance(self.env, str):
            from .resolve import env_source

            return env_source(self.env, options)
        return functools.partial(self.env, **options) if options else self.env


class Mixture:
    """Envs by label, with weights; parses and draws the rows of a mixed run."""

    def __init__(self, envs: Sequence[MixtureEnv | str]) -> None:
        entries = [MixtureEnv(e) if isinstance(e, str) else e for e in envs]
        if not entries:
            raise UsageError("A mixture needs at least one env.")
        self.envs: dict[str, MixtureEnv] = {}
        for entry in entries:
            if entry.label in self.envs:
                raise UsageError(
                    f"The mixture has {entry.label!r} twice; give each a different name "
                    "(`name:` in the config file) to train one env with two sets of options."
                )
            self.envs[entry.label] = entry

    @classmethod
    def parse(cls, specs: Sequence[str]) -> Mixture:
        """From command-line specs ``NAME`` or ``NAME:WEIGHT`` (``--env a --env b:2``)."""
        return cls([parse_spec(s) for s in specs])

    def __iter__(self) -> Iterator[MixtureEnv]:
        return iter(self.envs.values())

    def __len__(self) -> int:
        return len(self.envs)

    @property
    def labels(self) -> list[str]:
        return list(self.envs)

    @property
    def curricula(self) -> dict[str, Curriculum]:
        return {e.label: e.curriculum for e in self if e.curriculum is not None}

    def row(self, label: str, seed: str) -> str:
        return f"{label}{SEP}{seed}"

    def split(self, row: str) -> tuple[MixtureEnv, str]:
        """The env and seed of a row ``"label/seed"`` (a one-env mixture also takes a bare seed)."""
        label, sep, seed = row.partition(SEP)
        if sep and label in self.envs:
            return self.envs[label], seed
        if len(self.envs) == 1:
            return next(iter(self.envs.values())), row
        raise UsageError(
            f"The prompt {row!r} names no env of the mixture: mixed runs take prompts "
            f"'LABEL/SEED' with LABEL one of {', '.join(self.envs)}."
        )

    def counts(self, total: int) -> dict[str, int]:
        """``total`` rows shared by weight (largest remainders), each env at least one."""
        if total < len(self.envs):
            raise UsageError(
                f"{total} rows cannot hold one group of each of the {len(self.envs)} envs of the "
                "mixture; raise train_seeds."
            )
        weights = {label: e.weight for label, e in self.envs.items()}
        whole = sum(weights.values())
        exact = {label: total * w / whole for label, w in weights.items()}
        counts = {label: max(1, int(x)) for label, x in exact.items()}
        by_remainder = sorted(exact, key=lambda k: exact[k] - int(exact[k]), reverse=True)
        i = 0
        while sum(counts.values()) < total:
            counts[by_remainder[i % len(by_remainder)]] += 1
            i += 1
        while sum(counts.values()) > total:  # only when the at-least-one rule overshot
            largest = max(counts, key=lambda label: counts[label])
            counts[largest] -= 1
        return counts

    def draw(
        self, total: int, seeds: Callable[[MixtureEnv, int], Sequence[str]], seed: int = 0
    ) -> list[str]:
        """``total`` rows in random order, each env's share by weight, its seeds from ``seeds``."""
        rows = [
            self.row(label, s)
            for label, n in self.counts(total).items()
            for s in seeds(self.envs[label], n)
        ]
        random.Random(seed).shuffle(rows)
        return rows


def env_wires(mixture: Mixture, wire: Callable[[Mapping[str, Any]], Wire]) -> dict[str, Wire]:
    """Each env's wire: ``wire({})`` for the envs without processor options of their own, one
    ``wire(options)`` for each env with them."""
    shared = wire({})
    return {e.label: wire(e.processor_options) if e.processor_options else shared for e in mixture}


def env_seeds(entry: MixtureEnv, split: str, count: int) -> list[str]:
    """The first ``count`` seeds of ``split`` of ``entry``'s env (one env is made to ask it)."""
    from . import extras

    env = entry.factory()()
    try:
        return extras.seeds(env, split, count)
    finally:
        extras.close(env)


def train_rows(mixture: Mixture, total: int, seed: int = 0) -> list[str]:
    """A mixed training set: ``total`` rows of training seeds, each env's share by weight."""
    return mixture.draw(total, lambda entry, n: env_seeds(entry, "train", n), seed)


def held_out_rows(mixture: Mixture, per_env: int) -> list[str]:
    """The same ``per_env`` evaluation seeds of each env (disjoint from its training seeds)."""
    return [mixture.row(e.label, s) for e in mixture for s in env_seeds(e, "eval", per_env)]


def parse_spec(spec: str) -> MixtureEnv:
    """``NAME`` or ``NAME:WEIGHT`` as a :class:`MixtureEnv`; one sentence when it is neither."""
    match = _SPEC.match(spec.strip())
    weight = 1.0
    if match and match["weight"] is not None:
        try:
            weight = float(match["weight"])
        except ValueError:
            match = None
    if not match:
        raise UsageError(
            f"--env {spec!r} is not NAME or NAME:WEIGHT (e.g. --env sokoban --env wordle:2)."
        )
    return MixtureEnv(match["env"], weight=weight)
