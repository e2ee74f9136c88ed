"""``Player``: plays rows of a run's envs with one backend, and knows no trainer.

Eval (``trl-env eval``), training (:class:`~trl_env.trl_integration.EnvRollout`, TRL's glue) and
TRL's async worker play through it. It reads ``env=`` once (:func:`~trl_env.mixture.as_mixture`),
binds the processor to the tokenizer once per env (one :class:`~trl_env.wire.Wire`), keeps one
:class:`~trl_env.rollout.EnvBinding` per env and curriculum stage with its env host (worker
processes and env servers last the run: :mod:`trl_env.hosts`), and plays rows (``SEED``, or
``LABEL/SEED`` in a mixture) through :func:`~trl_env.rollout.play`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .backends.base import Backend
from .config import RolloutConfig
from .curriculum import Progress
from .episode import Episode
from .errors import UsageError
from .hosts import EnvHost, host_kind, open_host
from .mixture import Mixture, as_mixture, bind_wire, env_wires
from .protocols import Processor, Tokenizer
from .rollout import EnvBinding, env_binding, play
from .spec import EnvSpec
from .wire import Wire

Row = str | tuple[EnvBinding, str]


class Player:
    """The envs of one run bound to a tokenizer and a backend; :meth:`play` plays rows of them.

    ``env`` is what :func:`~trl_env.make_rollout_func` takes: a registered name, an
    :class:`~trl_env.EnvSpec`, a :class:`~trl_env.Mixture`, a ``{name: weight}`` mapping or a
    list of names and specs; or an env factory or list of env instances, played as they are.
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
        self.mixture: Mixture | None = as_mixture(env)  # None: a factory, played as it is
        self.env = env
        self.processor, self.processor_options = processor, dict(processor_options or {})
        self.config = config
        self.progress = progress or Progress(self.mixture.curricula if self.mixture else {})
        if self.mixture and not isinstance(processor, str):
            named = [e.label for e in self.mixture if e.processor_options]
            if named:
                raise UsageError(
                    f"{named[0]} has its own processor options, which need the processor by "
                    "name (processor='qwen3'), not an instance."
                )
        self.labels = self.mixture.labels if self.mixture else [""]
        self.backend: Backend | None = None
        self.wires: dict[str, Wire] = {}  # by env label
        self.bindings: dict[tuple[str, int | None], EnvBinding] = {}  # by env label and stage
        self.hosts: dict[tuple[str, int | None], EnvHost] = {}  # env hosts kept, same keys
        self.single: EnvBinding | None = None
        # an async rollout worker plays several groups at once: bindings are made once per stage
        self._lock = threading.Lock()

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
        if self.mixture is None:
            wire = bind_wire(self.processor, tokenizer, eos, self.processor_options)
            self.single = EnvBinding(
                self._kept(self.env, ("", None)), wire, self.config, self.labels[0]
            )
            wires = [wire]
        else:
            self.wires = env_wires(
                self.mixture, self.processor, tokenizer, eos, self.processor_options
            )
            wires = list(self.wires.values())
        self.backend = backend
        return list({id(w): w for w in wires}.values())

    def row(self, text: str) -> tuple[EnvBinding, str]:
        """The binding and episode seed of a row (``SEED``, or ``LABEL/SEED`` in a mixture), at
        its env's current curriculum stage."""
        if self.mixture is None:
            if self.single is None:
                raise UsageError("The player plays only once bound (Player.bind).")
            return self.single, text
        entry, seed = self.mixture.split(text)
        return self.binding(entry), seed

    def binding(self, entry: EnvSpec) -> EnvBinding:
        """The binding of ``entry`` at its current curriculum stage; an earlier stage's worker
        processes are let go, as no episode plays it again."""
        stage = self.progress.stage(entry.label)
        binding = self.stage(entry, stage, self.progress.options(entry.label))
        with self._lock:
            for key in [k for k in self.hosts if k[0] == entry.label and k[1] != stage]:
                self.hosts.pop(key).close()
                self.bindings.pop(key, None)
        return binding

    def stage(
        self, entry: EnvSpec, stage: int | None, options: Mapping[str, Any] | None = None
    ) -> EnvBinding:
        """The binding of ``entry`` at ``stage`` with that stage's ``options`` (made once)."""
        key = (entry.label, stage)
        with self._lock:
            if key not in self.bindings:
                if entry.label not in self.wires:
                    raise UsageError("The player plays only once bound (Player.bind).")
                source = self._kept(entry.factory(options), key)
                wire = self.wires[entry.label]
                self.bindings[key] = env_binding(entry, wire, self.config, stage, options, source)
            return self.bindings[key]

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

    def _kept(self, source: Any, key: tuple[str, int | None]) -> Any:
        """A binding's env source: a host kept for the run where it holds something (worker
        processes start once, not every batch; env servers keep their health); in this process
        the source itself, made into a host by each batch."""
        if host_kind(self.config, source) == "thread":
            return source
        host = open_host(source, self.config)
        self.hosts[key] = host
        return host

    def close(self) -> None:
        """Let go of the env hosts kept (worker processes stop)."""
        with self._lock:
            hosts, self.hosts = list(self.hosts.values()), {}
        for host in hosts:
            host.close()
