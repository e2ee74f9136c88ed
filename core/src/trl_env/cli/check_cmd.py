"""``trl-env check``: does a processor fit a tokenizer? Exit 0 if so, 1 if not, 2 on bad usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..errors import PluginLoadError, PluginNotFoundError, TrlEnvError, UsageError
from ..protocols import Tokenizer
from .options import json_option, parse_kv, processor_options
from .precheck import looks_local, missing_path


def load_processor(name: str, tokenizer: Tokenizer | None, options: dict[str, Any]) -> Any:
    """The processor, with an unknown name or bad options reported as usage errors."""
    from ..registry import load_processor as load

    try:
        return load(name, tokenizer=tokenizer, **options)
    except PluginNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    except PluginLoadError as exc:
        if isinstance(exc.__cause__, TypeError):  # the factory refused the options
            raise UsageError(str(exc)) from exc
        raise


# What `check --tokenizer` accepts in place of a hub id, for the offline message
TOKENIZER_INSTEAD = (
    "pass --tokenizer a local directory, a GGUF file or `smollm2`, or leave it out to check the "
    "family's tiny tokenizer"
)


def load_tokenizer_for(tokenizer: str | None, processor: Any) -> tuple[Any, str]:
    """The tokenizer asked for, or the processor family's tiny one; and a name to show."""
    from ..models import load_tokenizer, model_path
    from ..tiny import TINY, TinySpec

    if tokenizer in (None, "", TINY) and not isinstance(
        getattr(processor, "tiny_spec", None), TinySpec
    ):
        raise UsageError(
            f"{type(processor).__name__} has no tiny model (no tiny_spec); "
            "pass --tokenizer with a tokenizer id or directory."
        )
    if tokenizer and looks_local(tokenizer) and not Path(tokenizer).expanduser().exists():
        raise UsageError(missing_path("--tokenizer", tokenizer))
    if tokenizer and looks_local(tokenizer) and not _is_model_path(tokenizer):
        raise UsageError(f"--tokenizer {tokenizer!r}: no such directory or GGUF file.")
    if tokenizer and not looks_local(tokenizer) and tokenizer not in (TINY, "smollm2"):
        from ..hub import check_reachable

        # offline: one sentence now, not a minute of retries; naming what check itself takes
        check_reachable(tokenizer, instead=TOKENIZER_INSTEAD)
    path = tokenizer
    try:
        path = model_path(tokenizer, processor)  # a GGUF file is converted here, once
        loaded = load_tokenizer(path)
    except TrlEnvError as exc:  # already says "Could not load a tokenizer from ...": keep it
        raise UsageError(_one_line(str(exc))) from exc
    except Exception as exc:  # hub errors, bad files: all about the argument given
        reason = _one_line(str(exc))
        raise UsageError(f"Could not load a tokenizer from {path!r}: {reason}") from exc
    return loaded, tokenizer or f"tiny ({path})"


def _one_line(text: str) -> str:
    """Library errors run to several lines; the CLI prints one."""
    return " ".join(text.split())


def _is_model_path(text: str) -> bool:
    path = Path(text).expanduser()
    return path.is_dir() or (path.is_file() and path.suffix.lower() == ".gguf")


@click.command("check")
@processor_options
@click.option(
    "--tokenizer",
    "tokenizer_id",
    default=None,
    metavar="ID_OR_PATH",
    help="Hub id, local directory, GGUF file or `smollm2` (default: the family's tiny tokenizer).",
)
@json_option("the report")
@click.pass_context
def check_cmd(
    ctx: click.Context,
    processor_name: str,
    tokenizer_id: str | None,
    processor_args: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check that a processor renders exactly what a tokenizer's chat template renders.

    Renders sample multi-turn conversations both ways and reports: the text, equal or where it
    first differs; whether each inserted segment tokenizes alone as it does in the whole text
    (and BOS is not doubled); that env text spelling a special token stays plain text (the
    rollout option env_special_tokens allows it); whether sample text re-encodes to itself; the
    stop tokens and their ids. Exit status 0 when they fit, 1 when they do not, 2 on a usage error.
    """
    from ..checks import check_processor
    from .quiet import quiet_libraries

    quiet_libraries()  # the hub's retry warnings are not this command's output
    options = parse_kv(processor_args, "--processor-arg")
    probe = load_processor(processor_name, None, options)
    tokenizer, tokenizer_name = load_tokenizer_for(tokenizer_id, probe)
    processor = load_processor(processor_name, tokenizer, options)
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
    report = check_processor(
        processor,
        tokenizer,
        name=f"{processor_name} ({shown})" if shown else processor_name,
        tokenizer_name=tokenizer_name,
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        _print_report(report)
        # what would fit, as train and eval say when they refuse; where one of this processor's
        # options fits, the report has named it (other processors are not the advice then)
        if not report.ok and not report.fits_with:
            from ..resolve import suggestion

            click.echo(suggestion(tokenizer, processor_name))
    ctx.exit(0 if report.ok else 1)


def _print_report(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(f"Processor [bold]{report.processor}[/] on tokenizer [bold]{report.tokenizer}[/]")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for item in report.items:
        if item.ok:
            mark = Text("ok", style="green")
        elif item.required:
            mark = Text("FAIL", style="bold red")
        else:
            mark = Text("note", style="yellow")
        table.add_row(mark, item.name, Text(item.detail))
    console.print(table)
    if report.first_difference:
        console.print(Text(f"First difference {report.first_difference}", style="red"))
    console.print(Text(report.message, style="bold green" if report.ok else "bold red"))
