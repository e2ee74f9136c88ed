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

from . import extras
from .episode import STATUSES, Episode
from .protocols import Processor
from .registry import env_factory, load_processor
from .rollout import EnvSource, RolloutConfig, batch_rollout

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
    backend_factory: Callable[[Any], Any] | None = None,
    on_episodes: Callable[[list[Episode]], None] | None = None,
    **overrides: Any,
) -> RolloutFunc:
    """Return ``rollout_func(prompts, trainer)`` for ``GRPOTrainer``.

    The returned dict has TRL's keys (``prompt_ids``, ``completion_ids``, ``logprobs``,
    ``env_mask``) plus ``env_reward``, ``env_status`` and ``env_turns``, which TRL forwards to the
    reward functions (use :func:`env_reward`). ``backend_factory(trainer)`` picks the generation
    backend; by default the trainer's own model generates through transformers.
    """
    cfg = replace(config or RolloutConfig(), **overrides).validate()
    make_env = env_factory(env) if isinstance(env, str) else env
    state: dict[str, Any] = {}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tokenizer = getattr(trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wrapping one
        proc = state.get("processor")
        if proc is None:
            proc = (
                load_processor(processor, tokenizer=tokenizer, **(processor_options or {}))
                if isinstance(processor, str)
                else processor
            )
            state["processor"] = proc
            _register_stop_ids(trainer, proc, tokenizer)
        backend = (backend_factory or _default_backend)(trainer)
        episodes = batch_rollout(
            [seed_of(p) for p in prompts],
            env=make_env,
            processor=proc,
            tokenizer=tokenizer,
            backend=backend,
            config=cfg,
        )
        closer = _closer_ids(proc, tokenizer)
        for ep in episodes:
            if not ep.completion_ids:  # TRL reads completion_ids[-1]; nothing here is trained
                ep.completion_ids, ep.env_mask = list(closer), [0] * len(closer)
                ep.logprobs = [0.0] * len(closer)
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
            "env_status": [ep.status for ep in episodes],
            "env_turns": [ep.turns for ep in episodes],
        }

    return rollout_func


def env_reward(
    completions: list[Any], env_reward: list[float] | None = None, **_: Any
) -> list[float]:
    """Reward function for ``GRPOTrainer``: the environment's reward at the end of each episode."""
    if env_reward is None:
        raise ValueError("env_reward needs the rollout function from trl_env.make_rollout_func")
    return [float(r) for r in env_reward]


def _default_backend(trainer: Any) -> Any:
    from .backends.transformers import TransformersBackend

    model = trainer.accelerator.unwrap_model(trainer.model)
    return TransformersBackend(model, pad_token_id=trainer.processing_class.pad_token_id)


def _closer_ids(processor: Processor, tokenizer: Any) -> list[int]:
    text = extras.turn_close(processor, tokenizer)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _register_stop_ids(trainer: Any, processor: Processor, tokenizer: Any) -> None:
    """Let TRL count episodes that end on the processor's end-of-turn token as terminated."""
    ids = getattr(trainer, "eos_token_ids", None)
    if not isinstance(ids, list):
        return
    for token in extras.stop_tokens(processor, tokenizer):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id not in ids:
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
    failed = [e for e in episodes if e.status in ("error", "timeout")]
    for ep in failed[:limit]:
        log.warning("episode %r ended with %s: %s", ep.seed, ep.status, ep.error)
    if len(failed) > limit:
        log.warning("%d more episodes failed in this batch", len(failed) - limit)
