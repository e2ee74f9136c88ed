"""A hook plugin installed as a real distribution implements every hook spec; each one fires.

``acme-hooks`` is written outside the repo and installed with ``pip --target`` into a temporary
folder (never into the test environment). It adds a command, registers a scripted generation
backend, and appends every lifecycle event it hears to the file named by ``ACME_HOOKS_LOG``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trl_env import batch_rollout, hookspecs
from trl_env.backends import build_backend
from trl_env.plugins import manager
from trl_env.testing.fake_dist import run_cli
from trl_env.testing.packages import pip_install_package
from trl_env.testing.timeouts import scaled

# One xdist worker runs the module (make test: --dist loadgroup): the package is installed once.
pytestmark = pytest.mark.xdist_group("hook_plugin")

REPO = Path(__file__).resolve().parents[1]

PLUGIN = '''
import json
import os

import click
from trl_env.backends import Sample
from trl_env.hookspecs import hookimpl


def log(event, payload):
    path = os.environ.get("ACME_HOOKS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"event": event, **payload}) + "\\n")


@hookimpl
def register_commands(cli):
    @cli.command("acme-hello")
    def hello():
        """Say hello from acme-hooks."""
        click.echo("hello from acme-hooks")


class ScriptedSession:
    """Every turn of every row is the same text, closed by a stop id."""

    def __init__(self, ids):
        self.ids = ids

    def generate(self, turns, stop_ids):
        out = []
        for turn in turns:
            ids = (self.ids + [min(stop_ids)])[:turn.max_new_tokens]
            out.append(Sample(ids=ids, logprobs=[0.0] * len(ids), stopped=ids[-1] in stop_ids))
        return out

    def release(self, rows):
        pass

    def close(self):
        pass


class ScriptedBackend:
    def __init__(self, context):
        text = context.options.get("text", "5")
        self.ids = context.tokenizer.encode(text, add_special_tokens=False)

    def session(self, params):
        return ScriptedSession(self.ids)


@hookimpl
def register_backends(register):
    register("acme-scripted", ScriptedBackend)


class AcmeLocal:
    """A kind of env host of its own: envs in this process, every opening logged."""

    gate = None

    def __init__(self, spec, config):
        self.spec, self.call_timeout = spec, config.step_timeout
        self.label = f"the env {spec.label!r} on acme-local"

    def open(self, index, options):
        from trl_env import load_env
        from trl_env.boundary import EnvHandle

        log("host_open", {"env": self.spec.label, "options": dict(options)})
        return EnvHandle(load_env(self.spec.env, **options), self.label)

    def close(self):
        log("host_close", {"env": self.spec.label})


@hookimpl
def register_env_hosts(register):
    register("acme-local", AcmeLocal)  # chosen by --env-isolation acme-local


@hookimpl
def on_episode_end(episode):
    log("episode_end", {k: episode[k] for k in ("seed", "reward", "status", "turns")})


@hookimpl
def on_train_begin(config):
    log("train_begin", {"env": config.get("env"), "keys": sorted(config)})


@hookimpl
def on_train_end(summary):
    log("train_end", {"keys": sorted(summary)})
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``acme-hooks`` built from its own folder and installed into a --target folder."""
    root = tmp_path_factory.mktemp("hook_plugin")
    return pip_install_package(
        root,
        "acme-hooks",
        "1.4.2",
        "acme_hooks",
        PLUGIN,
        ("trl_env.plugins", {"acme": "acme_hooks"}),
    )


@pytest.fixture
def installed(site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin visible to this process; yields the event log it writes."""
    log = site.parent / f"events-{os.getpid()}-{id(monkeypatch)}.jsonl"
    log.unlink(missing_ok=True)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("ACME_HOOKS_LOG", str(log))
    manager.cache_clear()
    yield log
    manager.cache_clear()
    for name in [m for m in sys.modules if m.split(".")[0] == "acme_hooks"]:
        del sys.modules[name]


def events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def env_with(site: Path, **extra: str) -> dict[str, str]:
    paths = [str(site), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **extra}


class Guess:
    """Say 5: saying it wins; two wrong answers lose."""

    def __init__(self) -> None:
        self.reward, self.alive, self.misses = 0.0, False, 0

    def reset(self, seed: str) -> str:
        self.reward, self.alive, self.misses = 0.0, True, 0
        return f"Game {seed}: say 5."

    def step(self, action: str) -> str:
        if action.strip() == "5":
            self.reward, self.alive = 1.0, False
            return "Right."
        self.misses += 1
        self.alive = self.misses < 2
        return "Wrong, say 5."


def test_the_plugin_implements_every_hook_spec(installed):
    import acme_hooks

    specs = {name for name, f in vars(hookspecs).items() if hasattr(f, "trl_env_spec")}
    assert specs == {"register_commands", "register_backends", "register_env_hosts",
                     "on_episode_end", "on_train_begin", "on_train_end"}  # fmt: skip
    implemented = {n for n, f in vars(acme_hooks).items() if hasattr(f, "trl_env_impl")}
    assert implemented == specs
    manager().load_entry_points()
    assert manager().pm.has_plugin("acme") and manager().failures == {}
    from trl_env.hosts import kinds

    assert kinds()["acme-local"].factory is acme_hooks.AcmeLocal


def test_register_commands_adds_a_working_command(site):
    result = run_cli("acme-hello", env=env_with(site))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from acme-hooks\n"
    assert "Say hello from acme-hooks." in run_cli("--help", env=env_with(site)).stdout


def test_list_shows_the_plugin_and_its_backend_with_their_distribution(site):
    rows = json.loads(run_cli("list", "--json", env=env_with(site)).stdout)
    mine = {(r["kind"], r["name"]): r for r in rows if r["distribution"] == "acme-hooks"}
    assert set(mine) == {("plugin", "acme"), ("backend", "acme-scripted"), ("host", "acme-local")}
    assert all(r["version"] == "1.4.2" and r["status"] == "ok" for r in mine.values())


def test_register_backends_gives_a_backend_that_plays_episodes(installed, qwen3):
    backend = build_backend("acme-scripted", tokenizer=qwen3.tokenizer, options={"text": "5"})
    assert type(backend).__name__ == "ScriptedBackend"
    episodes = batch_rollout(
        ["a", "b"], env=Guess, processor=qwen3.processor, tokenizer=qwen3.tokenizer,
        backend="acme-scripted", max_turns=3,
    )  # fmt: skip
    assert [(e.reward, e.turns, e.status) for e in episodes] == [(1.0, 1, "done")] * 2
    assert [e.completion_ids[: len(backend.ids)] for e in episodes] == [backend.ids] * 2


def test_a_plugin_s_host_kind_runs_an_eval_when_named(site, tmp_path):
    """``--env-isolation acme-local``: the run's seeds and episodes open on the plugin's host,
    one host for the run, closed at its end."""
    log = tmp_path / "events.jsonl"
    result = run_cli(
        "eval", "--env", "guess", "--processor", "qwen3", "--episodes", "2",
        "--max-new-tokens", "2", "--env-arg", "high=10", "--env-isolation", "acme-local",
        "--json", env=env_with(site, ACME_HOOKS_LOG=str(log)), timeout=scaled(600),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["episodes"] == 2
    seen = [e for e in events(log) if e["event"].startswith("host_")]
    opened = [e for e in seen if e["event"] == "host_open"]
    assert len(opened) == 3  # the seeds' env, then one per episode
    assert all(e["env"] == "guess" and e["options"] == {"high": 10} for e in opened)
    assert seen[-1] == {"event": "host_close", "env": "guess"} and len(seen) == 4


def test_on_episode_end_hears_every_episode_of_a_rollout_on_the_tiny_model(installed, qwen3):
    seeds = [f"s{i}" for i in range(5)]
    episodes = batch_rollout(
        seeds, env=Guess, processor=qwen3.processor, tokenizer=qwen3.tokenizer,
        model=qwen3.model, max_turns=2, max_new_tokens=4, seed=0,
    )  # fmt: skip
    heard = sorted((e["seed"], e["reward"], e["status"], e["turns"]) for e in events(installed))
    assert heard == sorted((e.seed, e.reward, str(e.status), e.turns) for e in episodes)


@pytest.mark.slow
def test_a_training_run_fires_train_begin_every_episode_end_and_train_end(site, tmp_path):
    log = tmp_path / "events.jsonl"
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trl_env", "train", "--env", "guess", "--processor", "qwen3",
         "--max-steps", "1", "--output-dir", str(out)],
        env=env_with(site, ACME_HOOKS_LOG=str(log)), cwd=tmp_path, capture_output=True,
        text=True, timeout=scaled(600), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = events(log)
    kinds = [e["event"] for e in seen]
    assert kinds[0] == "train_begin" and kinds[-1] == "train_end"
    assert kinds.count("train_begin") == kinds.count("train_end") == 1
    assert seen[0]["env"] == "guess"
    assert {"steps", "reward_end", "output_dir"} <= set(seen[-1]["keys"])
    saved = (out / "episodes").glob("*.jsonl")
    logged = sum(len(p.read_text().splitlines()) for p in saved)
    assert kinds.count("episode_end") == logged > 0
