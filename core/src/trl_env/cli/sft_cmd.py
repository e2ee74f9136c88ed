"""``trl-env sft``: a supervised warm-up on an env's demonstrations, before RL with ``train``."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from .. import streams
from ..config import SAMPLING_FIELDS, RolloutConfig
from ..errors import UsageError
from ..training.config import LORA_DEFAULTS, target_modules, unknown_key
from .options import (
    ENV_ARG_HELP,
    REPORTERS,
    model_option,
    parse_kv,
    report_to_list,
    rollout_options,
)

# Rollout options a demonstration has no use for: its actions are written, not sampled, and an
# episode that fails is left out, not trained on.
NOT_SFT = (*SAMPLING_FIELDS, "seed", "error_reward", "failed_episodes")
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
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
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
    for name, low in (("episodes", 1), ("batch_size", 1)):
        if opts[name] < low:
            raise UsageError(f"--{name.replace('_', '-')} is {opts[name]}; it must be at least 1.")
    for name in ("epochs", "learning_rate"):
        if not opts[name] > 0:
            flag = "--lr" if name == "learning_rate" else "--epochs"
            raise UsageError(f"{flag} is {opts[name]}; it must be above 0.")
    if opts["model"]:  # a missing path or an unreachable hub id: one sentence, before torch
        from .precheck import check_model

        check_model(opts["model"])
    if opts["lora"]:
        target_modules(opts["lora_target_modules"])
    out = opts["output_dir"] or Path("runs") / f"sft-{opts['env_name']}-{opts['processor_name']}"
    out = out.absolute()
    summary = run_sft(out, opts)
    if opts["as_json"]:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)


def run_sft(out: Path, opts: dict[str, Any]) -> dict[str, Any]:
    """Everything after the flags were read: the run folder, the episodes, the training."""
    from ..errors import TrlEnvError
    from ..redact import MASK, masked_keys, redact
    from ..training import rundir

    if out.is_dir() and any(out.iterdir()) and not opts["overwrite"]:
        raise UsageError(
            f"--output-dir {out} is not empty; replace the run there with --overwrite, or "
            "choose another --output-dir."
        )
    rundir.check(out, resume=False, overwrite=True)  # a file, or files no run writes: refused
    layer = click.get_current_context().meta.get("sft.config", {})  # --config FILE's
    env_options = {**layer.get("env_args", {}), **parse_kv(opts["env_args"], "--env-arg")}
    processor_args = {
        **layer.get("processor_args", {}),
        **parse_kv(opts["processor_args"], "--processor-arg"),
    }
    from .quiet import quiet_libraries

    quiet_libraries()
    from ..config import RolloutConfig
    from ..mixture import env_seeds
    from ..resolve import resolve_stack
    from ..spec import EnvSpec
    from ..training import sft
    from ..wire import Wire

    masked = list(masked_keys({"env_args": env_options, "rollout": _rollout(opts)}))
    if masked:  # from an sft run's config.yaml, which never holds a URL's secret
        raise UsageError(
            f"{', '.join(masked)} holds a URL whose secret a run never saves (shown as {MASK}); "
            "give it again with its secret (--env-server URL, --env-arg url=URL)."
        )
    config = RolloutConfig(**_rollout(opts)).validate()
    spec = EnvSpec(opts["env_name"], options=env_options)
    # An unknown env or a bad option: one sentence. Env servers check what they serve.
    make_env = spec.factory(check=not config.env_servers)
    seeds = env_seeds(spec, "train", opts["episodes"], config)
    scripts = sft.read_demonstrations(spec, seeds, config)
    try:
        stack = resolve_stack(opts["processor_name"], processor_args, opts["model"])
    except UsageError:
        raise
    except TrlEnvError as exc:  # a model or tokenizer that cannot be loaded: the user's input
        raise UsageError(str(exc)) from None
    from ..models import load_model
    from ..wire import model_eos_ids

    try:
        model = load_model(stack.model_path)
    except TrlEnvError as exc:
        raise UsageError(str(exc)) from None
    wire = Wire.bind(stack.processor, stack.tokenizer, model_eos_ids(model))
    demos = sft.render_demonstrations(make_env, seeds, scripts, wire, config)
    if not demos.episodes:
        why = "; ".join(f"{n} {reason}" for reason, n in demos.left_out.most_common())
        raise UsageError(f"None of the {len(seeds)} demonstrations can be trained on: {why}.")
    if opts["overwrite"] and out.is_dir():
        rundir.clear(out)  # what check() found there is a run's
    rundir.ensure_writable(out)
    rundir.claim(out, "sft")  # first: what --overwrite may replace later
    settings = sft.SftSettings(
        epochs=opts["epochs"],
        learning_rate=opts["learning_rate"],
        batch_size=opts["batch_size"],
        seed=opts["seed"],
        lora=_lora(opts) if opts["lora"] else None,
        report_to=tuple(opts["report_to"]),
    )
    _write_config(out, opts, env_options, processor_args, _rollout(opts))
    sft.write_episodes(out / "episodes", demos.episodes)
    start = time.perf_counter()
    figures = sft.train_sft(
        demos.rows(),
        model,
        stack.tokenizer,
        out,
        settings,
        [sft.progress_callback(_progress_mode(opts["as_json"]))],
    )
    summary = {
        "kind": "sft",
        "env": spec.label,
        "processor": opts["processor_name"],
        "model": opts["model"] or "tiny",
        "episodes": len(demos.episodes),
        "left_out": dict(demos.left_out),
        "trained_tokens": demos.trained_tokens,
        "tokens": sum(len(r["input_ids"]) for r in demos.rows()),
        "epochs": opts["epochs"],
        "learning_rate": opts["learning_rate"],
        "lora": opts["lora"],
        **figures,
        "seconds": round(time.perf_counter() - start, 2),
        "output_dir": str(out),
        "model_dir": str(out / "final"),
        "episodes_dir": str(out / "episodes"),
    }
    summary = redact(summary)
    (out / rundir.SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _lora(opts: dict[str, Any]) -> dict[str, Any]:
    """trl-env's LoRA options (training.config.lora_config reads them) from the flags."""
    return {
        "r": opts["lora_r"],
        "alpha": opts["lora_alpha"],
        "target_modules": target_modules(opts["lora_target_modules"]),
    }


def _rollout(opts: dict[str, Any]) -> dict[str, Any]:
    """The rollout options given (the rest keep RolloutConfig's defaults, as in train)."""
    return {k: opts[k] for k in sorted(_ROLLOUT_NAMES) if opts.get(k) is not None}


def _write_config(
    out: Path,
    opts: dict[str, Any],
    env_options: dict[str, Any],
    processor_args: dict[str, Any],
    rollout: dict[str, Any],
) -> None:
    import yaml

    keys = ("episodes", "epochs", "learning_rate", "batch_size", "seed", "lora", "lora_r",
            "lora_alpha", "lora_target_modules", "report_to")  # fmt: skip
    saved = {
        "command": "sft",
        "env": opts["env_name"],
        "env_args": env_options,
        "processor": opts["processor_name"],
        "processor_args": processor_args,
        "model": opts["model"] or "tiny",
        **{k: opts[k] for k in keys},
        "rollout": {k: getattr(v, "value", v) for k, v in rollout.items()},
        "output_dir": str(out),
    }
    from ..redact import redact

    # secrets in URLs masked: those come again with their flags (--config refuses them masked)
    text = yaml.safe_dump(redact(saved), sort_keys=False)
    (out / "config.yaml").write_text(text, encoding="utf-8")


def _progress_mode(as_json: bool) -> str:
    if as_json:
        return "lines-stderr"
    return "bar" if sys.stdout.isatty() else "lines"


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(
        title=f"SFT of {summary['model']} on {summary['env']} ({summary['processor']})",
        show_header=False,
    )
    table.add_column("")
    table.add_column("", justify="right")
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
