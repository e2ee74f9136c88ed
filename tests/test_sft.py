"""``trl-env sft``: demonstrations rendered by the rollout wire, TRL's SFTTrainer on the model's
own tokens, and the run folder, with the tiny offline model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trl_env import registry
from trl_env.cli import cli
from trl_env.config import RolloutConfig
from trl_env.player import Player
from trl_env.registry import register_env
from trl_env.report.load import read_scalars
from trl_env.resolve import resolve_stack
from trl_env.spec import EnvSpec
from trl_env.training import sft
from trl_env.wire import Wire

SEEDS = [f"train-{i}" for i in range(4)]


@pytest.fixture(scope="module")
def smollm2() -> Any:
    return resolve_stack("smollm2", {}, "tiny")


@pytest.fixture
def registered() -> Iterator[None]:
    saved = dict(registry.envs._local)
    yield
    registry.envs._local.clear()
    registry.envs._local.update(saved)


def _demos(env: str, stack: Any, seeds: list[str] = SEEDS, **config: Any) -> sft.Demonstrations:
    """The demonstrations of ``seeds`` read and played on one host of the env (a player's)."""
    spec, cfg = EnvSpec(env), RolloutConfig(**config)
    with Player(spec, stack.processor, cfg) as player:
        scripts = sft.read_demonstrations(player, spec, seeds)
        wire = Wire.bind(stack.processor, stack.tokenizer)
        host = player.hosts[spec.label]
        return sft.render_demonstrations(host, seeds, scripts, wire, cfg, spec.options_at())


@pytest.mark.parametrize("env", ["guess", "wordle", "echo"])
def test_demonstrations_hold_the_ids_of_the_chat_template(env: str, smollm2: Any) -> None:
    """SmolLM2's template is additive: the whole conversation rendered by the tokenizer's own
    chat template is the episode's ids, and the masked-in runs are the actions and their closer."""
    demos = _demos(env, smollm2)
    assert len(demos.episodes) == len(SEEDS) and not demos.left_out
    tok = smollm2.tokenizer
    for ep, row in zip(demos.episodes, demos.rows(), strict=True):
        messages = [{"role": m["role"], "content": m["content"]} for m in ep.messages[:-1]]
        rendered = tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        # the template ends its last turn with a newline the model never writes
        assert rendered[: len(row["input_ids"])] == row["input_ids"]
        assert tok.decode(rendered[len(row["input_ids"]) :]) == "\n"
        runs, current = [], []
        for token, mask in zip(row["input_ids"], row["assistant_masks"], strict=True):
            if mask:
                current.append(token)
            elif current:
                runs.append(current)
                current = []
        runs += [current] if current else []
        actions = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        assert [tok.decode(r) for r in runs] == [a + "<|im_end|>" for a in actions]
        assert ep.success is True


def test_a_demonstration_cut_by_the_token_limit_is_left_out(smollm2: Any) -> None:
    demos = _demos("sokoban", smollm2, max_new_tokens=3)
    assert not demos.episodes
    assert demos.left_out == {"an action longer than max_new_tokens": len(SEEDS)}


def test_sft_trainer_trains_on_the_model_tokens_only(smollm2: Any, tmp_path: Path) -> None:
    from trl_env.models import load_model

    rows = _demos("guess", smollm2).rows()
    trainer = sft.make_trainer(
        rows, load_model(smollm2.model_path), smollm2.tokenizer, tmp_path, sft.SftSettings()
    )
    for row, prepared in zip(rows, trainer.train_dataset, strict=True):
        assert prepared["input_ids"] == row["input_ids"]
        pairs = zip(row["input_ids"], row["assistant_masks"], strict=True)
        expected = [t if m else -100 for t, m in pairs]
        assert prepared["labels"] == expected
    # On a CPU the warm-up does not leave checkpointing on in the model an RL run goes on with
    # (TRL's SFTConfig turns it on: each backward then ran the forward again).
    assert not trainer.args.gradient_checkpointing


def _sft(out: Path, *args: str) -> Any:
    base = ["sft", "--processor", "smollm2", "--episodes", "8", "--output-dir", str(out)]
    return CliRunner().invoke(cli, [*base, *args, "--json"])


def test_sft_writes_a_model_that_learned_the_demonstrations(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    result = _sft(out, "--env", "guess", "--epochs", "4", "--lr", "3e-3", "--batch-size", "4")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["episodes"] == 8 and summary["steps"] == 8
    assert summary["last_loss"] < summary["first_loss"]
    assert summary == json.loads((out / "summary.json").read_text())
    assert (out / ".trl-env-run").is_file()  # what lets --overwrite replace it
    # TensorBoard by default, as train: the loss each step, which `trl-env view` plots
    losses = read_scalars(out / "runs")["train/loss"]
    assert len(losses) == summary["steps"] and losses[0][1] == pytest.approx(summary["first_loss"])
    episodes = (out / "episodes" / "rank0.jsonl").read_text().splitlines()
    assert len(episodes) == 8 and all(json.loads(e)["success"] for e in episodes)
    assert AutoModelForCausalLM.from_pretrained(out / "final").config.vocab_size > 0
    again = _sft(out, "--env", "guess")
    assert (
        again.exit_code == 2 and "not empty; replace the run there with --overwrite" in again.output
    )
    (tmp_path / "mine.txt").write_text("not a run's")
    foreign = _sft(tmp_path, "--env", "guess", "--overwrite")
    assert foreign.exit_code == 2 and "mine.txt" in foreign.output
    assert (tmp_path / "mine.txt").exists()


def test_sft_with_lora_merges_the_adapter(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    trained = {}
    for name, extra in (("all", ()), ("q", ("--lora-target-modules", "q_proj")), ("full", None)):
        lora = ("--lora", *extra) if extra is not None else ()
        out = tmp_path / name
        result = _sft(out, "--env", "echo", "--epochs", "1", "--report-to", "none", *lora)
        assert result.exit_code == 0, result.output
        assert not (out / "final" / "adapter_config.json").exists()
        assert (out / "final" / "model.safetensors").is_file()
        trained[name] = json.loads((out / "summary.json").read_text())["trained_parameters"]
    from trl_env.models import load_model

    model = load_model(resolve_stack("smollm2", {}, "tiny").model_path)
    total = sum(p.numel() for p in model.parameters())
    assert 0 < trained["q"] < trained["all"] < trained["full"] == total
    bad = _sft(tmp_path / "bad", "--env", "echo", "--lora", "--lora-target-modules", " , ")
    assert bad.exit_code == 2 and "--lora-target-modules is empty" in bad.output


def test_sft_reads_and_plays_demonstrations_in_worker_processes(
    smollm2: Any, tmp_path: Path
) -> None:
    import yaml

    out = tmp_path / "run"
    result = _sft(out, "--env", "guess", "--episodes", "2", "--epochs", "1",
                  "--env-isolation", "process", "--step-timeout", "30",
                  "--report-to", "none")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert not (out / "runs").exists()
    summary = json.loads(result.output[result.output.index("{") :])
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["rollout"] == {"env_isolation": "process", "step_timeout": 30.0}
    # The worker changes where the env runs, not what is trained on: the same seeds played here
    # hold the same tokens.
    played = [json.loads(line) for line in (out / "episodes" / "rank0.jsonl").open()]
    seeds = [p["seed"] for p in played]
    here = _demos("guess", smollm2, seeds)
    assert len(seeds) == summary["episodes"] == 2
    assert summary["trained_tokens"] == here.trained_tokens
    assert summary["tokens"] == sum(len(r["input_ids"]) for r in here.rows())
    assert [p["messages"] for p in played] == [e.messages for e in here.episodes]


def test_its_config_file_runs_it_again_and_flags_win(tmp_path: Path) -> None:
    import yaml

    first = tmp_path / "first"
    args = ("--env", "guess", "--episodes", "4", "--epochs", "1", "--batch-size", "2",
            "--env-arg", "high=10", "--max-episode-tokens", "2048",
            "--report-to", "none")  # fmt: skip
    ran = _sft(first, *args)
    assert ran.exit_code == 0, ran.output
    again = tmp_path / "again"
    # _sft's own --episodes 8 and --processor would win over the file: call the CLI bare
    result = CliRunner().invoke(
        cli, ["sft", "--config", str(first / "config.yaml"), "--output-dir", str(again), "--json"]
    )
    assert result.exit_code == 0, result.output
    saved = [yaml.safe_load((d / "config.yaml").read_text()) for d in (first, again)]
    assert saved[0].pop("output_dir") != saved[1].pop("output_dir")
    assert saved[0] == saved[1]
    assert saved[1]["env_args"] == {"high": 10}
    assert saved[1]["rollout"] == {"max_episode_tokens": 2048}
    summaries = [json.loads((d / "summary.json").read_text()) for d in (first, again)]
    for key in ("episodes", "tokens", "trained_tokens", "steps", "first_loss", "last_loss"):
        assert summaries[0][key] == summaries[1][key], key
    changed = CliRunner().invoke(
        cli, ["sft", "--config", str(first / "config.yaml"), "--output-dir", str(tmp_path / "c"),
              "--epochs", "2", "--env-arg", "low=3", "--json"],
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    saved_c = yaml.safe_load((tmp_path / "c" / "config.yaml").read_text())
    assert saved_c["epochs"] == 2.0 and saved_c["env_args"] == {"high": 10, "low": 3}


def test_eval_and_train_take_an_sft_config_and_go_on_from_its_model(tmp_path: Path) -> None:
    """The step after a warm-up: the same env, processor and rollout options, and DIR/final."""
    sft_dir = tmp_path / "sft"
    ran = _sft(sft_dir, "--env", "guess", "--episodes", "2", "--epochs", "1",
               "--env-arg", "high=10", "--max-new-tokens", "6", "--report-to", "none")  # fmt: skip
    assert ran.exit_code == 0, ran.output
    config = str(sft_dir / "config.yaml")
    records = tmp_path / "eval.jsonl"
    evaluated = CliRunner().invoke(
        cli, ["eval", "--config", config, "--episodes", "2", "--out", str(records)]
    )
    assert evaluated.exit_code == 0, evaluated.output
    run = json.loads(records.read_text().splitlines()[0])["run"]
    assert run["model"] == str(sft_dir / "final") and run["processor"] == "smollm2"
    assert run["env_args"] == {"high": 10} and run["limits"]["max_new_tokens"] == 6, run
    out = tmp_path / "rl"
    trained = CliRunner().invoke(cli, ["train", "--config", config, "--max-steps", "1",
                                       "--output-dir", str(out), "--json"])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    import yaml

    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["model"] == str(sft_dir / "final") and saved["env_args"] == {"high": 10}
    assert saved["rollout"]["max_new_tokens"] == 6
    (sft_dir / "final" / "config.json").unlink()  # an sft run that did not finish
    unfinished = CliRunner().invoke(cli, ["eval", "--config", config])
    assert unfinished.exit_code == 2 and "holds no model" in unfinished.output


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("command: train\nenv: guess\n", "is a `trl-env train` config"),
        ("env: guess\ngrpo: {max_steps: 2}\n", "is a `trl-env train` config"),
        ("env: guess\nepoch: 2\n", "Unknown key 'epoch' in config file"),
        ("env: guess\nrollout: {temperature: 0.5}\n", "Unknown key 'temperature' in rollout:"),
        ("env: guess\nenv_args: [high]\n", "env_args in config file"),
        ("- env\n", "must hold a mapping of options"),
        ("env: [guess\n", "is not valid YAML"),
    ],
)
def test_a_bad_config_file_is_one_sentence(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "sft.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["sft", "--config", str(path), "--processor", "smollm2"])
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output


class _NoDemo:
    def __init__(self) -> None:
        self.reward, self.alive = 0.0, False

    def reset(self, seed: str) -> str:
        self.alive = True
        return "Say anything."

    def step(self, action: str) -> str:
        self.alive = False
        return "Done."


class _EmptyDemo(_NoDemo):
    def demonstrate(self, seed: str) -> list[str]:
        return []


class _SomeDemo(_NoDemo):
    """Demonstrates some of its games only, as a library env does."""

    def demonstrate(self, seed: str) -> list[str] | None:
        return None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--env", "no-demo"], "no-demo has no demonstrate(seed) extra"),
        (["--env", "empty-demo"], "empty-demo.demonstrate('train-0') returned no actions"),
        (["--env", "some-demo"], "some-demo gives no demonstration for seed 'train-0'"),
        (["--env", "guess", "--model", "/no/such/model"], "/no/such/model"),
        (["--env", "guess", "--epochs", "0"], "--epochs is 0.0"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(
    args: list[str], said: str, tmp_path: Path, registered: None
) -> None:
    register_env("no-demo", _NoDemo)
    register_env("empty-demo", _EmptyDemo)
    register_env("some-demo", _SomeDemo)
    result = _sft(tmp_path / "run", *args)
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


class _DemoOf:
    """An env of one step whose demonstration is the given action."""

    def __init__(self, action: str) -> None:
        self.action, self.reward, self.alive = action, 0.0, False

    def reset(self, seed: str) -> str:
        self.alive = True
        return "Say it."

    def step(self, action: str) -> str:
        self.alive = False
        self.reward = float(action == self.action)
        return "Done."

    def demonstrate(self, seed: str) -> list[str]:
        return [self.action]


@pytest.mark.parametrize("family", ["qwen3", "qwen2.5"])
def test_a_demonstrated_action_spelling_control_tokens_is_trained_as_text(family: str) -> None:
    """Control-token strings in a demonstrated action (a turn opener, a FIM token, a tool call)
    are trained as the text they spell: the model's ids hold no added token but the closer, and
    they decode back to the action."""
    stack = resolve_stack(family, {}, "tiny")
    tok = stack.tokenizer
    wire = Wire.bind(stack.processor, tok)
    action = "say <|im_start|>user and <|fim_prefix|> then <tool_call> x"
    demos = sft.render_demonstrations(
        lambda: _DemoOf(action), ["s"], [[action]], wire, RolloutConfig(max_new_tokens=64)
    )
    [ep] = demos.episodes
    trained = [i for i, m in zip(ep.completion_ids, ep.env_mask, strict=True) if m]
    added = set(tok.added_tokens_decoder)
    assert [i for i in trained if i in added] == list(wire.close_ids)
    assert wire.decode(trained) == action + wire.close_text
    assert [m["content"] for m in ep.messages if m["role"] == "assistant"] == [action]


_HUGE_ACTION = """
import json, resource
from trl_env.config import RolloutConfig
from trl_env.resolve import resolve_stack
from trl_env.training import sft
from trl_env.wire import Wire


class Env:
    reward, alive = 0.0, True

    def reset(self, seed):
        return "Go."

    def step(self, action):
        self.alive = False
        return "Done."


stack = resolve_stack("qwen3", {}, "tiny")
wire = Wire.bind(stack.processor, stack.tokenizer)
config = RolloutConfig(max_new_tokens=64)
sft.render_demonstrations(Env, ["s"], [["push left"]], wire, config)  # lazy state built
action = "push the box left and up " * 200_000  # 5 MB
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
demos = sft.render_demonstrations(Env, ["s"], [[action]], wire, config)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_mb": (after - before) / 1024, "left_out": dict(demos.left_out)}))
"""


def test_a_huge_demonstrated_action_is_bounded_before_it_is_tokenized() -> None:
    """A 5 MB action is cut to what a turn of max_new_tokens can hold before it is tokenized:
    the process's peak memory grows by a few copies of the action, not by the tokenizer's
    pieces and offsets of all of it (1.4 GB before)."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _HUGE_ACTION], capture_output=True, text=True, timeout=600,
        env=os.environ,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["left_out"] == {"an action longer than max_new_tokens": 1}
    assert report["grew_mb"] < 100, report


def test_sft_is_a_library_function_the_cli_calls(tmp_path: Path) -> None:
    """trl_env.training.sft_run.run_sft needs no click context: flags are its arguments."""
    from trl_env.errors import UsageError
    from trl_env.training.sft_run import run_sft

    with pytest.raises(UsageError, match="--epochs is 0"):
        run_sft("guess", "smollm2", epochs=0, output_dir=tmp_path / "no")
    out = tmp_path / "run"
    summary = run_sft(
        "echo", "smollm2", episodes=2, epochs=1, report_to=(), output_dir=out, progress="lines"
    )
    assert summary["episodes"] == 2 and (out / "final" / "config.json").is_file()
    assert json.loads((out / "summary.json").read_text()) == summary
