"""Hook plugins (``trl_env.plugins`` entry points): backends, CLI commands, lifecycle hooks.

A broken plugin must cost only itself: the CLI and every other plugin keep working.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from trl_env import hookspecs
from trl_env.errors import DuplicatePluginError, PluginNotFoundError
from trl_env.plugins import manager
from trl_env.testing.fake_dist import console_script, run_cli

GOOD_PLUGIN = """
import click
from trl_env.hookspecs import hookimpl


@hookimpl
def register_commands(cli):
    @cli.command("fake-hello")
    @click.argument("who", default="world")
    def hello(who):
        '''Say hello (added by a plugin).'''
        click.echo(f"hello {who}")


@hookimpl
def register_backends(register):
    register("fake-backend", lambda context: ("fake-backend", context))
"""

BROKEN_COMMANDS = """
from trl_env.hookspecs import hookimpl


@hookimpl
def register_commands(cli):
    raise RuntimeError("commands exploded")
"""

BAD_SIGNATURE = """
from trl_env.hookspecs import hookimpl


@hookimpl
def register_commands(cli, colour):
    pass
"""

SAME_BACKEND = """
from trl_env.hookspecs import hookimpl


@hookimpl
def register_backends(register):
    register("fake-backend", lambda context: "other")
"""


@pytest.fixture
def plugin_dist(fake_distribution):
    """``plugin_dist(dist, source)``: one hook plugin named after its distribution."""

    def make(dist: str, source: str) -> str:
        name = dist.removeprefix("trl-env-")
        module = "fake_" + dist.replace("-", "_")
        fake_distribution(dist, plugins={name: module}, modules={module: source})
        return name

    return make


def commands_of(*, add_to: click.Group | None = None) -> click.Group:
    """A fresh command group with every loaded plugin's commands (the real CLI is global)."""
    group = add_to or click.Group("trl-env")
    pm = manager()
    pm.load_entry_points()
    pm.add_commands(group)
    return group


# -- generation backends ---------------------------------------------------------------------
def test_a_plugin_registers_a_backend(plugin_dist):
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    pm = manager()
    assert pm.backend("fake-backend")("ctx") == ("fake-backend", "ctx")
    assert "transformers" in pm.backends()  # the built-in one is still there


def test_unknown_backend_lists_the_available_ones(plugin_dist):
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    with pytest.raises(PluginNotFoundError) as info:
        manager().backend("vllm-nope")
    assert "Unknown generation backend 'vllm-nope'" in str(info.value)
    assert "Did you mean 'vllm'?" in str(info.value)
    assert "fake-backend" in str(info.value) and "transformers" in str(info.value)


def test_two_plugins_with_one_backend_name_is_an_error_naming_both(plugin_dist):
    first = plugin_dist("trl-env-back-one", GOOD_PLUGIN)
    second = plugin_dist("trl-env-back-two", SAME_BACKEND)
    with pytest.raises(DuplicatePluginError) as info:
        manager().backend("fake-backend")
    assert "'fake-backend'" in str(info.value)
    assert first in str(info.value) and second in str(info.value)


# -- broken plugins --------------------------------------------------------------------------
def test_import_failure_is_recorded_with_distribution_entry_point_and_cause(plugin_dist):
    broken = plugin_dist("trl-env-brokenplug", "import trl_env_test_missing_dependency\n")
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    pm = manager()
    pm.load_entry_points()
    failure = pm.failures[broken]
    assert "trl-env-brokenplug" in failure and "fake_trl_env_brokenplug" in failure
    assert "ModuleNotFoundError" in failure and "trl_env_test_missing_dependency" in failure
    assert pm.backend("fake-backend")("ctx") == ("fake-backend", "ctx")


def test_unknown_backend_mentions_the_plugins_that_failed_to_load(plugin_dist):
    # The backend the user asks for may live in the plugin that failed: say so, with the cause.
    plugin_dist("trl-env-vllmish", "import trl_env_test_missing_dependency\n")
    with pytest.raises(PluginNotFoundError) as info:
        manager().backend("vllmish")
    assert "trl-env-vllmish" in str(info.value)
    assert "trl_env_test_missing_dependency" in str(info.value)


def test_a_hook_with_a_wrong_signature_is_a_recorded_failure(plugin_dist):
    bad = plugin_dist("trl-env-badsig", BAD_SIGNATURE)
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    pm = manager()
    pm.load_entry_points()
    assert "colour" in pm.failures[bad]
    group = commands_of()
    assert "fake-hello" in group.commands


@pytest.mark.parametrize("broken_first", [True, False])
def test_a_raising_register_commands_does_not_stop_the_other_plugins(plugin_dist, broken_first):
    # Hook order follows sys.path order, so try the broken plugin on both sides of the good one.
    dists = [("trl-env-badcmds", BROKEN_COMMANDS), ("trl-env-goodcmds", GOOD_PLUGIN)]
    for dist, source in dists if broken_first else dists[::-1]:
        plugin_dist(dist, source)
    group = commands_of(add_to=click.Group("trl-env"))
    assert "fake-hello" in group.commands
    assert "commands exploded" in manager().failures["badcmds"]
    result = CliRunner().invoke(group, ["fake-hello", "ada"])
    assert result.exit_code == 0 and result.output == "hello ada\n"


# -- commands --------------------------------------------------------------------------------
def test_a_plugin_adds_a_command(plugin_dist):
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    result = CliRunner().invoke(commands_of(), ["fake-hello", "ada"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello ada\n"


def test_the_real_cli_runs_a_plugin_command(plugin_dist, fake_distribution):
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    result = fake_distribution.run_cli("fake-hello", "grace")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello grace\n"
    listed = fake_distribution.run_cli("--help")
    assert "fake-hello" in listed.stdout and "Say hello" in listed.stdout


def test_the_real_cli_survives_broken_plugins_and_names_them(plugin_dist, fake_distribution):
    plugin_dist("trl-env-badcmds", BROKEN_COMMANDS)
    plugin_dist("trl-env-brokenplug", "raise ImportError('plugin import exploded')\n")
    plugin_dist("trl-env-goodcmds", GOOD_PLUGIN)
    result = fake_distribution.run_cli("fake-hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello world\n"
    assert "Traceback" not in result.stderr
    # The warning says which plugin failed, so the user knows what to fix or uninstall.
    assert "badcmds" in result.stderr and "commands exploded" in result.stderr
    for args in (["--help"], ["--version"], ["list"]):
        assert fake_distribution.run_cli(*args).returncode == 0, args
    rows = {r["name"]: r for r in json.loads(fake_distribution.run_cli("list", "--json").stdout)}
    assert "failed in register_commands" in rows["badcmds"]["status"]
    assert "plugin import exploded" in rows["brokenplug"]["status"]
    assert rows["goodcmds"]["status"] == "ok"


# -- lifecycle hooks -------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @hookspecs.hookimpl
    def on_train_begin(self, config: dict[str, Any]) -> None:
        self.calls.append(("begin", config))

    @hookspecs.hookimpl
    def on_episode_end(self, episode: dict[str, Any]) -> None:
        self.calls.append(("episode", episode))

    @hookspecs.hookimpl
    def on_train_end(self, summary: dict[str, Any]) -> None:
        self.calls.append(("end", summary))


def test_lifecycle_hooks_reach_a_plugin_registered_in_process():
    manager.cache_clear()
    pm = manager()
    recorder = Recorder()
    pm.register(recorder, name="recorder")
    try:
        pm.train_begin({"env": "guess"})
        pm.episode_end({"reward": 1.0})
        pm.train_end({"steps": 2})
    finally:
        pm.unregister("recorder")
        manager.cache_clear()
    assert recorder.calls == [
        ("begin", {"env": "guess"}),
        ("episode", {"reward": 1.0}),
        ("end", {"steps": 2}),
    ]


# -- the hook specs are documented -----------------------------------------------------------
def hook_specs() -> list[tuple[str, str]]:
    return [
        (name, f"{name}{inspect.signature(func)}".replace("'", ""))
        for name, func in vars(hookspecs).items()
        if hasattr(func, "trl_env_spec")
    ]


def test_there_are_hook_specs():
    assert {name for name, _ in hook_specs()} >= {"register_commands", "register_backends"}


def test_every_hook_spec_is_documented_with_its_signature():
    contributing = Path(__file__).resolve().parents[2] / "CONTRIBUTING.md"
    text = re.sub(r"\s+", " ", contributing.read_text())
    for _, signature in hook_specs():
        assert f"`{signature}`" in text, f"CONTRIBUTING.md must document {signature}"


# -- plugins cannot take the CLI down --------------------------------------------------------
HANGS = "import time\ntime.sleep(600)\n"
EXITS = "import sys\nsys.exit(0)\n"


@pytest.mark.parametrize(
    ("source", "why"),
    [(EXITS, "called sys.exit(0) while importing"), ("raise ValueError('bad')\n", "bad")],
)
def test_a_plugin_that_exits_or_raises_at_import_is_one_warning_and_the_cli_goes_on(
    plugin_dist, fake_distribution, source, why
):
    bad = plugin_dist("trl-env-badimport", source)
    plugin_dist("trl-env-goodcmds", GOOD_PLUGIN)
    for args, out in ((["fake-hello", "ada"], "hello ada\n"), (["list", "--json"], None)):
        result = fake_distribution.run_cli(*args)
        assert result.returncode == 0, result.stderr
        assert out is None or result.stdout == out
        warnings = [line for line in result.stderr.splitlines() if "trl-env-badimport" in line]
        assert len(warnings) == 1 and why in warnings[0], result.stderr
        assert "Traceback" not in result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert why in rows[bad]["status"] and rows["goodcmds"]["status"] == "ok"


def test_a_hung_plugin_import_is_named_while_it_loads_and_then_left_out(
    plugin_dist, fake_distribution
):
    plugin_dist("trl-env-hangs", HANGS)
    plugin_dist("trl-env-goodcmds", GOOD_PLUGIN)
    env = fake_distribution.env(TRL_ENV_PLUGIN_TIMEOUT="1.5")
    started = time.monotonic()
    proc = subprocess.Popen(
        [console_script(), "--help"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # printed while the import is still hanging
    assert "still importing plugin 'hangs'" in first and "trl-env-hangs" in first
    assert proc.poll() is None
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert time.monotonic() - started < 30  # not the plugin's 600 s
    assert "fake-hello" in out  # the good plugin's command is there
    assert "trl-env-hangs" in err and "did not finish in 1.5 s" in err


HANGS_IN_HOOK = """
import threading
from trl_env.hookspecs import hookimpl

release = threading.Event()
calls = 0


@hookimpl
def register_env_hosts(register):
    global calls
    calls += 1
    register("half-made", object)
    release.wait(600)
"""


def test_a_register_hook_that_never_returns_is_left_out_after_its_deadline(
    plugin_dist, monkeypatch, capfd
):
    import sys

    name = plugin_dist("trl-env-hostshang", HANGS_IN_HOOK)
    monkeypatch.setenv("TRL_ENV_PLUGIN_TIMEOUT", "1")
    manager.cache_clear()
    try:
        hosts = manager().env_hosts()  # it used to wait here for as long as the hook did
        assert "half-made" not in hosts  # what a late hook registered goes with it
        said = capfd.readouterr().err
        assert "still waiting for plugin 'hostshang'" in said
        assert f"plugin {name!r} from distribution trl-env-hostshang left out: its " in said
        assert "register_env_hosts did not return in 1 s (TRL_ENV_PLUGIN_TIMEOUT" in said
        assert "half-made" not in manager().env_hosts()
        assert sys.modules["fake_trl_env_hostshang"].calls == 1  # never called again
    finally:
        sys.modules["fake_trl_env_hostshang"].release.set()
        manager.cache_clear()


def test_a_malformed_plugin_distribution_is_named_and_the_cli_goes_on(
    plugin_dist, fake_distribution
):
    plugin_dist("trl-env-goodcmds", GOOD_PLUGIN)
    bad = fake_distribution("trl-env-garbled", plugins={"garbled": "fake_garbled"})
    (info,) = bad.path.glob("*.dist-info")
    (info / "entry_points.txt").write_text("[trl_env.plugins]\ngarbled\n")
    result = fake_distribution.run_cli("fake-hello")
    assert result.returncode == 0 and result.stdout == "hello world\n", result.stderr
    assert result.stderr.count("trl-env-garbled") == 1 and "Traceback" not in result.stderr
    listed = fake_distribution.run_cli("list", "--json")
    (row,) = [r for r in json.loads(listed.stdout) if r["kind"] == "distribution"]
    assert row["name"] == "trl-env-garbled" and row["status"].startswith("broken: line 2")
    table = fake_distribution.run_cli("list").stdout
    assert "Broken distributions:" in table and "trl-env-garbled" in table


def test_trl_env_plugins_limits_which_hook_plugins_load(plugin_dist, fake_distribution):
    plugin_dist("trl-env-goodcmds", GOOD_PLUGIN)
    plugin_dist("trl-env-badimport", "raise ValueError('bad')\n")

    def run(selected: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = fake_distribution.env(TRL_ENV_PLUGINS=selected)
        return run_cli(*args, env=env)

    none = run("", "--help")
    assert none.returncode == 0 and "fake-hello" not in none.stdout and none.stderr == ""
    only_good = run("trl-env-goodcmds", "fake-hello")
    assert only_good.stdout == "hello world\n" and only_good.stderr == ""
    rows = {r["name"]: r for r in json.loads(run("goodcmds", "list", "--json").stdout)}
    assert rows["badimport"]["status"] == "left out by TRL_ENV_PLUGINS"
    assert rows["goodcmds"]["status"] == "ok"
    typo = run("trl-env-goodcmd", "--help")
    assert "TRL_ENV_PLUGINS names 'trl-env-goodcmd'" in typo.stderr


# -- the episode hook is cheap and isolated --------------------------------------------------
class Episode:
    def __init__(self) -> None:
        self.converted = 0

    def to_dict(self) -> dict[str, Any]:
        self.converted += 1
        return {"reward": 1.0}


class Raises:
    @hookspecs.hookimpl
    def on_episode_end(self, episode: dict[str, Any]) -> None:
        raise RuntimeError("listener bug")


def test_episode_end_converts_nothing_when_no_plugin_listens(capsys):
    manager.cache_clear()
    episode = Episode()
    manager().episode_end(episode)
    assert episode.converted == 0
    recorder = Recorder()
    manager().register(recorder, name="recorder")
    manager().episode_end(episode)
    assert episode.converted == 1 and recorder.calls == [("episode", {"reward": 1.0})]
    manager.cache_clear()


def test_a_raising_episode_listener_is_reported_once_and_the_others_still_hear(capsys):
    manager.cache_clear()
    pm = manager()
    recorder = Recorder()
    pm.register(Raises(), name="raises")
    pm.register(recorder, name="recorder")
    for reward in (1.0, 2.0):
        pm.episode_end({"reward": reward})
    manager.cache_clear()
    assert [c[1]["reward"] for c in recorder.calls] == [1.0, 2.0]
    err = capsys.readouterr().err
    assert err.count("listener bug") == 1 and "on_episode_end" in err


# -- built-in backends -----------------------------------------------------------------------
def test_the_built_in_backends_are_registered_lazily_like_a_plugins(plugin_dist):
    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    pm = manager()
    infos = {i.name: i for i in pm.backend_infos()}
    assert infos["transformers"].value == "trl_env.backends.transformers:make_backend"
    assert infos["vllm"].value == "trl_env.backends.vllm:make_backend"
    assert infos["transformers"].distribution == "trl-env"
    assert infos["fake-backend"].distribution == "trl-env-fakeback"
    assert "trl_env.backends.transformers" not in sys.modules or "torch" in sys.modules


def test_build_backend_passes_one_context_to_a_plugins_factory(plugin_dist):
    from trl_env.backends import BackendContext, build_backend

    plugin_dist("trl-env-fakeback", GOOD_PLUGIN)
    name, context = build_backend("fake-backend", tokenizer="tok", options={"x": 1})
    assert name == "fake-backend"
    assert context == BackendContext(tokenizer="tok", options={"x": 1})


TYPO_HOOK = """
from trl_env.hookspecs import hookimpl


@hookimpl
def on_episode_ends(episode):
    pass


@hookimpl
def register_backends(register):
    register("typo-backend", lambda context: "typo")
"""


def test_a_hook_name_that_matches_no_spec_is_named_with_the_likely_one(plugin_dist, capsys):
    typo = plugin_dist("trl-env-typo", TYPO_HOOK)
    pm = manager()
    assert pm.backend("typo-backend")("ctx") == "typo"  # its real hooks still work
    assert "'on_episode_ends', which is not a trl-env hook" in pm.failures[typo]
    assert "did you mean 'on_episode_end'?" in capsys.readouterr().err
