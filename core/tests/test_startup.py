"""The light commands stay light: no torch, transformers or trl at start-up.

Each case runs the real ``trl-env`` script under ``python -X importtime`` and reads every module
it imported from stderr, so a heavy import added anywhere (a new command module, a plugin, a
default value) fails here with the chain of imports that pulled it in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from trl_env.cli.main import _SUMMARIES, cli
from trl_env.testing.fake_dist import console_script, run_cli

HEAVY = {"torch", "transformers", "trl", "vllm"}
# Not needed to start: rich draws tables for the training commands only.
SLOW_TO_IMPORT = {"rich"}


def imported_modules(*args: str, cwd: Path | None = None) -> tuple[list[str], str]:
    """Modules imported by ``trl-env ARGS`` (in import order) and the command's stdout."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", console_script(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = [
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    ]
    assert "trl_env.cli.main" in modules  # the parse found the real import log
    return modules, proc.stdout


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["list"],
        ["list", "--json"],
        ["list", "--env", "guess"],
        ["new", "--help"],
    ],
)
def test_light_commands_import_no_training_stack(args):
    modules, _ = imported_modules(*args)
    assert heavy(modules) == [], f"trl-env {' '.join(args)} imported {heavy(modules)[:5]}"


def test_every_command_help_imports_no_training_stack():
    # `trl-env --help` imports every command module, so each must keep heavy imports inside
    # its function body; `CMD --help` also evaluates option defaults.
    for name in cli.list_commands(click.Context(cli)):
        modules, out = imported_modules(name, "--help")
        assert "Usage:" in out
        assert heavy(modules) == [], f"trl-env {name} --help imported {heavy(modules)[:5]}"


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "--json"], ["--version"]])
def test_start_up_imports_no_rich(args):
    modules, _ = imported_modules(*args)
    slow = [m for m in modules if m.split(".")[0] in SLOW_TO_IMPORT]
    assert slow == [], f"trl-env {' '.join(args)} imported {slow[:5]}"


def loaded_modules(*args: str) -> set[str]:
    """``sys.modules`` when ``trl-env ARGS`` exits (``-X importtime`` misses import_module)."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "from trl_env.cli import main\n"
        f"sys.argv = ['trl-env', *{list(args)!r}]\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_a_command_imports_only_its_own_command_module():
    commands = {m for m in loaded_modules("list", "--json") if m.endswith("_cmd")}
    assert commands == {"trl_env.cli.list_cmd"}


def test_new_package_imports_no_training_stack(tmp_path):
    modules, out = imported_modules("new", "env", "light", "--dir", str(tmp_path / "pkg"))
    assert "Created trl-env-light" in out
    assert heavy(modules) == []


def test_version_is_the_installed_distribution_version():
    import importlib.metadata as md

    proc = subprocess.run(
        [console_script(), "--version"], capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == f"trl-env, version {md.version('trl-env')}"


def test_help_summaries_match_each_commands_own_help():
    # `trl-env --help` lists built-in commands from main._SUMMARIES without importing them; a
    # command whose docstring changed must have its summary changed too.
    ctx = click.Context(cli)
    for name, summary in _SUMMARIES.items():
        cmd = cli.get_command(ctx, name)
        assert cmd is not None, name
        for limit in (45, 70, 200):
            listed = click.Command(name, help=summary).get_short_help_str(limit)
            assert listed == cmd.get_short_help_str(limit), (
                f"update _SUMMARIES[{name!r}] in trl_env/cli/main.py to the first paragraph "
                f"of the command's help: {(cmd.help or '').split(chr(10) * 2)[0]!r}"
            )


def test_help_lists_every_command_without_importing_one():
    names = cli.list_commands(click.Context(cli))
    assert set(_SUMMARIES) <= set(names)
    loaded = loaded_modules("--help")
    assert {m for m in loaded if m.endswith("_cmd")} == set()
    out = run_cli("--help").stdout
    assert all(f"  {name} " in out for name in _SUMMARIES)


def test_completing_a_command_that_needs_a_missing_stack_still_completes(monkeypatch):
    # The shell runs completion on each key: it must list train's options, not say (on the
    # terminal, mid-line) what to install; running the command still says it.
    from click.testing import CliRunner

    from trl_env.cli.main import _NEEDS

    monkeypatch.setitem(_NEEDS, "train", ("no_such_module_here",))
    runner = CliRunner()
    env = {
        "_TRL_ENV_COMPLETE": "bash_complete",
        "COMP_WORDS": "trl-env train --",
        "COMP_CWORD": "2",
    }
    done = runner.invoke(cli, [], env=env, prog_name="trl-env")
    assert done.exit_code == 0, done.output
    assert "plain,--env" in done.output.split() and "Error" not in done.output
    ran = runner.invoke(cli, ["train", "--env", "guess"], prog_name="trl-env")
    assert ran.exit_code == 2 and "no_such_module_here is not installed" in ran.output
