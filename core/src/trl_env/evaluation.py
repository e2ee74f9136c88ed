"""``evaluate``: play a model on envs' evaluation seeds and summarise the episodes; what
``trl-env eval`` runs, callable without it.

The run's envs play through one :class:`~trl_env.player.Player` (one host per env, from the
seeds to the last batch) on the player's schedule: each batch samples from its own seed, drawn
from the run's ``seed`` as every evaluation of a training run draws (common random numbers), so
the same seed replays the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .backends import DEFAULT_BACKEND
from .config import SAMPLING_FIELDS, RolloutConfig
from .mixture import Mixture, as_mixture
from .spec import EnvSpec


def evaluate(
    env: Any,
    processor: str,
    *,
    processor_options: Mapping[str, Any] | None = None,
    model: str = "tiny",
    backend: str = DEFAULT_BACKEND,
    backend_options: Mapping[str, Any] | None = None,
    episodes: int = 32,
    batch_size: int = 32,
    seed: int = 0,
    config: RolloutConfig | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    on_turns: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Play ``episodes`` evaluation seeds of each env of ``env`` (what
    :func:`~trl_env.make_rollout_func` takes) with ``model``, and return the summary.

    An env with a curriculum plays ``episodes`` seeds at each of its stages, summarised per
    stage; several envs are summarised each, with the reward weighted by their weights. Each
    episode's record (with the run's metadata under ``"run"``) goes to ``on_record`` as it ends;
    ``on_turns`` hears how many turns each generation call played (a progress bar).
    """
    from .errors import UsageError

    if episodes < 1 or batch_size < 1:
        raise UsageError(
            f"--episodes is {episodes} and --batch-size {batch_size}; both must be at least 1."
        )
    from .backends import build_backend
    from .models import load_model
    from .player import Player
    from .resolve import resolve_stack
    from .wire import model_eos_ids

    mixture = as_mixture(env)
    config = (config or RolloutConfig()).validate()
    processor_options = dict(processor_options or {})
    with Player(mixture, processor, config, processor_options=processor_options) as player:
        # env code first, on the run's hosts: a broken env costs no model load
        seeds = {e.label: player.seeds(e, "eval", episodes) for e in mixture}
        player.check_stages()
        stack = resolve_stack(processor, processor_options, model)
        # A vLLM server holds its own copy of the model; every other backend generates with ours.
        llm = None if backend == "vllm" else load_model(stack.model_path)
        made = build_backend(
            backend, tokenizer=stack.tokenizer, model=llm, options=dict(backend_options or {})
        )
        player.run_seed = seed
        player.bind(stack.tokenizer, model_eos_ids(llm), _Counted(made, on_turns))
        run = run_metadata(mixture, model, processor, processor_options, config, seed, backend)
        # Each env at each of its curriculum stages, taking turns, so every batch mixes them.
        bindings = [
            player.stage(entry, stage, options)
            for entry in mixture
            for stage, options in (
                enumerate(entry.curriculum.stages) if entry.curriculum else [(None, {})]
            )
        ]
        rows = [(b, seeds[b.label][i]) for i in range(episodes) for b in bindings]
        records: list[dict[str, Any]] = []

        def record(ep: Any) -> None:
            rec = {**ep.to_dict(), "run": run}
            records.append(rec)
            if on_record is not None:
                on_record(rec)

        start = time.perf_counter()
        for lo in range(0, len(rows), batch_size):
            player.play_rows(rows[lo : lo + batch_size], training=False, on_episode=record)
    return summary_of(mixture, records, time.perf_counter() - start)


def summary_of(
    mixture: Mixture, records: list[dict[str, Any]], seconds: float | None = None
) -> dict[str, Any]:
    """The figures of an evaluation's records: over all, and each env's (and stage's) in a
    mixture or curriculum, with the reward weighted by the envs' weights."""
    summary = summarize(records, seconds)
    if len(mixture) > 1 or any(e.curriculum for e in mixture):
        summary["envs"] = {e.label: _env_summary(e, records) for e in mixture}
        weights = sum(e.weight for e in mixture)
        summary["weighted_reward"] = (
            sum((s["reward"] or 0.0) * s["weight"] for s in summary["envs"].values()) / weights
        )
    return summary


def _env_summary(entry: EnvSpec, records: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [r for r in records if r["env"] == entry.label]
    out = {**summarize(mine), "weight": entry.weight}
    if entry.curriculum:
        out["stages"] = {
            str(n): summarize([r for r in mine if r["stage"] == n])
            for n in range(len(entry.curriculum.stages))
        }
    return out


def summarize(records: list[dict[str, Any]], seconds: float | None = None) -> dict[str, Any]:
    """The episode figures every command shows (:func:`trl_env.report.summary.figures`)."""
    from .report.summary import figures

    return {**figures(records), **({"seconds": round(seconds, 2)} if seconds is not None else {})}


def run_metadata(
    mixture: Mixture,
    model: str,
    processor: str,
    processor_options: Mapping[str, Any],
    config: RolloutConfig,
    seed: int,
    backend: str,
) -> dict[str, Any]:
    """What makes this run this run: every record carries it, for comparing runs later."""
    import datetime
    import importlib.metadata as md

    from .redact import redact

    try:
        version = md.version("trl-env")
    except md.PackageNotFoundError:
        version = "unknown"
    run: dict[str, Any] = {
        "model": model,
        "processor": processor,
        "processor_args": redact(dict(processor_options)),
        "env": "+".join(mixture.labels),
        # every record carries it: no secret in a URL
        "env_args": redact(dict(next(iter(mixture)).options)) if len(mixture) == 1 else {},
        "sampling": {name: getattr(config, name) for name in SAMPLING_FIELDS},
        "limits": {
            "max_turns": config.max_turns,
            "max_new_tokens": config.max_new_tokens,
            "max_episode_tokens": config.max_episode_tokens,
        },
        "backend": backend,
        "seed": seed,
        "trl_env_version": version,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if len(mixture) > 1:
        run["envs"] = [
            {"env": e.label, "weight": e.weight, "options": redact(dict(e.options))}
            for e in mixture
        ]
    return run


class _Counted:
    """A backend whose sessions report each generation call's turns (to ``tick``); everything
    else is the backend's own."""

    def __init__(self, backend: Any, tick: Callable[[int], None] | None) -> None:
        self._backend, self._tick = backend, tick

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def session(self, params: Any) -> Any:
        session = self._backend.session(params)
        return session if self._tick is None else _CountedSession(session, self._tick)


class _CountedSession:
    def __init__(self, session: Any, tick: Callable[[int], None]) -> None:
        self._session, self._tick = session, tick

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        samples = self._session.generate(*args, **kwargs)
        self._tick(len(samples))
        return samples
