"""``batch_rollout``: many multi-turn episodes at once, token-exact, with no turn barrier.

The life of one episode is :func:`_life`, a generator read top to bottom: open the env, reset,
then turns of generate, parse, step until the episode ends, then the reward. It yields requests
(:class:`EnvCall`, :class:`Generate`) to :class:`_Scheduler`, which runs env calls on a bounded
pool with deadlines (:mod:`trl_env.callpool`, :mod:`trl_env.boundary`) and batches the
generation requests of whichever episodes are ready: an episode whose env replied goes back to
generation without waiting for the slow envs of the others.

The model's sampled ids are kept as sampled (never re-tokenized); every inserted piece of text
(first prompt, env replies, turn closers) is tokenized alone and masked. Correctness therefore
does not depend on the tokenizer being additive; the drift counters on each episode show how far
a re-tokenizing pipeline would be off.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any

from .backends.base import Backend, Sample, Session, Turn, check_sample, stream_key
from .boundary import (
    EnvHandle,
    EnvSource,
    Opened,
    Text,
    clean_message,
    close_job,
    describe,
    opener,
    plain_str,
    reset_job,
    reward_job,
    step_job,
    turn_reward_job,
)
from .callpool import CallPool, Outcome
from .config import Credit, RolloutConfig
from .episode import CONTEXT_IDS, Episode, Status, decode_after, drift_counters_many
from .errors import EnvCrashed, EnvMisbehaved, EnvRaised, EnvTimeout, UsageError
from .hosts import EnvHost, given_host, open_host
from .protocols import Processor, Tokenizer
from .spec import EnvSpec, wrong_env
from .wire import Wire, model_eos_ids

__all__ = [
    "EnvBinding",
    "EnvSource",
    "Episode",
    "RolloutConfig",
    "Status",
    "batch_rollout",
    "env_binding",
    "episode_fields",
    "play",
]

log = logging.getLogger("trl_env")


def batch_rollout(
    seeds: Sequence[str],
    *,
    env: EnvSource | EnvSpec,
    processor: Processor,
    tokenizer: Tokenizer,
    model: Any = None,
    backend: Backend | str | None = None,
    wire: Wire | None = None,
    config: RolloutConfig | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    **overrides: Any,
) -> list[Episode]:
    """Play one episode per seed, all at once, and return them in the order of ``seeds``.

    ``env`` is a factory called once per episode, a registered env name, an
    :class:`~trl_env.EnvSpec`, or one env per seed.
    Generation goes through ``backend`` (a :class:`Backend` or a registered backend name), or a
    transformers backend over ``model``. ``on_episode`` is called with each episode as soon as it
    ends (its env's ``close`` already requested). Every episode ends with a record, whatever
    its env, the processor or the backend do.
    """
    cfg = replace(config or RolloutConfig(), **overrides).validate()
    if backend is None and model is None:
        raise UsageError("batch_rollout needs a model or a backend.")
    if backend is None or isinstance(backend, str):
        from .backends import DEFAULT_BACKEND, build_backend

        name = backend if isinstance(backend, str) else DEFAULT_BACKEND
        backend = build_backend(name, tokenizer=tokenizer, model=model)
    wire = wire or Wire.bind(processor, tokenizer, model_eos_ids(model))
    if isinstance(env, str | EnvSpec) or callable(env):
        spec = EnvSpec.of(env)
        host, options = open_host(spec, cfg), spec.options_at()
    elif isinstance(env, list | tuple):
        if len(env) != len(seeds):
            raise UsageError(f"Got {len(env)} environments for {len(seeds)} seeds.")
        host, options = given_host(env, cfg), {}
    else:
        raise wrong_env(env, "a registered name, an EnvSpec, an env factory or one env per seed")
    label = env if isinstance(env, str) else env.label if isinstance(env, EnvSpec) else ""
    binding = EnvBinding(host, wire, cfg, label, options=options)
    try:
        return play([(binding, str(seed)) for seed in seeds], backend, on_episode)
    finally:
        host.close()


@dataclass(frozen=True, eq=False)
class EnvBinding:
    """What the episodes of one env in a batch share: the host their envs are made on, the wire
    they are rendered with and their options. A mixed batch has one binding per env and
    curriculum stage; the host lasts longer (whoever opened it closes it)."""

    host: EnvHost
    wire: Wire
    config: RolloutConfig
    label: str = ""
    stage: int | None = None
    stage_options: Mapping[str, Any] = field(default_factory=dict)  # what each record says
    options: Mapping[str, Any] = field(default_factory=dict)  # each env's: the spec's and stage's


def env_binding(
    entry: EnvSpec,
    host: EnvHost,
    wire: Wire,
    config: RolloutConfig,
    stage: int | None = None,
    stage_options: Mapping[str, Any] | None = None,
) -> EnvBinding:
    """The binding of a mixture's env on its ``host`` at a curriculum stage: the stage's options
    over the env's, its own ``max_turns``."""
    stage_options = dict(stage_options or {})
    if entry.max_turns is not None:
        config = replace(config, max_turns=entry.max_turns)
    options = entry.options_at(stage_options)
    return EnvBinding(host, wire, config, entry.label, stage, stage_options, options)


def play(
    rows: Sequence[tuple[EnvBinding, str]],
    backend: Backend,
    on_episode: Callable[[Episode], None] | None = None,
    batch_seed: int | None = None,
) -> list[Episode]:
    """Play one episode per ``(binding, seed)`` row, all at once, in one generation session.

    The engine under :func:`batch_rollout` and the :class:`~trl_env.player.Player`: episodes
    of different envs share the model's batches while each keeps its env, wire and options.
    ``batch_seed`` replaces the bindings' random-number seed for this batch.
    """
    if not rows:
        return []
    bindings = list({id(p): p for p, _ in rows}.values())
    sampling = {p.config.sampling() for p in bindings}
    if len(sampling) > 1:
        raise UsageError("The envs of one batch must sample with the same options.")
    params = next(iter(sampling))
    if batch_seed is not None:
        params = replace(params, seed=batch_seed)
    episodes = [
        Episode(
            seed=episode_seed,
            env=binding.label,
            stage=binding.stage,
            stage_options=dict(binding.stage_options),
        )
        for binding, episode_seed in rows
    ]
    workers = max(p.config.env_workers for p in bindings)
    pool = CallPool(workers, max(p.config.max_hung_workers for p in bindings))
    session = backend.session(params)
    interrupted = True
    try:
        if params.seed is not None:
            _name_streams(session, rows, params.seed)
        transcripts = [_Transcript(ep, b) for ep, (b, _) in zip(episodes, rows, strict=True)]
        _Scheduler(transcripts, pool, session, on_episode).run()
        interrupted = False
    finally:
        session.close()
        # Calls still running (closes) get their step timeout; after an interruption (Ctrl-C, too
        # many hung envs) at most a second, so that leaving stays prompt.
        timeout = bindings[0].config.step_timeout
        if interrupted:
            timeout = min(timeout or 1.0, 1.0)
        pool.shutdown(wait=timeout)
    return episodes


def _name_streams(
    session: Session, rows: Sequence[tuple[EnvBinding, str]], batch_seed: int
) -> None:
    """Give each row its own random stream, keyed by what the row is (the batch seed, its env and
    stage, its episode seed and its place among the rows of that same seed: a GRPO group's
    members differ), not by when it happens to generate."""
    streams = getattr(session, "streams", None)
    if streams is None:
        return
    seen: Counter[tuple[str, int | None, str]] = Counter()
    keys = {}
    for row, (binding, episode_seed) in enumerate(rows):
        what = (binding.label, binding.stage, episode_seed)
        keys[row] = stream_key(batch_seed, *what, seen[what])
        seen[what] += 1
    streams(keys)


# -- what an episode asks of the scheduler ------------------------------------------------------
@dataclass
class EnvCall:
    """Run ``job`` (a call into env code) on the pool; the episode gets its :class:`Outcome`."""

    job: Callable[[], Any]
    timeout: float | None = None  # longer than the step timeout (reset waiting for a slot)


@dataclass
class LocalCall:
    """Run ``job`` (processor code) on the pool with its own deadline: code of this process that
    nobody vetted, kept off the scheduler's thread, whose time is not env time."""

    job: Callable[[], Any]
    timeout: float | None


@dataclass
class Generate:
    """Sample the next turn after ``new_ids`` (what was inserted since the model's last turn)."""

    new_ids: list[int]
    limit: int


@dataclass
class Detach:
    """Run ``job`` on the pool without waiting for it (closing an env)."""

    job: Callable[[], Any]


Request = EnvCall | LocalCall | Generate | Detach


class _Over(Exception):
    """Ends an episode's play with a status and a message."""

    def __init__(self, status: Status, message: str = "", fault: str = "") -> None:
        message = clean_message(message)  # it may quote env or processor text
        super().__init__(message)
        self.status, self.message, self.fault = status, message, fault


@dataclass
class _Transcript:
    """The growing token record of one episode."""

    episode: Episode
    binding: EnvBinding
    pieces: list[tuple[list[int], str]] = field(default_factory=list)  # (ids, who)
    pending: list[int] = field(default_factory=list)  # inserted since the model's last turn
    reward_read: float = 0.0  # the env's reward as last read after a step (credit per turn)

    @property
    def used(self) -> int:
        return len(self.episode.prompt_ids) + len(self.episode.completion_ids)

    def insert(self, ids: Sequence[int], who: str) -> None:
        """Text the model did not write: masked, logprob 0 (the first prompt goes to the prompt)."""
        ids = list(ids)
        self.pieces.append((ids, who))
        self.pending.extend(ids)
        if who != "prompt":
            self.episode.completion_ids.extend(ids)
            self.episode.env_mask.extend([0] * len(ids))
            self.episode.logprobs.extend([0.0] * len(ids))

    def sampled(self, sample: Sample) -> None:
        ep = self.episode
        self.pieces.append((list(sample.ids), "model"))
        ep.turn_starts.append(len(ep.completion_ids))
        ep.completion_ids.extend(sample.ids)
        ep.env_mask.extend([1] * len(sample.ids))
        ep.logprobs.extend(sample.logprobs)
        ep.turns += 1

    def scored(self, own: bool, value: float) -> None:
        """What the last turn earned: the env's own figure (``own``), else the change of its
        reward since the last reading (0 before the first step)."""
        earned = value if own else value - self.reward_read
        if not own:
            self.reward_read = value
        self.episode.turn_rewards.append(earned)

    def take_pending(self) -> list[int]:
        out, self.pending = self.pending, []
        return out

    def env_text(self, text: Text) -> str:
        self.episode.sanitized_chars += text.sanitized
        self.episode.capped_chars += text.capped
        return text.text


# -- the life of one episode, top to bottom -----------------------------------------------------
def _life(
    transcript: _Transcript,
    open_env: Callable[[], Opened],
    claim: Callable[[EnvHandle], None],
    wire: Wire,
    cfg: RolloutConfig,
) -> Generator[Request, Any, None]:
    ep = transcript.episode
    handle: EnvHandle | None = None
    try:
        opened: Opened = yield from _env(open_env, "creating the environment", cfg)
        handle = opened.handle
        claim(handle)
        reset = reset_job(handle, ep.seed, cfg.max_env_chars)
        first_text = yield from _env(reset, "resetting the environment", cfg, opened.reset_timeout)
        ep.env_seconds -= first_text.waited  # waiting for a server slot is not env time
        ep.server = first_text.server
        first = transcript.env_text(first_text)
        system = transcript.env_text(opened.system_prompt)
        ep.messages = [{"role": "system", "content": system}, {"role": "user", "content": first}]
        render = _render(partial(wire.first_prompt_text, system, first), "first prompt")
        text = yield from _processor(render, "rendering the first prompt", cfg)
        prompt = wire.encode_env(text, [system, first], cfg.env_special_tokens)
        ep.special_token_strings += wire.count_special(system) + wire.count_special(first)
        if wire.room(len(prompt), cfg.max_episode_tokens) < 1:
            ep.prompt_ids = wire.truncate_prompt(prompt, cfg.max_episode_tokens)
            transcript.insert(ep.prompt_ids, "prompt")
            raise _Over(
                Status.BUDGET,
                f"the first prompt has {len(prompt)} tokens, leaving no room in the episode "
                f"budget of {cfg.max_episode_tokens} tokens (it is cut to {len(ep.prompt_ids)})",
            )
        ep.prompt_ids = prompt
        transcript.insert(prompt, "prompt")
        while True:
            room = wire.room(transcript.used, cfg.max_episode_tokens)
            sample: Sample = yield Generate(
                transcript.take_pending(), min(cfg.max_new_tokens, room)
            )
            if sample.error:
                raise _Over(Status.ERROR, f"generation failed: {sample.error}")
            before = (ep.prompt_ids + ep.completion_ids)[-CONTEXT_IDS:]
            transcript.sampled(sample)
            if wire.needs_close(sample.ids, sample.stopped):
                transcript.insert(wire.close_ids, "env")
            # decoded here: a fast tokenizer used from two threads at once can fail ("Already
            # borrowed"), and only the processor's own code needs the pool's deadline
            said = decode_after(wire.tokenizer, list(before), sample.ids)
            parse = partial(_parse, wire, said)
            try:
                reasoning, action = yield from _processor(parse, "parsing the model output", cfg)
            except _Over as over:
                # the model's own output could not be read: its failure; a parser that hangs
                # (e.g. a regex backtracking) is the processor's, and leaves the gradient
                ep.fault = over.fault or "policy"
                raise
            ep.messages.append({"role": "assistant", "content": action, "reasoning": reasoning})
            step = step_job(handle, action, cfg.max_env_chars)
            reply_text, alive = yield from _env(step, "stepping the environment", cfg)
            reply = transcript.env_text(reply_text)
            ep.messages.append({"role": "user", "content": reply})
            if cfg.credit is Credit.TURN and alive and ep.turns < opened.max_turns:
                # the last turn's share is what the final reward leaves (_split_reward)
                read = turn_reward_job(handle)
                own, value = yield from _env(read, "reading the reward after a step", cfg)
                transcript.scored(own, value)
            if not alive:
                raise _Over(Status.DONE)
            if ep.turns >= opened.max_turns:
                raise _Over(Status.MAX_TURNS)
            render = _render(partial(wire.reply_text, reply), "environment reply")
            text = yield from _processor(render, "rendering the environment reply", cfg)
            ids = wire.reply_ids(text, [reply], cfg.env_special_tokens)
            ep.special_token_strings += wire.count_special(reply)
            if wire.room(transcript.used + len(ids), cfg.max_episode_tokens) < 1:
                raise _Over(Status.BUDGET)
            transcript.insert(ids, "env")
    except _Over as over:
        ep.status, ep.error = over.status, over.message
    if handle is None:
        return
    ep.server = ep.server or handle.server()  # a reset that failed on a server names it
    if not ep.status.failed:
        try:
            ep.reward, ep.success = yield from _env(reward_job(handle), "reading the reward", cfg)
        except _Over as over:  # the reward read failed or timed out
            ep.status, ep.error = over.status, over.message
    yield Detach(close_job(handle))


def _env(
    job: Callable[[], Any], what: str, cfg: RolloutConfig, timeout: float | None = None
) -> Generator[Request, Any, Any]:
    """Run one call into env code; its value, or the end of the episode with what went wrong.

    ``timeout`` lengthens the step timeout for this call (an env's declared ``reset_timeout``).
    """
    out: Outcome = yield EnvCall(job, timeout)
    if out.timed_out or isinstance(out.error, EnvTimeout):
        raise _Over(
            Status.TIMEOUT,
            f"{what} took longer than the step timeout ({cfg.step_timeout:g}s)",
        )
    if isinstance(out.error, EnvMisbehaved):
        raise _Over(Status.ERROR, _message(out.error))
    if isinstance(out.error, EnvRaised):  # from a worker process: "Type: message"
        raise _Over(Status.ERROR, f"{what} raised {_message(out.error)}")
    if isinstance(out.error, EnvCrashed):
        raise _Over(Status.ERROR, f"{what} failed: {_message(out.error)}")
    if out.error is not None:
        raise _Over(Status.ERROR, f"{what} raised {describe(out.error)}")
    return out.value


def _processor(
    job: Callable[[], Any], what: str, cfg: RolloutConfig
) -> Generator[Request, Any, Any]:
    """Run one call into processor code off the scheduler's thread, with the step timeout; its
    value, or the end of the episode (status ``error``) with what went wrong."""
    out: Outcome = yield LocalCall(job, cfg.step_timeout)
    if out.timed_out:
        raise _Over(
            Status.ERROR,
            f"the processor took longer than the step timeout ({cfg.step_timeout:g}s) {what}",
            fault="infrastructure",
        )
    if isinstance(out.error, _Over):
        raise out.error
    if out.error is not None:
        raise _Over(Status.ERROR, f"the processor failed {what}: {describe(out.error)}")
    return out.value


def _message(exc: BaseException) -> str:
    """The message of one of our own exceptions, which may quote env text."""
    try:
        return str(exc)
    except Exception:
        return describe(exc)


def _render(render: Callable[[], str], what: str) -> Callable[[], str]:
    """The job that renders ``what`` and checks that it is text (a real ``str``)."""

    def job() -> str:
        text = render()
        if not isinstance(text, str):
            raise _Over(
                Status.ERROR, f"the processor rendered {type(text).__name__} for the {what}"
            )
        return plain_str(text)

    return job


def _parse(wire: Wire, text: str) -> tuple[str, str]:
    """``parse_agent_output`` of a turn's text (decoded after the ids before it, as the model
    wrote it in context), run as a job: reasoning and action as real ``str``."""
    reasoning, action = wire.processor.parse_agent_output(text)
    if not isinstance(action, str):
        raise _Over(
            Status.ERROR,
            f"the processor failed to parse the model output: parse_agent_output returned "
            f"{type(action).__name__} as the action",
        )
    return plain_str(str(reasoning)), plain_str(action)


# -- the scheduler --------------------------------------------------------------------------------
class _Scheduler:
    """Drives every episode's life: env calls on the pool, generation in ready batches."""

    # An env call still running may be waited for, so that its episode joins the next
    # generation batch, for MIN_GRACE s or twice the typical (median) env call, whichever is
    # longer. A slow env (far above the median) is not waited for: the others go on; and an
    # episode whose recent env calls were that slow is not waited for at all.
    MIN_GRACE = 0.05
    RECENT_CALLS = 4  # an episode's env calls that say whether its env is slow

    def __init__(
        self,
        transcripts: list[_Transcript],
        pool: CallPool,
        session: Session,
        on_episode: Callable[[Episode], None] | None,
    ) -> None:
        self.pool, self.session = pool, session
        # An engine that batches by itself gets each row's turn the moment the row is ready.
        self.submit: Callable[[Turn, frozenset[int]], Future[Sample]] | None = getattr(
            session, "submit", None
        )
        self.on_episode = on_episode
        self.transcripts = transcripts
        self.timeouts = [p.binding.host.call_timeout for p in transcripts]
        index: Counter[int] = Counter()  # each row's place among the rows of its binding
        self.lives = {}
        for row, transcript in enumerate(transcripts):
            binding = transcript.binding
            opening = opener(binding.host, binding.config, index[id(binding)], binding.options)
            index[id(binding)] += 1
            claim = partial(self._claim, row)
            self.lives[row] = _life(transcript, opening, claim, binding.wire, binding.config)
        self.waiting: dict[int, Turn] = {}  # rows ready to generate
        self.on_env: dict[int, float] = {}  # rows waiting on an env call -> since when
        self.in_use: dict[int, int] = {}  # env identity -> row, for envs of live episodes
        self.generated: set[int] = set()  # rows the session knows
        self.ended: list[int] = []  # finished, not yet reported
        self.local: set[int] = set()  # rows waiting on processor code (not env time)
        self.hooking: set[int] = set()  # finished rows whose on_episode_end hooks run
        self.env_seconds: deque[float] = deque(maxlen=64)  # recent env call durations
        self.row_seconds: dict[int, deque[float]] = {}  # each row's recent env call durations
        self.waits: tuple[float, float] | None = None  # (grace, slow), until an env call returns

    def run(self) -> None:
        try:
            for row in list(self.lives):
                self._advance(row, None)
            while True:
                self._report()
                if not self.lives and not self.hooking:
                    break
                self._collect(block=not self.waiting)
                if self.waiting and self._ready_to_generate():
                    self._generate()
        except BaseException:
            self._abandon()
            raise

    # -- moving episodes along -----------------------------------------------------------
    def _advance(self, row: int, value: Any) -> None:
        life = self.lives[row]
        while True:
            try:
                request = life.send(value)
            except StopIteration:
                del self.lives[row]
                self._forget(row)
                self.ended.append(row)
                return
            if isinstance(request, Detach):
                self.pool.submit(request.job, self.timeouts[row])
                value = None
                continue
            if isinstance(request, EnvCall):
                self.on_env[row] = time.monotonic()
                timeout = self.timeouts[row]
                if timeout is not None and request.timeout is not None:
                    timeout = max(timeout, request.timeout)
                self.pool.submit(request.job, timeout, tag=row)
            elif isinstance(request, LocalCall):
                self.on_env[row] = time.monotonic()  # waited for like an env call
                self.local.add(row)
                self.pool.submit(request.job, request.timeout, tag=row)
            else:
                self.waiting[row] = Turn(row, request.new_ids, request.limit)
            return

    def _claim(self, row: int, handle: EnvHandle) -> None:
        other = self.in_use.setdefault(handle.key, row)
        if other != row:
            raise _Over(
                Status.ERROR,
                f"{handle.label} returned the same env instance for two episodes "
                f"(seeds {self.transcripts[other].episode.seed!r} and "
                f"{self.transcripts[row].episode.seed!r}); "
                "it must make a new env per call",
            )

    def _forget(self, row: int) -> None:
        for key, owner in list(self.in_use.items()):
            if owner == row:
                del self.in_use[key]
        if row in self.generated:
            self.generated.discard(row)
            try:
                self.session.release([row])
            except Exception as exc:  # a backend's bookkeeping must not end the batch
                log.warning("the backend failed to release an episode: %s", exc)

    def _collect(self, block: bool) -> None:
        timeout = None if block else 0.0
        if not block and self.on_env:
            timeout = max(0.0, self._grace_end() - time.monotonic())
        for call in self.pool.wait(timeout):
            if call.tag is None:  # a detached close
                continue
            outcome = call.outcome or Outcome(timed_out=True)
            if isinstance(call.tag, _Hooks):
                self._hooked(call.tag.row, outcome)
                continue
            if isinstance(call.tag, _Sampling):
                self._sampled(call.tag.row, outcome)
                continue
            del self.on_env[call.tag]
            if call.tag in self.local:
                self.local.discard(call.tag)
            else:
                self.transcripts[call.tag].episode.env_seconds += outcome.seconds
                self.env_seconds.append(outcome.seconds)
                recent = self.row_seconds.setdefault(call.tag, deque(maxlen=self.RECENT_CALLS))
                recent.append(outcome.seconds)
                self.waits = None
            self._advance(call.tag, outcome)

    def _waits(self) -> tuple[float, float]:
        """The grace, and the slowest recent call past which an episode's env is slow (both
        computed again only when an env call has returned)."""
        if self.waits is None:
            typical = statistics.median(self.env_seconds) if self.env_seconds else 0.0
            grace = max(self.MIN_GRACE, 2 * typical)
            slowest = [max(recent) for recent in self.row_seconds.values()]
            slow = max(grace, 2 * statistics.median_low(slowest)) if slowest else math.inf
            self.waits = (grace, slow)
        return self.waits

    def _grace_end(self) -> float:
        """When the youngest env call worth waiting for stops being so (now: none is).

        Calls of episodes whose env is slow are not: those whose slowest recent call took
        longer than the grace and twice a typical episode's slowest. A slow env's episode joins
        whichever batch follows its return, and holds none back; envs that are all slow alike
        are still gathered into one batch.
        """
        grace, slow = self._waits()
        awaited = [
            since
            for row, since in self.on_env.items()
            if max(self.row_seconds.get(row, (0.0,))) <= slow
        ]
        return max(awaited) + grace if awaited else 0.0

    def _ready_to_generate(self) -> bool:
        if self.submit is not None:  # nothing to gather: the engine batches by itself
            return True
        return not self.on_env or time.monotonic() >= self._grace_end()

    def _generate(self) -> None:
        """One generation call per set of stop ids (one in a batch of a single wire), or one
        request per row for an engine that batches by itself."""
        by_stops: dict[frozenset[int], list[int]] = defaultdict(list)
        for row in sorted(self.waiting):
            by_stops[frozenset(self.transcripts[row].binding.wire.stop_ids)].append(row)
        for stop_ids, rows in by_stops.items():
            if self.submit is None:
                self._generate_rows(rows, stop_ids)
                continue
            for row in rows:
                turn = self.waiting.pop(row)
                self.generated.add(row)
                try:
                    future = self.submit(turn, stop_ids)
                except Exception as exc:  # the backend refused the request: this episode ends
                    self._take([row], self._failed(1, exc))
                    continue
                self.pool.watch(future, tag=_Sampling(row))

    def _generate_rows(self, rows: list[int], stop_ids: frozenset[int]) -> None:
        turns = [self.waiting.pop(r) for r in rows]
        try:
            samples = self.session.generate(turns, stop_ids)
            if len(samples) != len(rows):
                raise RuntimeError(f"the backend returned {len(samples)} samples for {len(rows)}")
        except Exception as exc:  # the backend failed for this call: those episodes end
            samples = self._failed(len(rows), exc)
        self.generated.update(rows)
        self._take(rows, samples)

    def _sampled(self, row: int, outcome: Outcome) -> None:
        """A row's own request (:meth:`_generate` with ``submit``) came back."""
        if outcome.error is not None or not isinstance(outcome.value, Sample):
            error = outcome.error or TypeError(f"the backend returned {outcome.value!r}")
            self._take([row], self._failed(1, error))
        else:
            self._take([row], [outcome.value])

    def _failed(self, rows: int, exc: BaseException) -> list[Sample]:
        log.warning("generation failed for %d episodes: %s", rows, exc)
        return [Sample(error=f"{type(exc).__name__}: {exc}") for _ in range(rows)]

    def _take(self, rows: list[int], samples: list[Sample]) -> None:
        # Any engine's ids and logprobs are checked before they reach an episode.
        vocab_size = getattr(self.session, "vocab_size", None)
        for row, sample in zip(rows, samples, strict=True):
            self._advance(row, check_sample(sample, vocab_size))

    # -- finished episodes ----------------------------------------------------------------
    def _report(self) -> None:
        """Finish the records of ended episodes, then fire their ``on_episode_end`` hooks on the
        pool, each with the step timeout; an episode is handed on once its hooks are done."""
        if not self.ended:
            return
        rows, self.ended = self.ended, []
        _finish_records([self.transcripts[r] for r in rows])
        from .plugins import manager

        pm = manager()
        listening = pm.listening("on_episode_end")
        for row in rows:
            if not listening:
                self._hand_on(row)
                continue
            self.hooking.add(row)
            job = partial(_fire_hooks, pm, self.transcripts[row].episode)
            self.pool.submit(
                job, self.transcripts[row].binding.config.step_timeout, tag=_Hooks(row)
            )

    def _hooked(self, row: int, outcome: Outcome) -> None:
        """A hook that failed or hung ends its episode as an error (if nothing else did)."""
        self.hooking.discard(row)
        transcript = self.transcripts[row]
        ep = transcript.episode
        problem = ""
        if outcome.timed_out:
            timeout = transcript.binding.config.step_timeout or 0.0
            problem = f"an on_episode_end hook took longer than the step timeout ({timeout:g}s)"
        elif isinstance(outcome.error, HookFailed):
            problem = _message(outcome.error)
        elif outcome.error is not None:
            problem = f"an on_episode_end hook failed: {describe(outcome.error)}"
        if problem and not ep.status.failed:
            ep.status, ep.error = Status.ERROR, clean_message(problem)
            _settle(transcript)
            _split_reward(transcript)
        self._hand_on(row)

    def _hand_on(self, row: int) -> None:
        if self.on_episode is not None:
            self.on_episode(self.transcripts[row].episode)

    def _abandon(self) -> None:
        """After an exception mid-batch: close what is open; report nothing unfinished."""
        for row, life in list(self.lives.items()):
            transcript = self.transcripts[row]
            if not transcript.episode.status.failed:
                transcript.episode.status, transcript.episode.error = (
                    Status.ERROR,
                    "the batch was interrupted",
                )
            life.close()
        self.lives.clear()


def _settle(transcript: _Transcript) -> None:
    """A failed episode's reward, whose fault it was, and whether it leaves the gradient.

    Statuses ``error`` and ``timeout`` are the infrastructure's fault (env, backend, processor,
    hooks) unless the model's own output could not be parsed. With ``failed_episodes="mask"``
    (the default) an infrastructure failure is ``masked``: TRL gets no token of it to train on
    and no reward for it; ``error_reward`` is what the others are trained with.
    """
    ep, cfg = transcript.episode, transcript.binding.config
    if not ep.status.failed:
        return
    ep.reward = cfg.error_reward
    ep.fault = ep.fault or "infrastructure"
    ep.masked = ep.fault == "infrastructure" and cfg.failed_episodes == "mask"


def _split_reward(transcript: _Transcript) -> None:
    """With credit per turn, the last turn earns what the others left of the episode's reward
    (the readings after its step, if any, are replaced), so the turns' rewards sum to it."""
    ep = transcript.episode
    if transcript.binding.config.credit is not Credit.TURN or not ep.turns:
        return
    earned = ep.turn_rewards[: ep.turns - 1]
    earned += [0.0] * (ep.turns - 1 - len(earned))  # a failed step left no reading
    ep.turn_rewards = [*earned, ep.reward - math.fsum(earned)]


def _finish_records(transcripts: list[_Transcript]) -> None:
    """Reward of failed episodes, the turns' rewards, text, segments and drift counters (one
    tokenizer call)."""
    for transcript in transcripts:
        _settle(transcript)
        _split_reward(transcript)
    played = [p for p in transcripts if p.pieces]
    if not played:
        return
    pieces = [[(ids, who != "model") for ids, who in p.pieces] for p in played]
    tokenizer = played[0].binding.wire.tokenizer  # one model, so one tokenizer, in a batch
    for transcript, (text, mismatches, noncanonical, texts) in zip(
        played, drift_counters_many(tokenizer, pieces), strict=True
    ):
        ep = transcript.episode
        ep.text, ep.bridge_mismatches, ep.noncanonical_turns = text, mismatches, noncanonical
        ep.segments = [(t, who) for t, (_, who) in zip(texts, transcript.pieces, strict=True)]


@dataclass(frozen=True)
class _Sampling:
    """The pool tag of a row's own generation request (an engine that batches by itself)."""

    row: int


@dataclass(frozen=True)
class _Hooks:
    """The pool tag of an episode's ``on_episode_end`` hooks."""

    row: int


class HookFailed(Exception):
    """A plugin's ``on_episode_end`` hook raised; the message names the plugin."""


def _fire_hooks(pm: Any, episode: Episode) -> None:
    problems = pm.episode_end(episode)  # each failing plugin is also reported once on stderr
    if problems:
        raise HookFailed(problems[0])


def episode_fields() -> list[str]:
    """Names of the per-episode record fields (for docs and JSON consumers)."""
    return [f.name for f in fields(Episode)] + ["sampled_tokens", "inserted_tokens"]
