"""Tables printed to a log or a pipe keep their paths whole (rich cuts them at 80 columns when
the output is not a terminal, its fallback width)."""

from __future__ import annotations

import io

from rich.table import Table

from trl_env import streams


def test_a_table_in_a_log_is_as_wide_as_its_longest_path() -> None:
    path = "/runs/" + "/".join(f"folder-{n}" for n in range(20)) + "/checkpoint-40"
    table = Table(title="Trained tiny on guess (qwen3)", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    table.add_row("checkpoint", path)
    log = io.StringIO()
    streams.console(log).print(table)
    assert any(path in line for line in log.getvalue().splitlines()), log.getvalue()
