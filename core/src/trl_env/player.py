"""``Player``: a run's envs on their hosts, played in batches with one backend; it owns each
episode's schedule and knows no trainer.

Eval (:func:`trl_env.evaluation.evaluate`), SFT's demonstrations, training
(:class:`~trl_env.trl_integration.EnvRollout`, TRL's glue) and TRL's async worker play through
it. It reads ``env=`` once (:func:`~trl_env.mixture.as_mixture`) and opens one host per env for
the whole run (:mod:`trl_env.hosts`): the start-up checks (options, seeds, first prompts,
demonstrations) and every batch at every curriculum stage open their envs there, so a run with
N env workers builds its envs in at most N worker processes, and under process isolation this
process imports nothing of an env. It binds the processor to the tokenizer once per env (one
:class:`~trl_env.wire.Wire`), keeps one :class:`~trl_env.rollout.EnvBinding` per env and
stage, and plays rows (``SEED``, or ``LABEL/SEED`` in a mixture) through
:func:`~trl_env.rollout.play`.

The schedule is the player's too: where each env's curriculum stands (:attr:`progress`, moved
by training batches) and each batch's random seed (:meth:`batch_seed`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import startup
from .backends.base import Backend, stream_key
from .config import RolloutConfig
from .curriculum import Progress
from .episode import Episode
from .errors import UsageError
from .hosts import EnvHost, open_host
from .mixture import Mixture, as_mixture, env_wires
from .protocols import Processor, Tokenizer
from .rollout import EnvBinding, env_binding, play
from .spec import EnvSpec
from .wire import Wire

Row = str | tuple[EnvBinding, str]

log = logging.getLogger("trl_env")


class Player:
    """The envs of one run on their hosts, bound to a tokenizer and a backend; :meth:`play_rows`
    plays batches of rows on the run's schedule.

    ``env`` is what :func:`~trl_env.make_rollout_func` takes: a registered name, an
    :class:`~trl_env.EnvSpec`, a :class:`~trl_env.Mixture`, a ``{name: weight}`` mapping, a list
    of names and specs, or an env factory. Close the player (or use it in a ``with``) to let go
    of its hosts.
    """

    def __init__(
        self,
        env: Any,
        processor: Processor | str,
        config: RolloutConfig,
        *,
        processor_options: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.mixture: Mixture = as_mixture(env)
        self.processor, self.processor_options = processor, dict(processor_options or {})
        self.config = config
        self.progress = progress or Progress(self.mixture.curricula)
        if not isinstance(processor, str):
            named = [e.label for e in self.mixture if e.processor_options]
            if named:
                raise UsageError(
                    f"{named[0]} has its own processor options, which need the processor by "
                    "name (processor='qwen3'), not an instance."
                )
        self.labels = self.mixture.labels
        self.backend: Backend | None = None
        self.wires: dict[str, Wire] = {}  # by env label
        self.bindings: dict[tuple[str, int | None], EnvBinding] = {}  # by env label and stage
        self.hosts: dict[str, EnvHost] = {}  # one per env, for the run
        # the schedule: the run's random seed, and the batches played so far
        self.run_seed: int | None = config.seed
        self.train_batches = (0, 0)  # (step, training batches played at it)
        self.eval_batches = 0  # batches of the evaluation under way
        # an async rollout worker plays several groups at once: bindings are made once per stage
        self._lock = threading.Lock()
        try:
            for entry in self.mixture:
                self.hosts[entry.label] = open_host(entry, config)
        except BaseException:
            self.close()
            raise

    # -- start-up: env code before any episode, on the run's own hosts -------------------------
    def seeds(self, entry: EnvSpec, split: str, count: int) -> list[str]:
        """The first ``count`` seeds of ``split`` of ``entry``'s env."""
        host = self.hosts[entry.label]
        options = entry.options_at()
        return startup.env_seeds(host, split, count, self.config, options=options, spec=entry)

    def train_rows(self, total: int, seed: int = 0) -> list[str]:
        """A training set: ``total`` rows of training seeds, each env's share by weight."""
        return self.mixture.draw(total, lambda entry, n: self.seeds(entry, "train", n), seed)

    def held_out_rows(self, per_env: int) -> list[str]:
        """The same ``per_env`` evaluation seeds of each env (disjoint from its training seeds)."""
        mixture = self.mixture
        return [mixture.row(e.label, s) for e in mixture for s in self.seeds(e, "eval", per_env)]

    def check_stages(self) -> None:
        """Make (and close) one env of each curriculum stage: options a stage's factory refuses
        are one sentence now, not an error in every episode of that stage."""
        for entry in self.mixture:
            host = self.hosts[entry.label]
            for stage in entry.curriculum.stages if entry.curriculum else ():
                options = entry.options_at(stage)
                startup.check_options(host, self.config, options=options, spec=entry)

    def first_prompt(
        self, entry: EnvSpec, processor: Processor, stage_options: Mapping[str, Any] | None = None
    ) -> str:
        """The first prompt of ``entry``'s first training seed (at a curriculum stage),
        rendered by ``processor``."""
        host, options = self.hosts[entry.label], entry.options_at(stage_options)
        return startup.first_prompt(host, processor, self.config, options=options, spec=entry)

    def demonstrations(self, entry: EnvSpec, seeds: Sequence[str]) -> list[list[str] | None] | None:
        """``demonstrate(seed)`` of each seed (None for all: the env has no such extra)."""
        host, options = self.hosts[entry.label], entry.options_at()
        return startup.demonstrations(host, seeds, self.config, options=options, spec=entry)

    # -- binding ------------------------------------------------------------------------------
    def bind(
        self,
        tokenizer: Tokenizer,
        eos_ids: Iterable[int],
        backend: Backend,
        config: RolloutConfig | None = None,
    ) -> list[Wire]:
        """Bind the processor to ``tokenizer`` (with the model's own end ids) and play with
        ``backend`` under ``config``; the distinct wires, whose stop ids a trainer registers."""
        self.config = config or self.config
        eos = list(eos_ids)
        with self._lock:
            self.wires = env_wires(
                self.mixture, self.processor, tokenizer, eos, self.processor_options
            )
            self.bindings.clear()
        self.backend = backend
        return list({id(w): w for w in self.wires.values()}.values())

    def row(self, text: str) -> tuple[EnvBinding, str]:
        """The binding and episode seed of a row (``SEED``, or ``LABEL/SEED`` in a mixture), at
        its env's current curriculum stage."""
        entry, seed = self.mixture.split(text)
        return self.binding(entry), seed

    def binding(self, entry: EnvSpec) -> EnvBinding:
        """The binding of ``entry`` at its current curriculum stage."""
        stage = self.progress.stage(entry.label)
        return self.stage(entry, stage, self.progress.options(entry.label))

    def stage(
        self, entry: EnvSpec, stage: int | None, options: Mapping[str, Any] | None = None
    ) -> EnvBinding:
        """The binding of ``entry`` at ``stage`` with that stage's ``options`` (made once)."""
        key = (entry.label, stage)
        with self._lock:
            if key not in self.bindings:
                if entry.label not in self.wires:
                    raise UsageError("The player plays only once bound (Player.bind).")
                host, wire = self.hosts[entry.label], self.wires[entry.label]
                self.bindings[key] = env_binding(entry, host, wire, self.config, stage, options)
            return self.bindings[key]

    # -- playing, on the run's schedule -------------------------------------------------------
    def play_rows(
        self,
        rows: Sequence[Row],
        *,
        training: bool,
        step: int = 0,
        rank: int = 0,
        gather: Callable[[list[Any]], list[Any]] | None = None,
        on_episode: Callable[[Episode], None] | None = None,
    ) -> list[Episode]:
        """Play one batch of rows at a training ``step``, with the batch's own random seed;
        in ``training``, curricula move on the step and on the batch's rewards (gathered
        across processes by ``gather``)."""
        if training:
            for name in self.progress.at_step(step):
                log.info("curriculum: %s is at stage %d from step %d", name, self._at(name), step)
        seed = self.batch_seed(training, step, rank)
        episodes = self.play(rows, batch_seed=seed, on_episode=on_episode)
        if training and self.progress:
            scored = [(e.env, e.stage, e.reward) for e in episodes if not e.masked]
            observed = gather(scored) if gather is not None else scored
            for name in self.progress.observe(observed, step):
                log.info(
                    "curriculum: %s reached its reward threshold: stage %d from step %d",
                    name,
                    self._at(name),
                    step,
                )
        return episodes

    def play(
        self,
        rows: Sequence[Row],
        *,
        batch_seed: int | None = None,
        on_episode: Callable[[Episode], None] | None = None,
    ) -> list[Episode]:
        """One episode per row, all at once: rows as text (see :meth:`row`) or bindings with
        their seeds."""
        if self.backend is None:
            raise UsageError("The player plays only once bound (Player.bind).")
        pairs = [self.row(r) if isinstance(r, str) else r for r in rows]
        return play(pairs, self.backend, on_episode, batch_seed)

    def batch_seed(self, training: bool, step: int = 0, rank: int = 0) -> int | None:
        """This batch's sampling seed: from the run's seed, the mode, the trainer's step, the
        batches already played at that step and the process. No two training batches share a
        stream, and a run resumed from a checkpoint draws what the first run drew from that
        step on. An evaluation's batches are numbered from 0 whatever the step, so every
        evaluation draws the same numbers (common random numbers: a change between two
        evaluations is the model's, not the sampler's)."""
        if self.run_seed is None:
            return None
        with self._lock:
            if not training:
                self.eval_batches += 1
                return stream_key(self.run_seed, "eval", self.eval_batches - 1, rank)
            at, count = self.train_batches
            count = count if at == step else 0
            self.train_batches = (step, count + 1)
        return stream_key(self.run_seed, "train", step, count, rank)

    def evaluation_ended(self) -> None:
        """The next evaluation starts again from its first batch's stream."""
        with self._lock:
            self.eval_batches = 0

    def _at(self, name: str) -> int:
        return self.progress.stage(name) or 0

    # -- the end ------------------------------------------------------------------------------
    def close(self) -> None:
        """Let go of the env hosts (worker processes stop)."""
        with self._lock:
            hosts, self.hosts = list(self.hosts.values()), {}
        for host in hosts:
            host.close()

    def __enter__(self) -> Player:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
