"""``trl-env train``: GRPO training from the command line.

The flags are generated from the declarations (rollout options from ``RolloutConfig``, GRPO
options are GRPOConfig's own fields, the rest from ``TrainConfig``); this module only says which
get a flag of their own and turns the given ones into a sparse layer of options.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from .. import streams
from ..backends import DEFAULT_BACKEND
from ..errors import UsageError
from ..training.config import (
    GRPO_DEFAULTS,
    LORA_DEFAULTS,
    TINY_DEFAULTS,
    TRAINER_OWNED,
    default,
    target_modules,
)
from .options import (
    ENV_ARG_HELP,
    ENV_HELP,
    REPORTERS,
    DeclaredOption,
    env_layer,
    grpo_option,
    json_option,
    parse_kv,
    report_to_list,
    rollout_options,
)

# GRPOConfig fields with a flag of their own (any other: --grpo key=value): field -> flag.
_GRPO_FLAGS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "learning_rate": (None, {"type": float}),
    "max_steps": (None, {"type": int}),
    "per_device_train_batch_size": ("--batch-size", {"type": int}),
    "num_generations": (None, {"type": int}),
    "steps_per_generation": (
        None,
        {"type": int, "help": "Optimizer steps per generation; default: --grad-accum."},
    ),
    "gradient_accumulation_steps": ("--grad-accum", {"type": int}),
    "beta": (None, {"type": float}),
    "seed": (None, {"type": int}),
    "logging_steps": (None, {"type": int}),
    "save_steps": (None, {"type": int}),
    "report_to": (
        None,
        {
            "metavar": "|".join(REPORTERS),
            "callback": report_to_list,
            "help": "Where the run's metrics go: tensorboard (OUTPUT_DIR/runs), wandb (Weights "
            "& Biases), both (tensorboard,wandb), or none. Episodes and summary.json are "
            "written either way.",
        },
    ),
    "use_vllm": (None, {"is_flag": True}),
    "vllm_mode": (None, {"type": click.Choice(["colocate", "server"])}),
    "vllm_server_base_url": (
        None,
        {
            "metavar": "URL",
            "help": "The server of --vllm-mode server; default: from --grpo vllm_server_host "
            "and vllm_server_port, as TRL does.",
        },
    ),
}


def _tiny_shown() -> dict[str, str]:
    """``--help`` defaults of the options the tiny model changes: "256 (tiny model: 16)"."""
    from ..config import option_help

    rollout = option_help()
    return {
        key: f"{rollout[key][0]} (tiny model: {value})"
        for key, value in TINY_DEFAULTS.get("rollout", {}).items()
    }


def _grpo_options(f: Any) -> Any:
    for name, (flag, kw) in reversed(_GRPO_FLAGS.items()):
        f = grpo_option(name, flag, override=GRPO_DEFAULTS, **kw)(f)
    # The sampling options belong to the trainer in a training run (TRL recomputes logprobs
    # with them), so their flags set GRPOConfig's fields of the same names.
    return rollout_options(exclude=("seed",), shown=_tiny_shown())(f)


def _count_option(flag: str, help: str, **kw: Any) -> Any:
    """A whole-number option of the run, shown with its declared default (the config key is the
    flag's name)."""
    shown = default(flag.removeprefix("--").replace("-", "_"))
    return click.option(flag, type=int, cls=DeclaredOption, shown=shown, help=help, **kw)


@click.command("train")
@click.option("--env", "env_specs", multiple=True, metavar="NAME[:WEIGHT]", help=ENV_HELP)
@click.option("--processor", "processor", help="Registered processor name (e.g. qwen3).")
@click.option(
    "--model",
    cls=DeclaredOption,
    shown=default("model"),
    help="Model id, local path, or `tiny` (the processor family's built-in offline model).",
)
@click.option(
    "--backend",
    cls=DeclaredOption,
    shown=DEFAULT_BACKEND,
    help="Generation backend (see `trl-env list`); vllm is TRL's engine, as --use-vllm.",
)
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML config file.")
@click.option("--demo", is_flag=True, help="The README's demo: tiny model learns `guess` on CPU.")
@click.option(
    "--output-dir",
    cls=DeclaredOption,
    shown="runs/ENV-PROCESSOR",
    help="Checkpoints, logs, episodes and config.yaml; must be empty or new (see --resume).",
)
@click.option("--resume", is_flag=True, help="Continue the run in --output-dir (same options).")
@click.option("--overwrite", is_flag=True, help="Replace the run in --output-dir.")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help=ENV_ARG_HELP)
@click.option(
    "--processor-arg",
    "processor_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Processor option (e.g. thinking=false).",
)
@click.option(
    "--grpo", "grpo_args", multiple=True, metavar="KEY=VALUE", help="Any GRPOConfig option."
)
@_grpo_options
@_count_option("--train-seeds", "Dataset rows: the env's first N training seeds.")
@_count_option(
    "--eval-every",
    "Every N steps, play held-out seeds of each env (TRL's evaluation loop) and log them.",
    metavar="N",
)
@_count_option("--eval-seeds", "Held-out seeds per env played by --eval-every.")
@click.option("--lora", is_flag=True, help="Train a LoRA adapter (peft) instead of the model.")
@click.option("--lora-r", type=int, cls=DeclaredOption, shown=LORA_DEFAULTS["r"], help="LoRA rank.")
@click.option(
    "--lora-alpha",
    type=int,
    cls=DeclaredOption,
    shown=LORA_DEFAULTS["alpha"],
    help="LoRA scaling numerator.",
)
@click.option(
    "--lora-target-modules",
    cls=DeclaredOption,
    shown=LORA_DEFAULTS["target_modules"],
    help="Comma-separated module names.",
)
@click.option(
    "--async",
    "asynchronous",
    is_flag=True,
    help="Overlap rollouts and training: TRL's AsyncGRPOTrainer fed by trl-env's rollout worker "
    "on the vLLM server at --vllm-server-base-url (needs a CUDA GPU; docs/async.md).",
)
@click.option("--no-check", is_flag=True, help="Skip the processor/tokenizer check.")
@json_option()
@click.option(
    "--quiet",
    is_flag=True,
    help="Print no progress: neither the first lines (what is loading, what a step takes) nor "
    "the bar or step lines; the closing summary and errors still show.",
)
@click.pass_context
def train_cmd(ctx: click.Context, **opts: Any) -> None:
    """Train a model with GRPO on an environment, using trl-env's multi-turn rollouts.

    Options come from defaults, then --config FILE.yaml (keys: env, envs, processor, model,
    backend, env_args, processor_args, output_dir, train_seeds, eval_every, eval_seeds, rollout,
    grpo, lora, check, asynchronous; or an sft run's config.yaml: its env, processor, rollout
    options and model DIR/final), then the command line. Several --env train on a mixture:
    each GRPO group is one env and one seed, groups drawn by weight; `envs:` in the config file
    also gives each env its options, processor_args, max_turns and a curriculum
    (docs/mixtures.md).
    The resolved options are saved as OUTPUT_DIR/config.yaml; `--config
    OUTPUT_DIR/config.yaml` runs the same again. TensorBoard logs go to OUTPUT_DIR/runs.
    Ctrl-C or SIGTERM saves a checkpoint and stops (exit 130 or 143); --resume continues.

    \b
    Examples:
      trl-env train --demo
      trl-env train --env sokoban --processor qwen3 --max-steps 20
      trl-env train --env guess --env wordle:2 --processor qwen3 --eval-every 10
      trl-env train --output-dir runs/sokoban-qwen3 --resume --max-steps 40
      accelerate launch --multi_gpu --num_processes 2 -m trl_env train --demo
    """
    from ..training.config import demo_config, load_config, merge
    from ..training.run import _default_out
    from .precheck import check_layer

    given: dict[str, Any] = {}
    if opts["demo"]:
        given = merge(given, demo_config())
    if opts["config_file"]:
        given = merge(given, load_config(opts["config_file"]))
    given = merge(given, _overrides(opts))
    if not opts["resume"]:  # a resumed run's names and options come from its saved config
        check_layer(given)  # names, env options and values, before torch is imported
    given["output_dir"] = given.get("output_dir") or _default_out(given)
    from .quiet import quiet_libraries

    quiet_libraries()
    from ..training import train

    made = _missing_dirs(Path(given["output_dir"]))
    try:
        outcome = train(
            given,
            resume=opts["resume"],
            overwrite=opts["overwrite"],
            progress=_progress_mode(opts["as_json"], opts["quiet"]),
            hold_signals=True,
        )
    except BaseException:
        _remove_unstarted(made)
        raise
    summary = outcome.summary
    if os.environ.get("RANK", "0") != "0":  # one summary per run, from the main process
        ctx.exit(outcome.exit_code)
    if outcome.note:
        click.echo(outcome.note, file=streams.err())
        if not summary.get("steps"):  # no summary saved: the note is all there is
            return
    table = _summary_table(summary)
    stopped = _stopped_line(summary) if outcome.signal_name else ""
    if not outcome.note:  # a run that trained: its lines first into its folder, as the
        # terminal or pipe may be gone (`train | tee` under Ctrl-C); a note changed nothing
        _keep_closing(Path(summary["output_dir"]), table, stopped)
    if opts["as_json"]:
        click.echo(json.dumps(summary, indent=2), file=streams.out())
    else:
        streams.console().print(table)
    if stopped:
        click.echo(stopped, file=streams.err())
        ctx.exit(outcome.exit_code)


def _missing_dirs(out: Path) -> list[Path]:
    """``out`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (out.absolute(), *out.absolute().parents):
        if path.exists():
            break
        missing.append(path)
    return missing


def _remove_unstarted(made: list[Path]) -> None:
    """Remove the folders this run made when it failed before writing anything of its own.

    A run that never started holds at most its config.yaml and empty folders; anything else
    (episodes, logs, a checkpoint) is kept for the user to read.
    """
    import shutil

    if not made or not made[0].is_dir():
        return
    files = [p for p in made[0].rglob("*") if not p.is_dir()]
    if any(p != made[0] / "config.yaml" for p in files):
        return
    shutil.rmtree(made[0], ignore_errors=True)
    for parent in made[1:]:
        try:
            parent.rmdir()  # only while empty: another run may have started beside it
        except OSError:
            return


def _progress_mode(as_json: bool, quiet: bool = False) -> str:
    """A bar on a terminal, one line per logged step otherwise (on stderr beside JSON)."""
    if quiet:
        return "none"
    if as_json:
        return "lines-stderr"
    return "bar" if sys.stdout.isatty() else "lines"


def _overrides(opts: dict[str, Any]) -> dict[str, Any]:
    """The command line as a sparse layer: only what was given."""
    grpo = {
        key: opts[key] for key in _GRPO_FLAGS if opts[key] is not None and opts[key] is not False
    }
    for key in TRAINER_OWNED:
        if opts.get(key) is not None:
            grpo[key] = opts[key]
    from ..config import option_help

    rollout = {
        key: opts[key]
        for key in option_help()
        if key not in TRAINER_OWNED and opts.get(key) is not None
    }
    for key, value in parse_kv(opts["grpo_args"], "--grpo").items():
        if key in grpo and grpo[key] != value:
            raise UsageError(f"--grpo {key}={value!r} contradicts the flag giving {grpo[key]!r}.")
        grpo[key] = value
    out: dict[str, Any] = {
        **env_layer(opts["env_specs"], opts["env_args"]),
        "processor": opts["processor"],
        "model": opts["model"],
        "backend": opts["backend"],
        "output_dir": opts["output_dir"],
        "processor_args": parse_kv(opts["processor_args"], "--processor-arg"),
        "grpo": grpo,
        "rollout": rollout,
        "train_seeds": opts["train_seeds"],
        "eval_every": opts["eval_every"],
        "eval_seeds": opts["eval_seeds"],
    }
    if opts["no_check"]:
        out["check"] = False
    if opts["asynchronous"]:
        out["asynchronous"] = True
    lora_flags = {"r": opts["lora_r"], "alpha": opts["lora_alpha"]}
    if opts["lora_target_modules"]:
        lora_flags["target_modules"] = target_modules(opts["lora_target_modules"])
    lora = {k: v for k, v in lora_flags.items() if v is not None}
    if opts["lora"]:
        out["lora"] = lora
    elif lora:
        raise UsageError("--lora-r, --lora-alpha and --lora-target-modules need --lora.")
    return out


# What stopped a run, said for the signals that do not speak for themselves
_STOPPED_BY = {"SIGPIPE": "SIGPIPE (the reader of its output went away)", "SIGHUP": "SIGHUP"}


def _stopped_line(summary: dict[str, Any]) -> str:
    """``Stopped by SIGINT; saved DIR/checkpoint-N. Continue with: trl-env train ...``"""
    name = summary.get("stopped_by") or "a signal"
    where = summary.get("checkpoint") or "no checkpoint"
    then = summary.get("next_command")
    if not then:
        from ..training import rundir

        then = rundir.next_command(Path(summary["output_dir"]))
    return f"Stopped by {_STOPPED_BY.get(name, name)}; saved {where}. Continue with: {then}"


def _keep_closing(out: Path, table: Any, stopped: str) -> None:
    """Write the closing table and the stop line into the run folder (``closing.txt``); a
    folder that cannot be written (removed meanwhile) costs only the file."""
    import io

    from rich.console import Console

    from ..training.rundir import CLOSING_FILE

    text = io.StringIO()
    Console(file=text, width=100_000, color_system=None).print(table)
    if stopped:
        text.write(stopped + "\n")
    try:
        (out / CLOSING_FILE).write_text(text.getvalue(), encoding="utf-8")
    except OSError:
        pass


def _summary_table(summary: dict[str, Any]) -> Any:
    from .options import figures_table

    table = figures_table(
        f"Trained {summary['model']} on {summary['env']} ({summary['processor']})"
    )
    for label, figures in _rows(summary):
        table.add_row(label, figures)
    table.add_row("steps", str(summary["steps"]))
    table.add_row("time", f"{summary['seconds']} s")
    if summary.get("model_dir"):
        table.add_row("model", summary["model_dir"])
    if summary.get("checkpoint"):
        table.add_row("checkpoint", summary["checkpoint"])
    table.add_row("TensorBoard logs", summary["logs_dir"])
    table.add_row("episodes", summary["episodes_dir"])
    table.add_row("config", str(Path(summary["output_dir"]) / "config.yaml"))
    table.add_row("report", f"trl-env view {summary['output_dir']}")
    return table


def _rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The reward of the first, best and last window of steps, and of the held-out evaluations,
    each a per-episode mean with its 95% interval (the figures of trl_env.report.summary); a
    window that is two of them (a short run) is one row."""
    spans: dict[tuple[int, int], tuple[list[str], dict[str, Any]]] = {}
    for name, span in (summary.get("train") or {}).items():
        spans.setdefault(tuple(span["steps"]), ([], span))[0].append(name)
    evals: dict[int, tuple[list[str], dict[str, Any]]] = {}
    for name, evaluation in (summary.get("held_out") or {}).items():
        evals.setdefault(evaluation["step"], ([], evaluation))[0].append(name)
    rows = []
    for (first, last), (names, span) in spans.items():
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        rows.append((f"reward, {' and '.join(names)} ({steps})", _reward(span)))
    for step, (names, evaluation) in evals.items():
        rows.append(
            (f"held-out reward, {' and '.join(names)} (after step {step})", _reward(evaluation))
        )
    change = summary.get("held_out_change")
    if change:
        steps = f"after step {change['from_step']} to {change['to_step']}"
        rows.append((f"held-out change ({steps})", _change(change)))
    for label, env in (summary.get("envs") or {}).items():
        # an env's window is its own first or last ten steps that played it: steps say which
        for name in ("first", "last"):
            span = (env.get("train") or {}).get(name)
            if span:
                first, last = span["steps"]
                rows.append((f"  {label}, {name} window (steps {first}-{last})", _reward(span)))
        evaluation = (env.get("held_out") or {}).get("last")
        if evaluation:
            rows.append(
                (f"  {label}, held-out (after step {evaluation['step']})", _reward(evaluation))
            )
    return rows


def _change(change: dict[str, Any]) -> str:
    text = f"{change['mean']:+.3f}"
    if change["low"] is not None:
        text += f" ({change['low']:+.3f} to {change['high']:+.3f})"
    seeds = f"seeds {change['higher']} higher, {change['equal']} equal, {change['lower']} lower"
    return f"{text}, {seeds}"


def _reward(figures: dict[str, Any]) -> str:
    if figures["reward"] is None:
        return "n/a"
    text = f"{figures['reward']:.3f}"
    if figures["reward_low"] is not None:
        text += f" ({figures['reward_low']:.3f} to {figures['reward_high']:.3f})"
    return text + f", {figures['episodes']} episodes"
