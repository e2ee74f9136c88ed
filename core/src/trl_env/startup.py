"""Start-up checks: env code run before any episode (an env made with its options, its seeds, its
first prompt, its demonstrations).

They open the env on its host (:mod:`trl_env.hosts`), the one the run's episodes play on when
the caller keeps one (a :class:`~trl_env.player.Player` does), through the same guarded
boundary as episodes (:mod:`trl_env.boundary` jobs on a :class:`~trl_env.callpool.CallPool`):
under process isolation the env is made in a worker process, so an env that segfaults at
``reset`` costs that worker, not the trainer, and the trainer imports nothing of it. Every call
has the step timeout (a declared ``reset_timeout`` for ``reset``), and a failure is one sentence
(:class:`EnvStartError`, exit status 1), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from . import extras
from .boundary import (
    Opened,
    clean_message,
    close_job,
    demonstrate_job,
    describe,
    opener,
    reset_job,
    seeds_job,
)
from .callpool import CallPool, Outcome
from .config import RolloutConfig
from .errors import (
    EnvCrashed,
    EnvMisbehaved,
    EnvRaised,
    EnvTimeout,
    PluginOptionError,
    TrlEnvError,
    UsageError,
)
from .hosts import EnvHost, host_kind, open_host
from .protocols import Processor
from .spec import EnvSpec

SEEDS = "asking the environment for its seeds"
# Rendering a handful of sample conversations; generous, as a machine may be loaded at start.
PROCESSOR_CHECK_SECONDS = 120.0

# What a start-up check opens its env on: a host the caller keeps (then ``options`` are what
# the env is made with), or what makes one for this check alone (a name, a spec, a factory).
Source = EnvHost | EnvSpec | str | Callable[..., Any]


class EnvStartError(TrlEnvError):
    """An env failed a start-up check (it raised, hung, crashed or returned the wrong thing)."""


def check_options(
    source: Source,
    config: RolloutConfig | None = None,
    label: str = "",
    options: Mapping[str, Any] | None = None,
    *,
    spec: EnvSpec | None = None,
) -> None:
    """Make one env with its options and close it: options its factory refuses are the
    factory's own one sentence (exit 2), before any episode."""
    _Check(source, config, label, options, spec).run(lambda opened: None)


def env_seeds(
    source: Source,
    split: str,
    count: int,
    config: RolloutConfig | None = None,
    label: str = "",
    options: Mapping[str, Any] | None = None,
    *,
    spec: EnvSpec | None = None,
) -> list[str]:
    """The first ``count`` seeds of ``split`` of the env."""
    check = _Check(source, config, label, options, spec)
    return check.run(lambda opened: check.call(seeds_job(opened.handle, split, count), SEEDS))


def demonstrations(
    source: Source,
    seeds: Sequence[str],
    config: RolloutConfig | None = None,
    label: str = "",
    options: Mapping[str, Any] | None = None,
    *,
    spec: EnvSpec | None = None,
) -> list[list[str] | None] | None:
    """``demonstrate(seed)`` of each of ``seeds`` from one env (None where it gives none; None
    for all when the env has no such extra): a solver is env code like any other."""
    check = _Check(source, config, label, options, spec)

    def read(opened: Opened) -> list[list[str] | None] | None:
        handle = opened.handle
        if not check.call(lambda: handle.has("demonstrate"), "looking for demonstrate"):
            return None
        # a demonstration may build the episode's start as reset does (a TextWorld game is made
        # on first use): reset's declared deadline
        longer = opened.reset_timeout
        return [
            check.call(demonstrate_job(handle, s), f"demonstrate({s!r})", longer) for s in seeds
        ]

    return check.run(read)


def first_prompt(
    source: Source,
    processor: Processor,
    config: RolloutConfig | None = None,
    label: str = "",
    seed: str | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    spec: EnvSpec | None = None,
) -> str:
    """The text of the first prompt of the env's first training seed (or ``seed``), rendered
    by ``processor``: what must fit the episode budget."""
    check = _Check(source, config, label, options, spec)

    def play(opened: Opened) -> str:
        first = seed
        if first is None:
            first = check.call(seeds_job(opened.handle, "train", 1), SEEDS)[0]
        reset = reset_job(opened.handle, first, check.cfg.max_env_chars)
        text = check.call(reset, "resetting the environment", opened.reset_timeout).text
        system = opened.system_prompt.text

        def render() -> str:
            prompt = extras.first_prompt(processor, system, text)
            if not isinstance(prompt, str):
                raise TypeError(f"it rendered {type(prompt).__name__}, not str")
            return prompt

        return check.call(render, "rendering the first prompt", local=True)

    return check.run(play)


def processor_fits(
    processor: Processor, tokenizer: Any, name: str, timeout: float = PROCESSOR_CHECK_SECONDS
) -> None:
    """:func:`trl_env.checks.ensure_fits` off this thread with a deadline: a processor that
    hangs or raises (``SystemExit`` included) while rendering its check is one sentence."""
    from .callpool import call_all
    from .checks import ensure_fits

    (out,) = call_all([lambda: ensure_fits(processor, tokenizer)], timeout)
    if out.timed_out:
        raise TrlEnvError(
            f"The processor {name!r} took longer than {timeout:g} s to render the sample "
            "conversations of its check against the tokenizer."
        )
    if isinstance(out.error, TrlEnvError):  # the mismatch report, for the user as it is
        raise out.error
    if out.error is not None:
        raise TrlEnvError(
            f"The processor {name!r} failed its check against the tokenizer: {describe(out.error)}."
        )


class _Check:
    """One env opened through the boundary on its host, its calls run with deadlines, then
    closed; a host the check opened for itself is closed too. A kept host's ``spec`` says what
    the env is (its label, options, the isolation it asks for)."""

    def __init__(
        self,
        source: Source,
        cfg: RolloutConfig | None,
        label: str,
        options: Mapping[str, Any] | None,
        spec: EnvSpec | None = None,
    ) -> None:
        self.cfg = cfg or RolloutConfig()
        self.kept = source if isinstance(source, EnvHost) else None
        if self.kept is None:
            spec = EnvSpec.of(source)  # type: ignore[arg-type]
            label = label or (spec.label if isinstance(source, str) else "")
        self.spec = spec
        if options is None:
            options = spec.options_at() if spec is not None else {}
        self.options = dict(options)
        self.label = label or (spec.label if spec is not None and self.kept else "")
        self.pool = CallPool(workers=2, max_hung=8)
        self.env_timeout: float | None = self.cfg.step_timeout

    def run(self, body: Callable[[Opened], Any]) -> Any:
        host = self.kept or open_host(self.spec, self.cfg)  # type: ignore[arg-type]
        # under process isolation the worker enforces the step timeout itself (None here)
        self.env_timeout = host.call_timeout
        opened: Opened | None = None
        try:
            opened = self.call(opener(host, self.cfg, 0, self.options), "creating the environment")
            return body(opened)
        finally:
            if opened is not None:  # closed with the step timeout; its failure is not fatal
                self.pool.submit(close_job(opened.handle), self.env_timeout)
            self.pool.shutdown(wait=self.cfg.step_timeout)
            if host is not self.kept:
                host.close()

    def call(
        self, job: Callable[[], Any], what: str, longer: float | None = None, local: bool = False
    ) -> Any:
        """Run ``job`` with its deadline: the step timeout, or ``longer`` for a reset that
        declared one; under process isolation the worker enforces env deadlines itself."""
        timeout = self.cfg.step_timeout if local else self.env_timeout
        if timeout is not None and longer is not None:
            timeout = max(timeout, longer)
        self.pool.submit(job, timeout, tag=what)
        outcome = None
        while outcome is None:
            for call in self.pool.wait(None):
                if call.tag == what:
                    outcome = call.outcome or Outcome(timed_out=True)
        return self._value(outcome, what, local)

    def _value(self, out: Outcome, what: str, local: bool) -> Any:
        if out.timed_out or isinstance(out.error, EnvTimeout):
            self._fail(f"{what} took longer than the step timeout ({self.cfg.step_timeout:g}s)")
        error = out.error
        if error is None:
            return out.value
        if local:
            self._fail(f"the processor failed {what}: {describe(error)}")
        # Options the env's own factory refused are the user's to fix (exit 2), in the factory's
        # own sentence, whichever side of a process boundary it was raised on.
        if isinstance(error, PluginOptionError | UsageError):
            raise error
        if isinstance(error, EnvRaised) and error.type_name == PluginOptionError.__name__:
            raise PluginOptionError(error.message)
        if isinstance(error, EnvMisbehaved):
            self._fail(_message(error))
        if isinstance(error, EnvRaised):
            self._fail(f"{what} raised {_message(error)}")
        if isinstance(error, EnvCrashed):
            self._fail(f"{what} failed: {_message(error)}")
        self._fail(f"{what} raised {describe(error)}")

    def _fail(self, problem: str) -> NoReturn:
        who = f"The env {self.label!r}" if self.label else "The env"
        kind = host_kind(self.cfg, self.spec)  # where it ran: thread, process, a plugin's kind
        raise EnvStartError(
            clean_message(f"{who} failed its start-up check ({kind} isolation): {problem}.")
        )


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return describe(exc)
