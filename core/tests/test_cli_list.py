"""``trl-env list`` and the CLI's handling of user errors, in-process and via the real script."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

import trl_env
from trl_env.cli.main import cli
from trl_env.testing.fake_dist import run_cli

HOOK_PLUGIN = """
import click
import trl_env
from trl_env.hookspecs import hookimpl


@hookimpl
def register_commands(cli):
    @cli.command("fake-load")
    @click.argument("kind")
    @click.argument("name")
    def load(kind, name):
        '''Resolve a plugin by name, as train and eval do.'''
        made = trl_env.load_env(name) if kind == "env" else trl_env.load_processor(name)
        click.echo(type(made).__name__)
"""

NO_STEP = """
class NoStep:
    reward = 0.0
    alive = True

    def reset(self, seed):
        return "no step method"
"""


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def rows_by_name(output: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for row in json.loads(output):
        out.setdefault(row["name"], []).append(row)
    return out


@pytest.fixture
def hook_plugin(fake_distribution):
    fake_distribution(
        "trl-env-fakeload",
        "0.4",
        plugins={"fakeload": "fake_load_plugin"},
        modules={"fake_load_plugin": HOOK_PLUGIN},
    )


# -- in-process ------------------------------------------------------------------------------
def test_json_describes_envs_processors_and_plugins(env_dist, processor_dist, hook_plugin):
    env_dist("trl-env-jsonenv", "jsonenv", version="2.3")
    processor_dist("trl-env-jsonproc", "jsonproc", version="0.1.dev1")
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    rows = rows_by_name(result.stdout)
    expected = {
        "jsonenv": ("env", "trl-env-jsonenv", "2.3"),
        "jsonproc": ("processor", "trl-env-jsonproc", "0.1.dev1"),
        "fakeload": ("plugin", "trl-env-fakeload", "0.4"),
    }
    for name, (kind, dist, version) in expected.items():
        (row,) = rows[name]
        assert (row["kind"], row["distribution"], row["version"]) == (kind, dist, version)
        assert row["status"] == "ok"
    assert rows["jsonenv"][0]["value"] == "fake_trl_env_jsonenv:CountEnv"


def test_a_plugin_that_cannot_import_is_still_listed_and_not_imported(env_dist):
    env_dist("trl-env-broken", "broken", source="import trl_env_test_missing_dependency\n")
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    (row,) = rows_by_name(result.stdout)["broken"]
    assert row["distribution"] == "trl-env-broken"
    assert "fake_trl_env_broken" not in sys.modules  # listing read metadata only


def test_a_name_in_two_distributions_is_a_conflict_on_both_rows(env_dist):
    env_dist("trl-env-twin-a", "twin")
    env_dist("trl-env-twin-b", "twin", version="9.0")
    rows = rows_by_name(invoke("list", "--json").stdout)["twin"]
    assert {r["distribution"] for r in rows} == {"trl-env-twin-a", "trl-env-twin-b"}
    assert all(r["status"].startswith("conflict") for r in rows)


def test_in_process_registrations_are_listed():
    trl_env.register_env("listed-local", lambda: None)
    (row,) = rows_by_name(invoke("list", "--json").stdout)["listed-local"]
    assert row["kind"] == "env" and row["distribution"] == "(registered in-process)"


def test_a_hook_plugin_that_failed_to_load_shows_why(fake_distribution):
    fake_distribution(
        "trl-env-badplug",
        plugins={"badplug": "fake_bad_plugin"},
        modules={"fake_bad_plugin": "raise ImportError('needs a GPU driver')\n"},
    )
    (row,) = rows_by_name(invoke("list", "--json").stdout)["badplug"]
    assert "needs a GPU driver" in row["status"]


def test_table_shows_each_kind_with_distribution_version_and_status(env_dist, processor_dist):
    env_dist("trl-env-tabled", "tabled", version="1.2.3")
    env_dist("trl-env-twin-a", "twin")
    env_dist("trl-env-twin-b", "twin")
    processor_dist("trl-env-tabproc", "tabproc")
    result = invoke("list")
    assert result.exit_code == 0, result.output
    assert "Environments" in result.output and "Processors" in result.output
    line = next(x for x in result.output.splitlines() if "tabled" in x)
    assert "trl-env-tabled" in line and "1.2.3" in line and "ok" in line
    assert "conflict" in next(x for x in result.output.splitlines() if "trl-env-twin-b" in x)
    assert "trl-env-tabproc" in result.output


# -- the real console script -----------------------------------------------------------------
def test_real_script_lists_fake_distributions_as_json(env_dist, fake_distribution):
    env_dist("trl-env-subenv", "subenv", version="3.1")
    fake_distribution(
        "trl-env-badplug",
        plugins={"badplug": "fake_bad_plugin"},
        modules={"fake_bad_plugin": "raise ImportError('needs a GPU driver')\n"},
    )
    result = fake_distribution.run_cli("list", "--json")
    assert result.returncode == 0, result.stderr
    rows = rows_by_name(result.stdout)
    assert rows["subenv"][0]["distribution"] == "trl-env-subenv"
    assert rows["subenv"][0]["version"] == "3.1"
    assert "needs a GPU driver" in rows["badplug"][0]["status"]
    assert "trl-env-badplug" in rows["badplug"][0]["status"]


def test_real_script_prints_the_table(env_dist, fake_distribution):
    env_dist("trl-env-subenv", "subenv")
    result = fake_distribution.run_cli("list")
    assert result.returncode == 0, result.stderr
    assert "subenv" in result.stdout and "Environments" in result.stdout


ERROR_CASES = {
    "unknown": (["env", "nope-not-here"], ["Unknown environment 'nope-not-here'", "nostep"]),
    "broken": (
        ["env", "broken"],
        ["trl-env-broken", "trl_env.envs:broken", "trl_env_test_missing_dependency"],
    ),
    "duplicate": (["env", "twin"], ["trl-env-twin-a", "trl-env-twin-b"]),
    "not an env": (["env", "nostep"], ["NoStep", "lacks step"]),
    "unknown processor": (
        ["processor", "qwen-nope"],
        ["Unknown processor 'qwen-nope'", "Installed processors:"],
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_user_errors_are_one_line_on_stderr(case, hook_plugin, env_dist, fake_distribution):
    env_dist("trl-env-broken", "broken", source="import trl_env_test_missing_dependency\n")
    env_dist("trl-env-twin-a", "twin")
    env_dist("trl-env-twin-b", "twin")
    env_dist("trl-env-nostep", "nostep", source=NO_STEP, attr="NoStep")
    args, fragments = ERROR_CASES[case]
    result = fake_distribution.run_cli("fake-load", *args)
    # A name the user typed wrong is a usage error (2); a broken plugin is not the user's (1).
    expected = 2 if case.startswith("unknown") else 1
    assert result.returncode == expected, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [(["list", "--bogus"], "No such option"), (["no-such-command"], "No such command")],
)
def test_usage_errors_exit_2_without_a_traceback(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_env_options_are_listed_as_declared():
    from trl_env import Option, option_specs
    from trl_env.envkit import EnvKit
    from trl_env.registry import register_env

    class Levels(EnvKit):
        """A kit env with two options, registered in this process."""

        size = Option(3, "board size", min=2, max=9)
        mode = Option("easy", "how hard", choices=("easy", "hard"))

        def on_reset(self, seed: str) -> str:
            return "start"

        def on_step(self, action: str) -> str:
            return "ok"

    register_env("listed-levels", Levels)
    result = CliRunner().invoke(cli, ["list", "--env", "listed-levels", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    specs = option_specs(Levels)
    assert [(s["name"], s["default"], s["accepted"]) for s in shown] == [
        (s.name, s.default, s.accepted) for s in specs
    ]
    assert [s["name"] for s in shown] == ["size", "mode"]
    table = CliRunner().invoke(cli, ["list", "--env", "listed-levels"]).output
    assert "an integer from 2 to 9" in table and "one of easy, hard" in table
    unknown = CliRunner().invoke(cli, ["list", "--env", "no-such-env"])
    assert unknown.exit_code != 0 and "Unknown environment 'no-such-env'" in unknown.output


def test_a_long_list_of_choices_wraps_in_its_column():
    from trl_env import Option
    from trl_env.envkit import EnvKit
    from trl_env.registry import register_env

    games = tuple(f"Game{i}-v0-very-long-variant" for i in range(40))

    class Library(EnvKit):
        """An env wrapping a library of many games, registered in this process."""

        game = Option(games[0], "the game to play", choices=games)

        def on_reset(self, seed: str) -> str:
            return "start"

        def on_step(self, action: str) -> str:
            return "ok"

    register_env("listed-library", Library)
    table = CliRunner().invoke(cli, ["list", "--env", "listed-library"]).output
    lines = table.splitlines()
    assert max(len(line) for line in lines) < 160, table
    flat = " ".join(line.strip() for line in lines)
    assert all(game in flat for game in games)  # every choice shown, none cut at a hyphen
    (first,) = [line for line in lines if line.lstrip().startswith("game ")]
    assert first.rstrip().endswith("the game to play")
