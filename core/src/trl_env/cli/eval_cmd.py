"""``trl-env eval``: play episodes on the env's evaluation seeds and summarise them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from .options import env_options, model_option, parse_kv, processor_options


@click.command("eval")
@env_options
@processor_options
@model_option
@click.option("--episodes", default=32, show_default=True, help="Number of evaluation episodes.")
@click.option("--batch-size", default=32, show_default=True, help="Episodes played at once.")
@click.option(
    "--max-turns", type=int, default=None, help="Turn limit (default: the env's own, else 8)."
)
@click.option("--max-new-tokens", default=256, show_default=True, help="Token limit per turn.")
@click.option(
    "--max-episode-tokens", default=4096, show_default=True, help="Token budget per episode."
)
@click.option("--temperature", default=1.0, show_default=True, help="0 for greedy decoding.")
@click.option("--top-p", default=1.0, show_default=True)
@click.option("--top-k", default=0, show_default=True, help="0 turns it off.")
@click.option("--seed", default=0, show_default=True, help="Sampling seed.")
@click.option("--step-timeout", default=60.0, show_default=True, help="Seconds per env step.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append one JSON record per episode, flushed as each ends.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def eval_cmd(
    env_name: str,
    env_args: tuple[str, ...],
    processor_name: str,
    processor_args: tuple[str, ...],
    model: str,
    episodes: int,
    batch_size: int,
    out: Path | None,
    as_json: bool,
    **sampling: Any,
) -> None:
    """Play EPISODES episodes of an environment with a model and print a summary.

    Uses the env's evaluation seeds (disjoint from its training seeds).

    \b
    Example:
      trl-env eval --env guess --processor qwen3 --episodes 16 --out eval.jsonl
    """
    from .quiet import quiet_libraries

    quiet_libraries()
    from .. import extras
    from ..errors import UsageError
    from ..models import load_model
    from ..registry import env_factory
    from ..resolve import resolve_stack
    from ..rollout import RolloutConfig, batch_rollout

    if episodes < 1 or batch_size < 1:
        raise UsageError("--episodes and --batch-size must be at least 1.")
    make_env = env_factory(env_name, **parse_kv(env_args, "--env-arg"))
    probe = make_env()
    seeds = extras.seeds(probe, "eval", episodes)
    extras.close(probe)
    stack = resolve_stack(processor_name, parse_kv(processor_args, "--processor-arg"), model)
    config = RolloutConfig(**sampling).validate()
    llm = load_model(stack.model_path)
    records: list[dict[str, Any]] = []
    sink = out.open("a", encoding="utf-8") if out else None
    start = time.perf_counter()
    try:
        with _progress(episodes, as_json) as advance:

            def record(ep: Any) -> None:
                rec = ep.to_dict()
                records.append(rec)
                if sink:
                    sink.write(json.dumps(rec) + "\n")
                    sink.flush()
                advance()

            for lo in range(0, episodes, batch_size):
                batch_rollout(
                    seeds[lo : lo + batch_size],
                    env=make_env,
                    processor=stack.processor,
                    tokenizer=stack.tokenizer,
                    model=llm,
                    config=config,
                    on_episode=record,
                )
    finally:
        if sink:
            sink.close()
    summary = summarize(records, time.perf_counter() - start)
    summary.update(env=env_name, processor=processor_name, model=model, out=str(out or ""))
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)


def summarize(records: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Mean reward, status counts, mean turns and token counts over episode records."""
    n = max(len(records), 1)
    statuses: dict[str, int] = {}
    for rec in records:
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
    return {
        "episodes": len(records),
        "mean_reward": sum(r["reward"] for r in records) / n,
        "status": statuses,
        "mean_turns": sum(r["turns"] for r in records) / n,
        "sampled_tokens": sum(r["sampled_tokens"] for r in records),
        "inserted_tokens": sum(r["inserted_tokens"] for r in records),
        "bridge_mismatches": sum(r["bridge_mismatches"] for r in records),
        "noncanonical_turns": sum(r["noncanonical_turns"] for r in records),
        "seconds": round(seconds, 2),
    }


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['env']} with {summary['processor']} ({summary['model']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("episodes", "mean_reward", "mean_turns", "sampled_tokens", "inserted_tokens"):
        value = summary[key]
        table.add_row(
            key.replace("_", " "), f"{value:.3f}" if isinstance(value, float) else str(value)
        )
    table.add_row("status", ", ".join(f"{k} {v}" for k, v in sorted(summary["status"].items())))
    table.add_row(
        "drift",
        f"{summary['bridge_mismatches']} bridge mismatches, "
        f"{summary['noncanonical_turns']} non-canonical turns",
    )
    table.add_row("time", f"{summary['seconds']} s")
    if summary["out"]:
        table.add_row("records", summary["out"])
    Console().print(table)


class _progress:
    """A rich progress bar over episodes (silent when printing JSON)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet

    def __enter__(self) -> Any:
        if self.quiet:
            return lambda: None
        from rich.progress import Progress

        self.bar = Progress(transient=True)
        self.bar.start()
        task = self.bar.add_task("episodes", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if not self.quiet:
            self.bar.stop()
