"""Mixtures: several environments in one run, each group of episodes from one env and one seed.

A :class:`Mixture` names its envs by label (an env's registered name unless given another, so
one env can appear twice with different options) and gives each a weight. Training data for a
mixture is a list of *rows*, ``"label/seed"``: TRL repeats each row ``num_generations`` times, so
every GRPO group is one env and one seed, and rows are drawn by weight.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .curriculum import Curriculum
from .errors import UsageError
from .spec import SEP, EnvSpec, wrong_env
from .wire import Wire

if TYPE_CHECKING:
    from .config import RolloutConfig
    from .protocols import Processor, Tokenizer

_SPEC = re.compile(r"^(?P<env>[^:/\s]+)(?::(?P<weight>[^:/\s]+))?$")


MixtureEnv = EnvSpec  # the name before EnvSpec, kept for code written against it


class Mixture:
    """Envs by label, with weights; parses and draws the rows of a mixed run."""

    def __init__(self, envs: Sequence[EnvSpec | str]) -> None:
        entries = [EnvSpec(e) if isinstance(e, str) else e for e in envs]
        if not all(isinstance(e, EnvSpec) for e in entries):
            raise UsageError("A mixture's envs are registered names or EnvSpecs.")
        if not entries:
            raise UsageError("A mixture needs at least one env.")
        self.envs: dict[str, EnvSpec] = {}
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

    def __iter__(self) -> Iterator[EnvSpec]:
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

    def split(self, row: str) -> tuple[EnvSpec, str]:
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
        self, total: int, seeds: Callable[[EnvSpec, int], Sequence[str]], seed: int = 0
    ) -> list[str]:
        """``total`` rows in random order, each env's share by weight, its seeds from ``seeds``."""
        rows = [
            self.row(label, s)
            for label, n in self.counts(total).items()
            for s in seeds(self.envs[label], n)
        ]
        random.Random(seed).shuffle(rows)
        return rows


def bind_wire(
    processor: Processor | str,
    tokenizer: Tokenizer,
    eos_ids: Iterable[int] = (),
    options: Mapping[str, Any] | None = None,
) -> Wire:
    """The run's processor bound to ``tokenizer``: a registered name is made with ``options``
    (and the tokenizer); an instance is used as it is."""
    if isinstance(processor, str):
        from .registry import load_processor

        processor = load_processor(processor, tokenizer=tokenizer, **(options or {}))
    return Wire.bind(processor, tokenizer, eos_ids)


def env_wires(
    mixture: Mixture,
    processor: Processor | str,
    tokenizer: Tokenizer,
    eos_ids: Iterable[int] = (),
    options: Mapping[str, Any] | None = None,
) -> dict[str, Wire]:
    """Each env's wire: one shared by the envs without processor options of their own, one for
    each env with them (its options over the run's ``options``)."""
    base = dict(options or {})
    shared = bind_wire(processor, tokenizer, eos_ids, base)
    return {
        e.label: bind_wire(processor, tokenizer, eos_ids, {**base, **e.processor_options})
        if e.processor_options
        else shared
        for e in mixture
    }


def env_seeds(
    entry: EnvSpec, split: str, count: int, config: RolloutConfig | None = None
) -> list[str]:
    """The first ``count`` seeds of ``split`` of ``entry``'s env, asked of one env opened on a
    host of its own (a :class:`~trl_env.player.Player` asks its run's hosts instead)."""
    from .startup import env_seeds as guarded_seeds

    return guarded_seeds(entry, split, count, config, entry.label)


def train_rows(
    mixture: Mixture, total: int, seed: int = 0, config: RolloutConfig | None = None
) -> list[str]:
    """A mixed training set: ``total`` rows of training seeds, each env's share by weight."""
    return mixture.draw(total, lambda entry, n: env_seeds(entry, "train", n, config), seed)


def held_out_rows(mixture: Mixture, per_env: int, config: RolloutConfig | None = None) -> list[str]:
    """The same ``per_env`` evaluation seeds of each env (disjoint from its training seeds)."""
    return [mixture.row(e.label, s) for e in mixture for s in env_seeds(e, "eval", per_env, config)]


def parse_spec(spec: str) -> EnvSpec:
    """``NAME`` or ``NAME:WEIGHT`` as a :class:`EnvSpec`; one sentence when it is neither."""
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
    return EnvSpec(match["env"], weight=weight)


def as_mixture(env: Any) -> Mixture:
    """A public ``env=`` read once: a name, an :class:`EnvSpec`, a mixture, a ``{name: weight}``
    mapping, a list of names and specs, or an env factory (a one-env mixture named by the
    factory's name); anything else is one sentence."""
    if isinstance(env, Mixture):
        return env
    if isinstance(env, str | EnvSpec):
        return Mixture([env])
    if isinstance(env, Mapping):
        if not all(isinstance(k, str) for k in env):
            raise UsageError("A mapping of envs is {name: weight}, e.g. {'guess': 1, 'wordle': 2}.")
        try:
            return Mixture([EnvSpec(name, weight=float(w)) for name, w in env.items()])
        except (TypeError, ValueError):
            raise UsageError(
                f"The weights of {dict(env)!r} must be numbers, e.g. {{'guess': 1, 'wordle': 2}}."
            ) from None
    if isinstance(env, list | tuple) and env and all(isinstance(e, str | EnvSpec) for e in env):
        return Mixture(env)
    if callable(env):
        return Mixture([EnvSpec.of(env)])
    raise wrong_env(env)


def config_mixture(
    envs: Sequence[Mapping[str, Any]], env: str = "", env_args: Mapping[str, Any] | None = None
) -> Mixture:
    """A config's envs: its checked ``envs`` entries, or ``env`` with ``env_args`` alone."""
    if envs:
        return Mixture([EnvSpec.from_dict(e) for e in envs])
    return Mixture([EnvSpec(env, options=dict(env_args or {}))])
