"""`trl-env openenv URL`: the command this package adds through the trl_env.plugins hook."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRL_ENV = str(Path(sys.executable).parent / "trl-env")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TRL_ENV, *args], capture_output=True, text=True, timeout=120)


def test_the_command_is_added_and_listed() -> None:
    listed = json.loads(run("list", "--json").stdout)
    assert {"kind": "plugin", "name": "openenv", "distribution": "trl-env-openenv"}.items() <= next(
        row for row in listed if row["kind"] == "plugin" and row["name"] == "openenv"
    ).items()
    assert "openenv" in run("--help").stdout


def test_probe_of_a_real_server(game_url: str) -> None:
    result = run(
        "openenv",
        game_url,
        "--seed",
        "3",
        "--action",
        "5",
        "--env-arg",
        "observation_field=text",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout)
    assert probe["observation"].startswith("Guess a number from 1 to")
    assert probe["reply"] and probe["url"] == game_url


def test_probe_of_nothing_is_one_sentence(refused_url: str) -> None:
    result = run("openenv", refused_url, "--env-arg", "retries=0")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: Could not reach the OpenEnv server at")
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
