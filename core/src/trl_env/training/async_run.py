"""``trl-env train --async``: TRL's ``AsyncGRPOTrainer`` fed by trl-env's rollout worker.

Training and generation overlap: a vLLM server plays episodes (:class:`EnvRolloutWorker`) while
the trainer learns from the samples already queued, and TRL streams the weights to the server
every ``weight_sync_steps`` (NCCL, ``VLLM_SERVER_DEV_MODE=1 vllm serve MODEL
--weight-transfer-config '{"backend":"nccl"}'``). TRL's trainer needs CUDA (and FlashAttention
kernels for its packed loss), so on a machine without a GPU this says so before anything loads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import UsageError

# GRPOConfig options with no meaning for the async trainer (it has no generation batch).
_SYNC_ONLY = frozenset({"steps_per_generation", "use_vllm", "vllm_mode", "beta", "use_cpu"})


def check_can_run(grpo: dict[str, Any], cuda: bool) -> str:
    """The vLLM server URL of an async run; one sentence where the run cannot go ahead."""
    if not cuda:
        raise UsageError(
            "trl-env train --async runs TRL's AsyncGRPOTrainer, which needs a CUDA GPU (and "
            "FlashAttention kernels); this machine has none, so train without --async."
        )
    url = grpo.get("vllm_server_base_url")
    if not url:
        raise UsageError(
            "trl-env train --async generates on a vLLM server: give its address with "
            "--vllm-server-base-url URL (start it with `VLLM_SERVER_DEV_MODE=1 vllm serve MODEL "
            '--weight-transfer-config \'{"backend":"nccl"}\' --logprobs-mode processed_logprobs`).'
        )
    return str(url)


def async_config(output_dir: str, grpo: dict[str, Any]) -> Any:
    """``AsyncGRPOConfig`` from the run's GRPO options (those it knows)."""
    from ..trl_compat import async_grpo

    AsyncGRPOConfig, _ = async_grpo()  # from trl (1.18+) or its experimental package

    known = {f.name for f in dataclasses.fields(AsyncGRPOConfig)}
    unknown = sorted(k for k in grpo if k not in known and k not in _SYNC_ONLY)
    if unknown:
        raise UsageError(
            f"AsyncGRPOConfig has no option {unknown[0]!r}; drop it or train without --async."
        )
    options = {k: v for k, v in grpo.items() if k in known}
    try:
        return AsyncGRPOConfig(output_dir=output_dir, **options)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"AsyncGRPOConfig refused these options: {exc}") from exc


def build_trainer(
    *, args: Any, model_path: str, tokenizer: Any, rows: list[str], url: str, **playing: Any
) -> tuple[Any, Any]:
    """``(trainer, worker)``: an ``AsyncGRPOTrainer`` whose samples come from trl-env.

    ``playing`` (``env``: the run's :class:`~trl_env.player.Player`, ``config``,
    ``on_episodes``) is what ``make_rollout_func`` takes in a synchronous run; the trainer's
    sampling options go over ``config``'s."""
    from datasets import Dataset

    from ..async_worker import EnvRolloutWorker
    from ..trl_compat import async_grpo

    _, AsyncGRPOTrainer = async_grpo()

    sampling = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "min_p": args.min_p or 0.0,
        "repetition_penalty": args.repetition_penalty,
    }
    inflight = args.max_inflight_tasks
    if inflight is None or inflight <= 0:  # TRL's own rule: what the trainer can take fresh
        batch = args.per_device_train_batch_size * args.gradient_accumulation_steps
        inflight = max(args.max_staleness, 1) * batch
    inflight = max(inflight, args.num_generations)
    config = dataclasses.replace(playing.pop("config"), **sampling)
    worker = EnvRolloutWorker(
        **playing,
        tokenizer=tokenizer,
        vllm_server_base_url=url,
        vllm_server_timeout=args.vllm_server_timeout,
        num_generations=args.num_generations,
        max_inflight_episodes=inflight,
        prompts=rows,
        model=model_path,
        queue_maxsize=args.queue_maxsize,
        config=config,
    )
    trainer = AsyncGRPOTrainer(
        model=model_path,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": rows}),
        processing_class=tokenizer,
        rollout_worker=worker,
    )
    return trainer, worker
