"""``trl-env sft``: a supervised warm-up on an env's demonstrations, before RL with ``train``."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from .. import streams
from ..config import SAMPLING_FIELDS, RolloutConfig
from ..errors import UsageError
from ..training.config import LORA_DEFAULTS, unknown_key
from .options import (
    ENV_ARG_HELP,
    REPORTERS,
    figures_table,
    json_option,
    model_option,
    parse_kv,
    report_to_list,
    rollout_options,
)

# Rollout options a demonstration has no use for: its actions are written, not sampled, and an
# episode that fails is left out, not trained on.
NOT_SFT = (*SAMPLING_FIELDS, "seed", "error_reward", "failed_episodes", "credit")
_ROLLOUT_NAMES = {f.name for f in dataclasses.fields(RolloutConfig)} - set(NOT_SFT)


# Keys of an sft config file (what _write_config saves) that are not their flag's name.
_PARAMS = {"env": "env_name", "processor": "processor_name"}
_DICTS = ("env_args", "processor_args")  # merged key by key with the flags of the same name
_FILE_KEYS = (
    "command", "env", "env_args", "processor", "processor_args", "model", "episodes", "epochs",
    "learning_rate", "batch_size", "seed", "lora", "lora_r", "lora_alpha", "lora_target_modules",
    "report_to", "rollout", "output_dir",
)  # fmt: skip


def _config_layer(ctx: click.Context, param: click.Parameter, path: Path | None) -> Path | None:
    """``--config FILE``: its options become the defaults of this run, so the flags given win
    (read first: the option is eager)."""
    if path is None:
        return None
    from ..yamlfile import read_mapping

    data = read_mapping(path)
    # train's config.yaml names no command, but has sections sft has not
    command = data.get("command") or ("train" if {"grpo", "envs"} & data.keys() else "sft")
    if command != "sft":
        raise UsageError(
            f"Config file {path} is a `trl-env {command}` config; give it to that command, or "
            "give sft the config.yaml of an sft run."
        )
    params = {str(p.name): p for p in ctx.command.params}
    for key in (*_DICTS, "rollout"):
        if not isinstance(data.get(key) or {}, dict):
            raise UsageError(f"{key} in config file {path} must be a mapping of options.")
    rollout = data.get("rollout") or {}
    _known(data, _FILE_KEYS, f"config file {path}")
    _known(rollout, sorted(_ROLLOUT_NAMES), f"rollout: of config file {path}")
    skip = (*_DICTS, "rollout", "command")
    layer = {_PARAMS.get(k, k): v for k, v in data.items() if k not in skip} | rollout
    for name, value in layer.items():  # a list where the flag takes one comma-separated value
        if isinstance(value, list) and not getattr(params[name], "multiple", False):
            layer[name] = ",".join(map(str, value)) or ("none" if name == "report_to" else "")
    ctx.default_map = {**(ctx.default_map or {}), **layer}
    ctx.meta["sft.config"] = {k: dict(data.get(k) or {}) for k in _DICTS}
    return path


def _known(data: dict[str, Any], known: Sequence[str], where: str) -> None:
    for key in data:
        if key not in known:
            raise unknown_key(str(key), known, where)


@click.command("sft")
@click.option(
    "--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), is_eager=True,
    callback=_config_layer,
    help="Options from a YAML file: an sft run's config.yaml runs it again; the flags given win.",
)  # fmt: skip
@click.option("--env", "env_name", required=True, metavar="NAME", help="The env to learn.")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help=ENV_ARG_HELP)
@click.option("--processor", "processor_name", required=True, help="Registered processor name.")
@click.option(
    "--processor-arg", "processor_args", multiple=True, metavar="KEY=VALUE",
    help="Processor option (e.g. thinking=false).",
)  # fmt: skip
@model_option
@click.option(
    "--episodes", default=64, show_default=True,
    help="Demonstration episodes: the env's first N training seeds.",
)  # fmt: skip
@click.option("--epochs", default=3.0, show_default=True, help="Passes over the episodes.")
@click.option("--lr", "learning_rate", default=5e-5, show_default=True, help="Learning rate.")
@click.option("--batch-size", default=8, show_default=True, help="Episodes per optimizer step.")
@click.option("--seed", default=0, show_default=True, help="Seed of the trainer.")
@rollout_options(exclude=NOT_SFT)
@click.option("--lora", is_flag=True, help="Train a LoRA adapter (peft), merged into final/.")
@click.option(
    "--lora-r", type=int, default=LORA_DEFAULTS["r"], show_default=True, help="LoRA rank."
)
@click.option(
    "--lora-alpha", type=int, default=LORA_DEFAULTS["alpha"], show_default=True,
    help="LoRA scaling numerator.",
)  # fmt: skip
@click.option(
    "--lora-target-modules", default=LORA_DEFAULTS["target_modules"], show_default=True,
    help="Comma-separated module names, or all-linear.",
)  # fmt: skip
@click.option(
    "--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="The run folder (default runs/sft-ENV-PROCESSOR); must be empty or new.",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace the run in --output-dir.")
@click.option(
    "--report-to", default="tensorboard", show_default=True, metavar="|".join(REPORTERS),
    callback=report_to_list,
    help="Where the loss goes: tensorboard (OUTPUT_DIR/runs, plotted by `trl-env view`), wandb, "
    "both (tensorboard,wandb), or none.",
)  # fmt: skip
@json_option()
def sft_cmd(**opts: Any) -> None:
    """Warm a model up on an env's demonstrations with TRL's SFTTrainer, before RL.

    The env's demonstrate(seed) actions are played through the env by the rollout engine, so
    each episode holds the ids a rollout of those actions would hold; the loss is on the model's
    own tokens only. The model is saved to DIR/final, which train, eval and check take as
    --model DIR/final; `trl-env view DIR` shows the demonstrations and the loss. The options
    are saved as DIR/config.yaml; `--config DIR/config.yaml` runs the same again (flags given
    with it win).

    \b
    Example:
      trl-env sft --env guess --processor smollm2 --model smollm2 --output-dir runs/sft
      trl-env train --env guess --processor smollm2 --model runs/sft/final
    """
    from .quiet import quiet_libraries

    if opts["model"]:  # a missing path or an unreachable hub id: one sentence, before torch
        from .precheck import check_model

        check_model(opts["model"])
    layer = click.get_current_context().meta.get("sft.config", {})  # --config FILE's
    env_args = {**layer.get("env_args", {}), **parse_kv(opts.pop("env_args"), "--env-arg")}
    processor_args = {
        **layer.get("processor_args", {}),
        **parse_kv(opts.pop("processor_args"), "--processor-arg"),
    }
    rollout = {k: opts.pop(k) for k in sorted(_ROLLOUT_NAMES) if k in opts}
    as_json = opts.pop("as_json")
    quiet_libraries()
    from ..training.sft_run import run_sft

    summary = run_sft(
        opts.pop("env_name"),
        opts.pop("processor_name"),
        env_args=env_args,
        processor_args=processor_args,
        rollout={k: v for k, v in rollout.items() if v is not None},
        progress=_progress_mode(as_json),
        **{k: v for k, v in opts.items() if k != "config_file"},
    )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)


def _progress_mode(as_json: bool) -> str:
    if as_json:
        return "lines-stderr"
    return "bar" if sys.stdout.isatty() else "lines"


def _print_summary(summary: dict[str, Any]) -> None:
    table = figures_table(f"SFT of {summary['model']} on {summary['env']} ({summary['processor']})")
    left = sum(summary["left_out"].values())
    table.add_row("episodes", f"{summary['episodes']}" + (f" ({left} left out)" if left else ""))
    table.add_row("trained tokens", f"{summary['trained_tokens']} of {summary['tokens']}")
    if summary.get("first_loss") is not None:
        table.add_row("loss", f"{summary['first_loss']:.4f} -> {summary['last_loss']:.4f}")
    table.add_row("steps", str(summary["steps"]))
    trained = f"{summary['trained_parameters']:,}" + (" (LoRA, merged)" if summary["lora"] else "")
    table.add_row("trained parameters", trained)
    table.add_row("time", f"{summary['seconds']} s")
    table.add_row("model", summary["model_dir"])
    table.add_row("next", f"trl-env train --model {summary['model_dir']} ...")
    table.add_row("report", f"trl-env view {summary['output_dir']}")
    streams.console().print(table)  # on a pipe or in a log, as wide as the table: paths whole
