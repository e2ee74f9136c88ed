"""Plug ``batch_rollout`` into TRL's ``GRPOTrainer(rollout_func=...)``.

TRL passes this process's slice of the generation batch with each dataset prompt already repeated
``num_generations`` times in a row; the prompt is the episode seed, so the members of a group all
start from the same state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .backends import build_backend
from .config import SAMPLING_FIELDS, Isolation, RolloutConfig
from .episode import STATUSES, Episode
from .errors import UsageError
from .protocols import Processor
from .registry import env_factory, load_processor
from .rollout import EnvSource, batch_rollout
from .wire import Wire, model_eos_ids

log = logging.getLogger("trl_env")

RolloutFunc = Callable[[list[Any], Any], dict[str, list[Any]]]


def seed_of(prompt: Any) -> str:
    """The episode seed carried by a dataset prompt (a string, or chat messages ending in it)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    return str(prompt)


def make_rollout_func(
    *,
    env: EnvSource,
    processor: Processor | str,
    config: RolloutConfig | None = None,
    processor_options: dict[str, Any] | None = None,
    backend: str = "transformers",
    backend_options: dict[str, Any] | None = None,
    on_episodes: Callable[[list[Episode]], None] | None = None,
    **overrides: Any,
) -> RolloutFunc:
    """Return ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``.

    The returned dict has TRL's keys (``prompt_ids``, ``completion_ids``, ``logprobs``,
    ``env_mask``) plus ``env_reward``, ``env_status`` and ``env_turns``, which TRL forwards to the
    reward functions (use :func:`env_reward`). Sampling options not given here are the trainer's
    own (``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty`` of its
    GRPOConfig), since TRL recomputes logprobs under them; given ones must agree with it.
    ``backend`` names a registered generation backend: by default the trainer's own model
    generates through transformers; ``"vllm"`` uses the trainer's vLLM (colocate) or the server at
    ``backend_options["vllm_server_base_url"]``.
    """
    base = replace(config or RolloutConfig(), **overrides).validate()
    given = _given_sampling(config, overrides)
    make_env: Any = env_factory(env) if isinstance(env, str) else env
    if base.env_isolation is Isolation.PROCESS:
        # One pool for the whole run: worker processes are started once, not every batch.
        from .isolation import EnvProcessPool

        make_env = EnvProcessPool(env, max_workers=base.env_workers)  # type: ignore[arg-type]
    bound: dict[str, Any] = {}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if not bound:
            bound.update(_bind(trainer, processor, processor_options, base, given))
            bound["backend"] = build_backend(
                backend,
                tokenizer=bound["wire"].tokenizer,
                trainer=trainer,
                options=dict(backend_options or {}),
            )
        wire: Wire = bound["wire"]
        cfg: RolloutConfig = bound["config"]
        episodes = batch_rollout(
            [seed_of(p) for p in prompts],
            env=make_env,
            processor=wire.processor,
            tokenizer=wire.tokenizer,
            backend=bound["backend"],
            wire=wire,
            config=cfg,
        )
        for ep in episodes:
            _fit_for_trl(ep, wire)
        _log_metrics(trainer, episodes)
        _report_errors(episodes)
        if on_episodes is not None:
            on_episodes(episodes)
        return {
            "prompt_ids": [ep.prompt_ids for ep in episodes],
            "completion_ids": [ep.completion_ids for ep in episodes],
            "logprobs": [ep.logprobs for ep in episodes],
            "env_mask": [ep.env_mask for ep in episodes],
            "env_reward": [ep.reward for ep in episodes],
            "env_status": [str(ep.status) for ep in episodes],
            "env_turns": [ep.turns for ep in episodes],
        }

    return rollout_func


def _given_sampling(config: RolloutConfig | None, overrides: dict[str, Any]) -> set[str]:
    """Sampling options the caller set, in ``overrides`` or as non-defaults of ``config``."""
    given = {k for k in SAMPLING_FIELDS if k in overrides}
    if config is not None:
        default = RolloutConfig()
        given |= {k for k in SAMPLING_FIELDS if getattr(config, k) != getattr(default, k)}
    return given


def sampling_of(args: Any) -> dict[str, Any]:
    """The sampling options of a trainer's GRPOConfig, in RolloutConfig's terms."""
    out: dict[str, Any] = {}
    for name in SAMPLING_FIELDS:
        value = getattr(args, name, None)
        if value is None:  # GRPOConfig's None means "off"
            continue
        out[name] = value
    return out


def _bind(
    trainer: Any,
    processor: Processor | str,
    processor_options: dict[str, Any] | None,
    base: RolloutConfig,
    given: set[str],
) -> dict[str, Any]:
    """What the first call learns from the trainer: tokenizer, wire, sampling."""
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wrapping one
    if tokenizer is None:
        raise UsageError("The trainer has no processing_class (tokenizer) to encode episodes with.")
    proc = (
        load_processor(processor, tokenizer=tokenizer, **(processor_options or {}))
        if isinstance(processor, str)
        else processor
    )
    model = getattr(trainer, "model", None)
    wire = Wire.bind(proc, tokenizer, model_eos_ids(_unwrap(trainer, model)))
    theirs = sampling_of(getattr(trainer, "args", None))
    for name in sorted(given & set(theirs)):
        ours = getattr(base, name)
        if ours != theirs[name]:
            raise UsageError(
                f"make_rollout_func got {name}={ours!r} but the trainer's GRPOConfig has "
                f"{name}={theirs[name]!r}; TRL scores the episodes under its own setting, so "
                "set it in one place (GRPOConfig)."
            )
    _register_stop_ids(trainer, wire)
    return {"wire": wire, "config": replace(base, **theirs).validate()}


def _unwrap(trainer: Any, model: Any) -> Any:
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or model is None:
        return model
    return accelerator.unwrap_model(model)


def _fit_for_trl(ep: Episode, wire: Wire) -> None:
    """TRL reads ``completion_ids[-1]`` and pads prompts: give an episode that never reached
    the model one masked closer (its prompt was cut to leave room for it, see the budget rule)."""
    close = list(wire.close_ids)
    if not ep.completion_ids:
        ep.completion_ids, ep.env_mask, ep.logprobs = close, [0] * len(close), [0.0] * len(close)
    if not ep.prompt_ids:  # the env failed before its first prompt existed
        ep.prompt_ids = list(close)


def env_reward(
    completions: list[Any], env_reward: list[float] | None = None, **_: Any
) -> list[float]:
    """Reward function for ``GRPOTrainer``: the environment's reward at the end of each episode."""
    if env_reward is None:
        raise ValueError("env_reward needs the rollout function from trl_env.make_rollout_func")
    return [float(r) for r in env_reward]


def _register_stop_ids(trainer: Any, wire: Wire) -> None:
    """Let TRL count episodes that end on a stop id (the processor's or the model's) as
    terminated, not clipped."""
    ids = getattr(trainer, "eos_token_ids", None)
    if not isinstance(ids, list):
        return
    for token_id in sorted(wire.stop_ids):
        if token_id not in ids:
            ids.append(token_id)


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, list[float]]:
    """Per-episode values of the rollout metrics (averaged by the caller)."""
    values: dict[str, list[float]] = {
        "rollout/turns": [float(e.turns) for e in episodes],
        "rollout/env_reward": [e.reward for e in episodes],
        "rollout/sampled_tokens": [float(e.sampled_tokens) for e in episodes],
        "rollout/inserted_tokens": [float(e.inserted_tokens) for e in episodes],
        "rollout/bridge_mismatches": [float(e.bridge_mismatches) for e in episodes],
        "rollout/noncanonical_turns": [float(e.noncanonical_turns) for e in episodes],
        "rollout/env_seconds": [e.env_seconds for e in episodes],
        "rollout/sanitized_chars": [float(e.sanitized_chars) for e in episodes],
        "rollout/capped_chars": [float(e.capped_chars) for e in episodes],
    }
    for status in STATUSES:
        values[f"rollout/status_{status}"] = [float(e.status == status) for e in episodes]
    return values


def _log_metrics(trainer: Any, episodes: list[Episode]) -> None:
    metrics = getattr(trainer, "_metrics", None)
    if metrics is None:
        return
    import torch

    mode = "train" if trainer.model.training else "eval"
    values = episode_metrics(episodes)
    names = sorted(values)
    local = torch.tensor([values[n] for n in names], dtype=torch.float32).T  # [episodes, metrics]
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None:
        local = accelerator.gather(local.to(accelerator.device)).cpu()
    for name, column in zip(names, local.T, strict=True):
        metrics[mode][name].append(column.mean().item())


def _report_errors(episodes: list[Episode], limit: int = 3) -> None:
    failed = [e for e in episodes if e.status.failed]
    for ep in failed[:limit]:
        log.warning("episode %r ended with %s: %s", ep.seed, ep.status, ep.error)
    if len(failed) > limit:
        log.warning("%d more episodes failed in this batch", len(failed) - limit)
