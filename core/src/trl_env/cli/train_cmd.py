"""``trl-env train``: GRPO training from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .options import parse_kv

# command-line flag -> (section, key) in TrainConfig
_GRPO_FLAGS = {
    "learning_rate": "learning_rate",
    "max_steps": "max_steps",
    "batch_size": "per_device_train_batch_size",
    "num_generations": "num_generations",
    "steps_per_generation": "steps_per_generation",
    "grad_accum": "gradient_accumulation_steps",
    "beta": "beta",
    "temperature": "temperature",
    "seed": "seed",
    "logging_steps": "logging_steps",
    "save_steps": "save_steps",
}
_ROLLOUT_FLAGS = ("max_turns", "max_new_tokens", "max_episode_tokens", "step_timeout")


@click.command("train")
@click.option("--env", "env", help="Registered environment name (see `trl-env list`).")
@click.option("--processor", "processor", help="Registered processor name (e.g. qwen3).")
@click.option("--model", default=None, help="Model id, local path, or `tiny` (default).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--demo", is_flag=True, help="The README's demo: tiny model learns `guess` on CPU.")
@click.option(
    "--output-dir", default=None, help="Checkpoints, logs, episodes (default runs/ENV-PROC)."
)
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env option.")
@click.option("--processor-arg", "processor_args", multiple=True, metavar="KEY=VALUE")
@click.option(
    "--grpo", "grpo_args", multiple=True, metavar="KEY=VALUE", help="Any GRPOConfig option."
)
@click.option("--learning-rate", type=float)
@click.option("--max-steps", type=int)
@click.option("--batch-size", type=int, help="Episodes per device per step.")
@click.option("--num-generations", type=int, help="Episodes per seed (GRPO group size).")
@click.option("--steps-per-generation", type=int)
@click.option("--grad-accum", type=int, help="Gradient accumulation steps.")
@click.option("--beta", type=float, help="KL coefficient (0 needs no reference model).")
@click.option("--temperature", type=float, help="Sampling temperature (also used by the loss).")
@click.option("--seed", type=int)
@click.option("--logging-steps", type=int)
@click.option("--save-steps", type=int)
@click.option("--max-turns", type=int, help="Turns per episode.")
@click.option("--max-new-tokens", type=int, help="Tokens per turn.")
@click.option("--max-episode-tokens", type=int, help="Token budget per episode, prompt included.")
@click.option("--step-timeout", type=float, help="Seconds per env step.")
@click.option("--train-seeds", type=int, help="Number of training seeds (dataset rows).")
@click.option("--lora", is_flag=True, default=None, help="Train a LoRA adapter (peft).")
@click.option("--lora-r", type=int, help="LoRA rank (default 16).")
@click.option("--lora-alpha", type=int, help="LoRA alpha (default 32).")
@click.option("--lora-target-modules", help="Comma-separated module names (default all-linear).")
@click.option(
    "--use-vllm", is_flag=True, default=None, help="Generate with TRL's vLLM engine (GPU)."
)
@click.option(
    "--vllm-mode",
    type=click.Choice(["colocate", "server"]),
    help="colocate: vLLM inside each training process; server: `trl vllm-serve` running apart.",
)
@click.option("--resume", is_flag=True, default=None, help="Continue from the last checkpoint.")
@click.option("--no-check", is_flag=True, help="Skip the processor/tokenizer check.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def train_cmd(**opts: Any) -> None:
    """Train a model with GRPO on an environment, using trl-env's multi-turn rollouts.

    Options come from defaults, then --config FILE.yaml (keys: env, processor, model, env_args,
    processor_args, output_dir, train_seeds, rollout, grpo, lora), then the command line.
    TensorBoard logs go to OUTPUT_DIR/runs. Ctrl-C saves a checkpoint; --resume continues.

    \b
    Examples:
      trl-env train --demo
      trl-env train --env sokoban --processor qwen3 --max-steps 20
      accelerate launch --multi_gpu --num_processes 2 -m trl_env train --demo
    """
    from .quiet import quiet_libraries

    quiet_libraries()
    from ..errors import UsageError
    from ..training import TrainConfig, load_config, train
    from ..training.config import demo_config

    cfg = TrainConfig()
    if opts["demo"]:
        cfg = cfg.merged(demo_config())
    if opts["config_file"]:
        cfg = cfg.merged(load_config(opts["config_file"]))
    cfg = cfg.merged(_overrides(opts))
    lora_flags = opts["lora_r"] or opts["lora_alpha"] or opts["lora_target_modules"]
    if lora_flags and cfg.lora is None:
        raise UsageError("--lora-r, --lora-alpha and --lora-target-modules need --lora.")
    summary = train(cfg.validate(), progress=not opts["as_json"])
    if opts["as_json"]:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)


def _overrides(opts: dict[str, Any]) -> dict[str, Any]:
    grpo = {key: opts[flag] for flag, key in _GRPO_FLAGS.items() if opts[flag] is not None}
    if opts["use_vllm"]:
        grpo["use_vllm"] = True
    if opts["vllm_mode"]:
        grpo["vllm_mode"] = opts["vllm_mode"]
    grpo.update(parse_kv(opts["grpo_args"], "--grpo"))
    rollout = {key: opts[key] for key in _ROLLOUT_FLAGS if opts[key] is not None}
    out: dict[str, Any] = {
        "env": opts["env"],
        "processor": opts["processor"],
        "model": opts["model"],
        "output_dir": opts["output_dir"],
        "env_args": parse_kv(opts["env_args"], "--env-arg"),
        "processor_args": parse_kv(opts["processor_args"], "--processor-arg"),
        "grpo": grpo,
        "rollout": rollout,
        "train_seeds": opts["train_seeds"],
        "resume": opts["resume"],
    }
    if opts["no_check"]:
        out["check"] = False
    if opts["lora"]:
        lora: dict[str, Any] = {}
        if opts["lora_r"]:
            lora["r"] = opts["lora_r"]
        if opts["lora_alpha"]:
            lora["alpha"] = opts["lora_alpha"]
        if opts["lora_target_modules"]:
            lora["target_modules"] = opts["lora_target_modules"].split(",")
        out["lora"] = lora
    return out


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"Trained {summary['model']} on {summary['env']} ({summary['processor']})",
        show_header=False,
    )
    table.add_column("")
    table.add_column("", justify="right")
    window = summary["window"]
    for label, key in (
        (f"reward, first {window} logged steps", "reward_start"),
        (f"reward, last {window} logged steps", "reward_end"),
    ):
        value = summary[key]
        table.add_row(label, "n/a" if value is None else f"{value:.3f}")
    table.add_row("steps", str(summary["steps"]))
    table.add_row("time", f"{summary['seconds']} s")
    table.add_row("model", summary["model_dir"])
    table.add_row("TensorBoard logs", summary["logs_dir"])
    table.add_row("episodes", summary["episodes_dir"])
    table.add_row("report", f"trl-env view {Path(summary['model_dir']).parent}")
    Console().print(table)
