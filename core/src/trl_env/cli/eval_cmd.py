"""``trl-env eval``: play episodes on the env's evaluation seeds and summarise them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import click

from .. import streams
from ..backends import DEFAULT_BACKEND
from .options import (
    DeclaredOption,
    env_layer,
    json_option,
    mixture_options,
    model_option,
    optional_processor_options,
    parse_kv,
    rollout_options,
)
from .train_cmd import _tiny_shown  # the same "256 (tiny model: 16)" help as train


@click.command("eval")
@mixture_options
@optional_processor_options
@model_option
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A training config (e.g. RUN/config.yaml): its envs as trained, processor and model.",
)
@click.option(
    "--backend",
    cls=DeclaredOption,
    shown=DEFAULT_BACKEND,
    help="Generation backend (see `trl-env list`); vllm talks to a vLLM server.",
)
@click.option(
    "--vllm-server-base-url",
    metavar="URL",
    help="The vLLM server of --backend vllm (e.g. one started by `trl vllm-serve`).",
)
@click.option(
    "--episodes", default=32, show_default=True, help="Evaluation episodes (of each env)."
)
@click.option("--batch-size", default=32, show_default=True, help="Episodes played at once.")
@rollout_options(exclude=("seed", "credit"), shown=_tiny_shown())  # credit: how to train
@click.option(
    "--seed",
    default=0,
    show_default=True,
    help="Seed of the run's one random stream: the same seed replays the whole run.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write one JSON record per episode, flushed as each ends (a new file, see --append).",
)
@click.option("--append", is_flag=True, help="Add this run's records to an existing --out file.")
@json_option()
def eval_cmd(
    env_specs: tuple[str, ...],
    env_args: tuple[str, ...],
    processor_name: str | None,
    processor_args: tuple[str, ...],
    model: str | None,
    config_file: Path | None,
    backend: str | None,
    vllm_server_base_url: str | None,
    episodes: int,
    batch_size: int,
    seed: int,
    out: Path | None,
    append: bool,
    as_json: bool,
    **rollout: Any,
) -> None:
    """Play EPISODES episodes of an environment with a model and print a summary.

    Uses the env's evaluation seeds (disjoint from its training seeds). Several --env evaluate a
    mixture: each env plays EPISODES of its own seeds, the summary has each env's figures and
    the mean reward weighted by NAME:WEIGHT. Each record carries its env and the run's metadata
    under "run" (model, processor, env, their options, sampling, seed, trl-env version, time),
    so `trl-env compare` can tell runs apart.

    --config takes a training run's config.yaml (or any `trl-env train --config` file): its envs
    with their weights, options, processor options and max_turns, and its processor, processor
    options, model and rollout options, unless given here; an sft run's config.yaml gives its
    env, processor, rollout options and model DIR/final. An env with a curriculum plays
    EPISODES seeds at each of its stages, summarised per stage.

    \b
    Examples:
      trl-env eval --env guess --processor qwen3 --episodes 16 --out eval.jsonl
      trl-env eval --env guess --env wordle:2 --processor qwen3 --json
      trl-env eval --config runs/mix/config.yaml --model runs/mix/final
    """
    from ..errors import UsageError

    if episodes < 1 or batch_size < 1:
        raise UsageError(
            f"--episodes is {episodes} and --batch-size {batch_size}; both must be at least 1."
        )
    saved = _read_config(config_file) if config_file else {}
    if env_specs:
        mixture = _mixture(env_layer(env_specs, env_args))
    elif saved:
        mixture = _mixture(saved)
    else:
        raise UsageError("Name an environment: --env NAME (repeat it for a mixture), or --config.")
    processor_name = processor_name or saved.get("processor")
    if not processor_name:
        raise UsageError("Name a processor: --processor NAME (or a --config that names one).")
    given = {k: v for k, v in rollout.items() if v is not None}
    model = model or saved.get("model") or "tiny"
    settings = {**_saved_rollout(saved), **given}
    settings.pop("credit", None)  # how a training run credits turns, not how episodes play
    if model == "tiny":  # its turns are noise after a few tokens: keep a README eval short
        from ..training.config import TINY_DEFAULTS

        settings = {**TINY_DEFAULTS["rollout"], **settings}
    _precheck(mixture, processor_name, settings, model, backend or DEFAULT_BACKEND)
    out = out.absolute() if out is not None else None  # an env may os.chdir (thread isolation)
    sink = _open_out(out, append)  # refused before anything slow is loaded
    try:
        summary = _run(
            mixture,
            processor_name,
            {**saved.get("processor_args", {}), **parse_kv(processor_args, "--processor-arg")},
            model,
            backend or DEFAULT_BACKEND,
            {"vllm_server_base_url": vllm_server_base_url} if vllm_server_base_url else {},
            episodes,
            batch_size,
            seed,
            settings,
            sink,
            out,
            as_json,
        )
    finally:
        if sink:
            try:
                sink.close()
            except OSError as exc:
                raise _write_failed(out, exc) from None
    summary.update(out=str(out or ""))
    if as_json:
        click.echo(json.dumps(summary, indent=2), file=streams.out())
    else:
        _print_summary(summary)


def _precheck(
    mixture: Any, processor: str, rollout: dict[str, Any], model: str, backend: str
) -> None:
    """Names, env options, rollout values, the model and backend, before torch is imported."""
    from .precheck import check_backend, check_env, check_model, check_processor, check_rollout

    config = check_rollout(rollout)
    for entry in mixture:
        if isinstance(entry.env, str):
            stages = entry.curriculum.stages if entry.curriculum else [{}]
            for stage in stages:
                check_env(entry.env, {**entry.options, **stage}, config)
    check_processor(processor)
    check_model(model)
    check_backend(backend)


def _write_failed(out: Path | None, exc: OSError) -> Exception:
    from ..errors import OutputError

    return OutputError.disk_full(f"--out {out}", exc) or OutputError(
        f"Writing to --out {out} failed: {exc.strerror or exc}."
    )


def _read_config(path: Path) -> dict[str, Any]:
    """The keys of a training config eval uses, checked as training checks them."""
    from ..training.config import canonical_envs, load_config

    data = load_config(path)
    if data.get("envs"):
        data["envs"] = canonical_envs(data["envs"], f"config file {path}")
    elif not data.get("env"):
        raise click.BadParameter(f"{path} names no env (env or envs).", param_hint="--config")
    return data


def _saved_rollout(saved: dict[str, Any]) -> dict[str, Any]:
    """A training config's rollout options and its trainer's sampling, as RolloutConfig's."""
    from ..config import SAMPLING_FIELDS, RolloutConfig

    known = {f for f in RolloutConfig.__dataclass_fields__ if f != "seed"}
    out = {k: v for k, v in (saved.get("rollout") or {}).items() if k in known and v is not None}
    grpo = saved.get("grpo") or {}
    out.update({k: grpo[k] for k in SAMPLING_FIELDS if grpo.get(k) is not None})
    return out


def _open_out(out: Path | None, append: bool) -> IO[str] | None:
    from ..errors import UsageError

    if out is None:
        if append:
            raise UsageError("--append adds to the --out file; give --out too.")
        return None
    if out.is_file() and out.stat().st_size and not append:
        raise UsageError(
            f"--out {out} already holds records; add --append to add this run's records to "
            "them, or choose another file."
        )
    try:
        return out.open("a", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {out} cannot be written: {exc.strerror}.") from exc


def _mixture(layer: dict[str, Any]) -> Any:
    """A command line's or a config file's envs (``envs`` entries, or ``env`` with options)."""
    from ..mixture import config_mixture

    # ``envs``: checked entries (--env specs, or a config file's, from _read_config)
    return config_mixture(layer.get("envs") or [], layer.get("env", ""), layer.get("env_args"))


def _run(
    mixture: Any,
    processor_name: str,
    processor_args: dict[str, Any],
    model: str,
    backend_name: str,
    backend_options: dict[str, Any],
    episodes: int,
    batch_size: int,
    seed: int,
    rollout: dict[str, Any],
    sink: IO[str] | None,
    out: Path | None,
    as_json: bool,
) -> dict[str, Any]:
    """:func:`trl_env.evaluation.evaluate` with a progress bar, each record written to
    ``sink`` as it ends; the summary, with what the table's title names."""
    from .quiet import quiet_libraries

    quiet_libraries()
    from ..config import RolloutConfig
    from ..evaluation import evaluate

    def write(rec: dict[str, Any]) -> None:
        if sink:
            try:
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
            except OSError as exc:  # a full disk: one sentence; the records so far are kept
                raise _write_failed(out, exc) from None
        bar.episode()

    total = episodes * sum(len(e.curriculum.stages) if e.curriculum else 1 for e in mixture)
    with _progress(total, as_json) as bar:
        summary = evaluate(
            mixture,
            processor_name,
            processor_options=processor_args,
            model=model,
            backend=backend_name,
            backend_options=backend_options,
            episodes=episodes,
            batch_size=batch_size,
            seed=seed,
            config=RolloutConfig(**rollout),
            on_record=write,
            on_turns=bar.turns,
        )
    summary.update(env="+".join(mixture.labels), processor=processor_name, model=model)
    return summary


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{summary['env']} with {summary['processor']} ({summary['model']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    keys = ("episodes", "reward", "success", "turns", "sampled_tokens")
    for key in (*keys, "inserted_tokens"):
        shown = _shown(summary[key])
        if key == "reward" and summary["reward_low"] is not None:
            shown += f" (95% CI {summary['reward_low']:.3f} to {summary['reward_high']:.3f})"
        table.add_row(key.replace("_", " "), shown)
    table.add_row("status", _statuses(summary["status"]))
    if "envs" in summary:
        table.add_row("weighted reward", _shown(summary["weighted_reward"]))
        for name, env in summary["envs"].items():
            table.add_row(f"[bold]{name}[/] (weight {env['weight']:g})", _figures(env, keys))
            for stage, figures in env.get("stages", {}).items():
                table.add_row(f"  {name} · stage {stage}", _figures(figures, keys))
    table.add_row(
        "re-tokenizing drift",
        f"{summary['bridge_mismatches']} bridge mismatches, "
        f"{summary['noncanonical_turns']} non-canonical turns",
    )
    table.add_row("time", f"{summary['seconds']} s")
    if summary["out"]:
        table.add_row("records", summary["out"])
    console = streams.console()  # on a pipe or in a log, as wide as the table: paths whole
    console.print(table)
    if summary["bridge_mismatches"] or summary["noncanonical_turns"]:
        console.print(DRIFT_NOTE, style="dim")


# Why drift counters are not errors: said under the table whenever one is non-zero.
DRIFT_NOTE = (
    "Re-tokenizing drift: trl-env trains on the ids it sampled and inserted, so these cost it "
    "nothing. They count where a pipeline that re-tokenizes the text would differ: bridge "
    "mismatches are inserted pieces (prompt, env replies) whose ids differ from tokenizing the "
    "whole text; non-canonical turns are sampled turns that do not re-encode to the same ids."
)


def _figures(figures: dict[str, Any], keys: tuple[str, ...]) -> str:
    shown = " · ".join(f"{k.replace('_', ' ')} {_shown(figures[k])}" for k in keys[:4])
    return f"{shown} · {_statuses(figures['status'])}"


def _shown(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


class _progress:
    """A rich progress bar over episodes, with the turns played so far beside it (the episodes
    of a batch often end together, so turns show the progress within one); silent for JSON."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self.bar: Any = None
        self.task: Any = None
        self.played = 0

    def __enter__(self) -> _progress:
        if self.quiet:
            return self
        # Time left from the whole run's pace (rich's default looks at the last 30 s only).
        self.bar = streams.progress_bar(
            "episodes",
            "{task.fields[turns]} turns",
            transient=True,
            speed_estimate_period=7 * 24 * 3600,
        )
        self.bar.start()
        self.task = self.bar.add_task("episodes", total=self.total, turns=0)
        return self

    def episode(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def turns(self, count: int) -> None:
        self.played += count
        if self.bar is not None:
            self.bar.update(self.task, turns=self.played)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
