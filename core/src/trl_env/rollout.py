"""``batch_rollout``: many multi-turn episodes at once, token-exact.

The model's sampled ids are kept as sampled (never re-tokenized); every inserted piece of text
(first prompt, environment replies, turn closers) is tokenized alone with
``add_special_tokens=False`` and masked. Correctness therefore does not depend on the tokenizer
being additive (``tok(a + b) == tok(a) + tok(b)``); the drift counters on each episode show how
far a re-tokenizing pipeline would be off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

from . import extras
from .backends.base import Backend, Sample
from .config import DEFAULT_MAX_TURNS, RolloutConfig
from .episode import STATUSES, Episode, decode, drift_counters_many
from .errors import UsageError
from .protocols import Env, Processor
from .stepping import Outcome, call_all


@dataclass
class _Run:
    """Mutable per-episode state while the batch is played."""

    episode: Episode
    env: Env | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    pending: list[int] | None = None  # ids inserted since the model's last turn
    pieces: list[tuple[list[int], bool]] | None = None  # (ids, inserted?) in order
    finished: bool = False

    def finish(self, status: str, error: str = "") -> None:
        self.episode.status = status  # type: ignore[assignment]
        self.episode.error = error
        self.finished = True

    def insert(self, ids: list[int], into_completion: bool = True) -> None:
        assert self.pieces is not None and self.pending is not None
        self.pieces.append((ids, True))
        self.pending.extend(ids)
        if into_completion:
            self.episode.completion_ids.extend(ids)
            self.episode.env_mask.extend([0] * len(ids))
            self.episode.logprobs.extend([0.0] * len(ids))

    @property
    def live_env(self) -> Env:
        assert self.env is not None, "the env of a started episode exists"
        return self.env

    def used(self) -> int:
        return len(self.episode.prompt_ids) + len(self.episode.completion_ids)


EnvSource = Callable[[], Env] | Sequence[Env] | str


def batch_rollout(
    seeds: Sequence[str],
    *,
    env: EnvSource,
    processor: Processor,
    tokenizer: Any,
    model: Any = None,
    backend: Backend | None = None,
    config: RolloutConfig | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    **overrides: Any,
) -> list[Episode]:
    """Play one episode per seed, all at once, and return them in the order of ``seeds``.

    ``env`` is a factory called once per episode, a registered env name, or one env per seed.
    Generation goes through ``backend``, or a transformers backend over ``model``.
    ``on_episode`` is called with each episode as soon as it ends (its env already closed).
    """
    cfg = replace(config or RolloutConfig(), **overrides).validate()
    if backend is None:
        if model is None:
            raise UsageError("batch_rollout needs a model or a backend.")
        from .backends.transformers import TransformersBackend

        backend = TransformersBackend(model, pad_token_id=tokenizer.pad_token_id)
    wire = _Wire.of(processor, tokenizer)
    runs = [_Run(Episode(seed=str(seed))) for seed in seeds]
    retire = _Retirer(cfg, tokenizer, on_episode)
    try:
        _make_envs(runs, env, cfg)
        _reset(runs, cfg, processor, wire, tokenizer)
        retire(runs)
        session = backend.session(cfg.sampling())
        try:
            while live := [r for r in runs if not r.finished]:
                samples = _generate(session, live, cfg, wire)
                actions = _record_turn(live, samples, processor, tokenizer, wire)
                _step(live, actions, cfg, processor, wire, tokenizer)
                retire(live)
        finally:
            session.close()
    finally:
        retire.abandon(runs)
    return [r.episode for r in runs]


@dataclass(frozen=True)
class _Wire:
    """The token-level facts of a processor on a tokenizer."""

    stop_ids: frozenset[int]
    close_ids: list[int]
    separator: str

    @classmethod
    def of(cls, processor: Processor, tokenizer: Any) -> _Wire:
        stops = extras.stop_tokens(processor, tokenizer)
        vocab = tokenizer.get_vocab()
        missing = [t for t in stops if t not in vocab]
        if missing:
            raise UsageError(
                f"The tokenizer has no stop token {', '.join(missing)} of "
                f"{type(processor).__name__}; run `trl-env check` on this processor and model."
            )
        close_ids = _tokenize(tokenizer, [extras.turn_close(processor, tokenizer)])[0]
        return cls(frozenset(vocab[t] for t in stops), close_ids, extras.turn_separator(processor))


def _tokenize(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return list(tokenizer(texts, add_special_tokens=False)["input_ids"])


def _make_envs(runs: list[_Run], source: EnvSource, cfg: RolloutConfig) -> None:
    if isinstance(source, str):
        from .registry import env_factory

        source = env_factory(source)
    if callable(source):
        outcomes = call_all([source for _ in runs], cfg.step_timeout)
    else:
        if len(source) != len(runs):
            raise UsageError(f"Got {len(source)} environments for {len(runs)} seeds.")
        outcomes = [Outcome(value=e) for e in source]
    for run, out in zip(runs, outcomes, strict=True):
        if _failed(run, out, "creating the environment"):
            continue
        run.env = out.value
        run.max_turns = cfg.max_turns or extras.max_turns(out.value, DEFAULT_MAX_TURNS)


def _failed(run: _Run, out: Outcome, what: str, expect_str: bool = False) -> bool:
    """Record a failed env call on ``run``; True if it failed."""
    if out.timed_out:
        run.finish("timeout", f"{what} took longer than the step timeout ({out.seconds:g}s)")
    elif out.error is not None:
        run.finish("error", f"{what} raised {type(out.error).__name__}: {out.error}")
    elif expect_str and not isinstance(out.value, str):
        name = type(run.env).__name__
        run.finish("error", f"{name} returned {type(out.value).__name__}, not str, when {what}")
    else:
        return False
    return True


def _reset(
    runs: list[_Run], cfg: RolloutConfig, processor: Processor, wire: _Wire, tokenizer: Any
) -> None:
    ready = [r for r in runs if not r.finished]
    outcomes = call_all(
        [partial(r.live_env.reset, r.episode.seed) for r in ready], cfg.step_timeout
    )
    texts, started = [], []
    for run, out in zip(ready, outcomes, strict=True):
        run.episode.env_seconds += out.seconds
        if _failed(run, out, "resetting the environment", expect_str=True):
            continue
        assert run.env is not None
        system = cfg.system_prompt or extras.system_prompt(run.env)
        try:
            texts.append(extras.first_prompt(processor, system, out.value))
        except Exception as exc:
            run.finish("error", f"the processor failed to render the first prompt: {exc}")
            continue
        run.episode.messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": out.value},
        ]
        started.append(run)
    for run, ids in zip(started, _tokenize(tokenizer, texts), strict=True):
        run.episode.prompt_ids = ids
        run.pending, run.pieces = [], []
        run.insert(ids, into_completion=False)
        room = cfg.max_episode_tokens - len(ids) - len(wire.close_ids)
        if room < 1:
            run.finish(
                "budget",
                f"the first prompt has {len(ids)} tokens, leaving no room in the episode budget "
                f"of {cfg.max_episode_tokens} tokens",
            )


def _generate(session: Any, live: list[_Run], cfg: RolloutConfig, wire: _Wire) -> list[Sample]:
    rows = [id(r) for r in live]
    new_ids = []
    limits = []
    for run in live:
        assert run.pending is not None
        new_ids.append(run.pending)
        room = cfg.max_episode_tokens - run.used() - len(wire.close_ids)
        limits.append(max(0, min(cfg.max_new_tokens, room)))
    samples = session.generate(rows, new_ids, limits, wire.stop_ids)
    for run in live:
        run.pending = []
    return samples


def _record_turn(
    live: list[_Run], samples: list[Sample], processor: Processor, tokenizer: Any, wire: _Wire
) -> list[str | None]:
    """Append each turn's sampled ids; close cut turns; parse the actions (None on failure)."""
    actions: list[str | None] = []
    for run, sample in zip(live, samples, strict=True):
        ep = run.episode
        ep.completion_ids.extend(sample.ids)
        ep.env_mask.extend([1] * len(sample.ids))
        ep.logprobs.extend(sample.logprobs)
        ep.turns += 1
        assert run.pieces is not None
        run.pieces.append((sample.ids, False))
        if not sample.stopped:
            run.insert(wire.close_ids)
        text = decode(tokenizer, sample.ids)
        try:
            reasoning, action = processor.parse_agent_output(text)
            if not isinstance(action, str):
                raise TypeError(
                    f"parse_agent_output returned {type(action).__name__} as the action"
                )
        except Exception as exc:
            run.finish("error", f"the processor failed to parse the model output: {exc}")
            actions.append(None)
            continue
        ep.messages.append({"role": "assistant", "content": action, "reasoning": str(reasoning)})
        actions.append(action)
    return actions


def _step(
    live: list[_Run],
    actions: list[str | None],
    cfg: RolloutConfig,
    processor: Processor,
    wire: _Wire,
    tokenizer: Any,
) -> None:
    stepping = [(r, a) for r, a in zip(live, actions, strict=True) if a is not None]
    outcomes = call_all([partial(r.live_env.step, a) for r, a in stepping], cfg.step_timeout)
    replies: list[tuple[_Run, str]] = []
    for (run, _), out in zip(stepping, outcomes, strict=True):
        run.episode.env_seconds += out.seconds
        if _failed(run, out, "stepping the environment", expect_str=True):
            continue
        run.episode.messages.append({"role": "user", "content": out.value})
        if not _alive(run):
            run.finish("done")
        elif run.episode.turns >= run.max_turns:
            run.finish("max_turns")
        else:
            replies.append((run, out.value))
    texts = []
    for run, reply in replies:
        try:
            texts.append(wire.separator + processor.append_user_input(reply))
        except Exception as exc:
            texts.append("")
            run.finish("error", f"the processor failed to render the environment reply: {exc}")
    for (run, _), ids in zip(replies, _tokenize(tokenizer, texts), strict=True):
        if run.finished:
            continue
        if run.used() + len(ids) + 1 + len(wire.close_ids) > cfg.max_episode_tokens:
            run.finish("budget")
            continue
        run.insert(ids)


def _alive(run: _Run) -> bool:
    alive = getattr(run.env, "alive", False)
    return bool(alive)


class _Retirer:
    """Finalizes finished episodes once: reward, counters, env closed, callback."""

    def __init__(
        self, cfg: RolloutConfig, tokenizer: Any, on_episode: Callable[[Episode], None] | None
    ) -> None:
        self.cfg, self.tokenizer, self.on_episode = cfg, tokenizer, on_episode
        self.retired: set[int] = set()

    def __call__(self, runs: list[_Run]) -> None:
        done = [r for r in runs if r.finished and id(r) not in self.retired]
        if not done:
            return
        for run in done:
            self.retired.add(id(run))
            _finalize(run, self.cfg)
        _count_drift(done, self.tokenizer)
        self._close([r for r in done if r.episode.status != "timeout"])
        if self.on_episode is not None:
            for run in done:
                self.on_episode(run.episode)

    def abandon(self, runs: list[_Run]) -> None:
        """After an exception mid-batch, close every env still open; report nothing unfinished."""
        left = [r for r in runs if id(r) not in self.retired]
        for run in left:
            if not run.finished:
                run.finish("error", "the batch was interrupted")
            self.retired.add(id(run))
        self._close([r for r in left if r.episode.status != "timeout"])

    def _close(self, runs: list[_Run]) -> None:
        # Only envs that have a close method are called: a call per env to do nothing cost a
        # few ms per batch of retiring episodes.
        envs = [r.live_env for r in runs if callable(getattr(r.env, "close", None))]
        if envs:
            call_all([partial(extras.close, e) for e in envs], self.cfg.step_timeout)


def _finalize(run: _Run, cfg: RolloutConfig) -> Episode:
    ep = run.episode
    if ep.status in ("error", "timeout"):
        ep.reward = cfg.error_reward
    else:
        try:
            ep.reward = float(run.env.reward)  # type: ignore[union-attr]
            if not math.isfinite(ep.reward):
                raise ValueError(f"{ep.reward}")
        except Exception as exc:
            ep.status, ep.reward = "error", cfg.error_reward
            ep.error = f"{type(run.env).__name__}.reward is not a finite number: {exc}"
    assert ep.status in STATUSES
    return ep


def _count_drift(runs: list[_Run], tokenizer: Any) -> None:
    """The text and drift counters of finished episodes, all in one tokenizer call."""
    played = [r for r in runs if r.pieces]
    counters = drift_counters_many(tokenizer, [r.pieces or [] for r in played])
    for run, (text, mismatches, noncanonical) in zip(played, counters, strict=True):
        ep = run.episode
        ep.text, ep.bridge_mismatches, ep.noncanonical_turns = text, mismatches, noncanonical


def episode_fields() -> list[str]:
    """Names of the per-episode record fields (for docs and JSON consumers)."""
    return [f.name for f in fields(Episode)] + ["sampled_tokens", "inserted_tokens"]
