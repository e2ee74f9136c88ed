"""Build a GRPOTrainer from a :class:`TrainConfig` and run it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, cast

from .. import extras
from ..errors import UsageError
from ..registry import env_factory
from ..resolve import resolve_stack
from ..rollout import RolloutConfig
from .config import SAMPLING_KEYS, TrainConfig

SUMMARY_WINDOW = 10


def train(cfg: TrainConfig, progress: bool = True) -> dict[str, Any]:
    """Train and return the closing summary (also written to ``output_dir/summary.json``)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg.validate()
    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from ..models import load_model
    from ..trl_integration import env_reward, make_rollout_func
    from .callbacks import CheckpointOnInterrupt, RichProgress

    start = time.perf_counter()
    make_env = env_factory(cfg.env, **cfg.env_args)
    probe = make_env()
    seeds = extras.seeds(probe, "train", cfg.train_seeds)
    stack = resolve_stack(cfg.processor, cfg.processor_args, cfg.model, check=cfg.check)
    # No PartialState() before GRPOConfig: the first one fixes the process group for good, and
    # only GRPOConfig knows to ask for a CPU one.
    grpo = _grpo_args(cfg, int(os.environ.get("WORLD_SIZE", "1")), torch.cuda.is_available())
    rollout = RolloutConfig(
        **cfg.rollout, **{k: grpo[k] for k in SAMPLING_KEYS if k in grpo}
    ).validate()
    _check_budget(stack, probe, seeds[0], rollout, cfg)
    extras.close(probe)

    out = Path(cfg.output_dir)
    args = GRPOConfig(output_dir=str(out), **grpo)
    episode_log = _EpisodeLog(out / "episodes", args.process_index)
    trainer = GRPOTrainer(
        model=load_model(stack.model_path),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": seeds}),
        processing_class=stack.tokenizer,
        reward_funcs=[cast(Any, env_reward)],  # TRL's hint wants list[float | None]
        rollout_func=make_rollout_func(
            env=make_env,
            processor=stack.processor,
            config=rollout,
            on_episodes=episode_log,
            backend_factory=_vllm_backend if grpo.get("use_vllm") else None,
        ),
        peft_config=_lora_config(cfg.lora),
    )
    episode_log.trainer = trainer
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(RichProgress(enabled=progress))
    trainer.add_callback(CheckpointOnInterrupt())
    resume = _last_checkpoint(out) if cfg.resume else None
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(str(out / "final"))
    summary = _summary(trainer, cfg, time.perf_counter() - start, resume)
    if trainer.is_world_process_zero():
        (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _grpo_args(cfg: TrainConfig, processes: int, cuda: bool) -> dict[str, Any]:
    grpo = cfg.grpo_args()
    if not cuda:  # bf16 and checkpointing only slow a CPU run down
        grpo.setdefault("bf16", False)
        grpo.setdefault("gradient_checkpointing", False)
        grpo.setdefault("use_cpu", True)
    batch = grpo["per_device_train_batch_size"] * grpo.get("steps_per_generation", 1) * processes
    groups = grpo["num_generations"]
    if groups < 2:
        raise UsageError(
            "num_generations must be at least 2: GRPO compares episodes within a group."
        )
    if batch % groups:
        raise UsageError(
            f"The generation batch ({batch} = batch size x steps_per_generation x {processes} "
            f"process(es)) is not a multiple of num_generations ({groups}); "
            f"change --batch-size or --num-generations."
        )
    if grpo.get("use_vllm"):
        if grpo.get("vllm_mode", "colocate") == "server" and processes > 1:
            raise UsageError(
                "--vllm-mode server runs one rollout loop per turn across all processes, which "
                "trl-env does not synchronise yet; use --vllm-mode colocate with several processes."
            )
        # vLLM generates one turn per call; trl-env cuts it at the end of turn and budget.
        grpo["max_completion_length"] = cfg.rollout.get("max_new_tokens", 256)
    grpo.setdefault("max_completion_length", cfg.rollout.get("max_episode_tokens", 4096))
    return grpo


def _vllm_backend(trainer: Any) -> Any:
    from ..backends.vllm import VLLMBackend

    return VLLMBackend(trainer.vllm_generation)


def _check_budget(
    stack: Any, env: Any, seed: str, rollout: RolloutConfig, cfg: TrainConfig
) -> None:
    text = extras.first_prompt(stack.processor, extras.system_prompt(env), env.reset(seed))
    n = len(stack.tokenizer(text, add_special_tokens=False)["input_ids"])
    if n + 2 > rollout.max_episode_tokens:
        raise UsageError(
            f"The first prompt of {cfg.env} has {n} tokens but the episode budget "
            f"(max_episode_tokens) is {rollout.max_episode_tokens}; raise it above {n + 1}."
        )


def _lora_config(lora: dict[str, Any] | None) -> Any:
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=int(lora.get("r", 16)),
        lora_alpha=int(lora.get("alpha", 32)),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=lora.get("target_modules", "all-linear"),
        task_type="CAUSAL_LM",
    )


def _last_checkpoint(out: Path) -> str:
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    if last is None:
        raise UsageError(f"--resume found no checkpoint in {out}; train without --resume first.")
    return last


class _EpisodeLog:
    """Appends each rank's episodes (seed, reward, status, turns, text) to a JSONL file."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.path = folder / f"rank{rank}.jsonl"
        self.trainer: Any = None

    def __call__(self, episodes: list[Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        step = self.trainer.state.global_step if self.trainer is not None else 0
        with self.path.open("a", encoding="utf-8") as f:
            for ep in episodes:
                rec = {
                    "step": step,
                    "seed": ep.seed,
                    "reward": ep.reward,
                    "status": ep.status,
                    "turns": ep.turns,
                    "error": ep.error,
                    "text": ep.text,
                }
                f.write(json.dumps(rec) + "\n")


def _summary(trainer: Any, cfg: TrainConfig, seconds: float, resumed: str | None) -> dict[str, Any]:
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    window = min(SUMMARY_WINDOW, max(1, len(rewards) // 2))
    first = rewards[:window]
    last = rewards[-window:]
    out = Path(cfg.output_dir)
    return {
        "env": cfg.env,
        "processor": cfg.processor,
        "model": cfg.model,
        "steps": trainer.state.global_step,
        "logged_steps": len(rewards),
        "window": window,
        "reward_start": sum(first) / len(first) if first else None,
        "reward_end": sum(last) / len(last) if last else None,
        "seconds": round(seconds, 1),
        "resumed_from": resumed,
        "model_dir": str(out / "final"),
        "logs_dir": str(out / "runs"),
        "episodes_dir": str(out / "episodes"),
    }
