"""The light commands stay light: no torch, transformers or trl at start-up.

Each case runs the real ``trl-env`` script under ``python -X importtime`` and reads every module
it imported from stderr, so a heavy import added anywhere (a new command module, a plugin, a
default value) fails here with the chain of imports that pulled it in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trl_env.cli.main import cli
from trl_env.testing.fake_dist import console_script

HEAVY = {"torch", "transformers", "trl", "vllm"}


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
    "args", [["--help"], ["--version"], ["list"], ["list", "--json"], ["new", "--help"]]
)
def test_light_commands_import_no_training_stack(args):
    modules, _ = imported_modules(*args)
    assert heavy(modules) == [], f"trl-env {' '.join(args)} imported {heavy(modules)[:5]}"


def test_every_command_help_imports_no_training_stack():
    # `trl-env --help` imports every command module, so each must keep heavy imports inside
    # its function body; `CMD --help` also evaluates option defaults.
    for name in sorted(cli.commands):
        modules, out = imported_modules(name, "--help")
        assert "Usage:" in out
        assert heavy(modules) == [], f"trl-env {name} --help imported {heavy(modules)[:5]}"


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
