"""A small CPU ``GRPOTrainer`` whose samples come from a trl-env rollout, for tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# One step of four rows on the CPU, no checkpoints or loggers: what a test trains with unless it
# says otherwise.
CPU_GRPO: dict[str, Any] = {
    "per_device_train_batch_size": 4,
    "num_generations": 4,
    "max_steps": 1,
    "use_cpu": True,
    "bf16": False,
    "report_to": [],
    "save_strategy": "no",
    "seed": 0,
}


def cpu_grpo_trainer(
    model: Any,
    tokenizer: Any,
    rollout: Any,
    prompts: Sequence[str],
    output_dir: str,
    eval_prompts: Sequence[str] | None = None,
    trainer: type | None = None,
    **grpo: Any,
) -> Any:
    """A ``GRPOTrainer`` (or ``trainer``, a subclass) over ``model`` rewarded by ``env_reward``;
    ``grpo`` goes over :data:`CPU_GRPO` into its ``GRPOConfig``; ``eval_prompts``: its held-out
    dataset."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from ..trl_integration import env_reward

    return (trainer or GRPOTrainer)(
        model=model,
        args=GRPOConfig(output_dir=output_dir, **{**CPU_GRPO, **grpo}),
        processing_class=tokenizer,
        reward_funcs=[env_reward],
        train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
        eval_dataset=Dataset.from_dict({"prompt": list(eval_prompts)}) if eval_prompts else None,
        rollout_func=rollout,
    )
