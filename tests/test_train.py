"""GRPO training through trl-env: the Python API with a real GRPOTrainer, and `trl-env train`."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from trl import GRPOConfig

from trl_env import make_rollout_func
from trl_env.cli import cli
from trl_env.hookspecs import hookimpl
from trl_env.plugins import manager
from trl_env.testing.fake_dist import console_script, run_cli
from trl_env.testing.timeouts import scaled

TRL_ENV = console_script()
QUICK = [
    "--env",
    "guess",
    "--processor",
    "qwen3",
    "--processor-arg",
    "thinking=false",
    "--max-new-tokens",
    "4",
    "--max-turns",
    "2",
    "--batch-size",
    "4",
    "--num-generations",
    "2",
    "--train-seeds",
    "16",
    "--no-check",
]


class LengthEnv:
    """Rewards short answers, so rewards differ within a group and the policy gets a gradient."""

    def __init__(self):
        self.reward, self.alive, self.n = 0.0, True, 0

    def reset(self, seed):
        return f"Say something short ({seed})."

    def step(self, action):
        self.n += 1
        self.reward = 1.0 / (1 + len(action))
        self.alive = self.n < 2
        return "Shorter."


def test_grpo_trainer_with_groups_and_buffered_generations(qwen3, grpo_trainer):
    seen: list[list] = []
    rollout = make_rollout_func(
        env=LengthEnv, processor=qwen3.processor, max_new_tokens=6, on_episodes=seen.append
    )
    trainer = grpo_trainer(
        rollout,
        [f"seed-{i}" for i in range(16)],
        steps_per_generation=2,
        max_steps=4,
        learning_rate=1e-2,
        seed=42,  # GRPOConfig's own
    )
    model = trainer.model
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert len(seen) == 2  # one generation per steps_per_generation=2 optimizer steps
    for batch in seen:
        assert len(batch) == 8
        for g in range(0, 8, 4):  # the 4 members of a group share the seed and the first prompt
            group = batch[g : g + 4]
            assert len({ep.seed for ep in group}) == 1
            assert len({tuple(ep.prompt_ids) for ep in group}) == 1
    logged = {k for h in trainer.state.log_history for k in h}
    assert {
        "rollout/turns",
        "rollout/status_done",
        "rollout/bridge_mismatches",
        "rewards/env_reward/mean",
    } <= logged
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def read_episodes(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "episodes" / "rank0.jsonl").open()]


class Hooks:
    """A hook plugin recording what trl-env hands to on_train_begin and on_train_end."""

    def __init__(self):
        self.begin: list[dict] = []
        self.end: list[dict] = []

    @hookimpl
    def on_train_begin(self, config):
        self.begin.append(config)

    @hookimpl
    def on_train_end(self, summary):
        self.end.append(summary)


def test_train_command_logs_checkpoints_reproduces_and_resumes(tmp_path):
    out = tmp_path / "run"
    runner = CliRunner()
    hooks = Hooks()
    manager().register(hooks, name="test-train-hooks")
    try:
        first = runner.invoke(
            cli,
            ["train", *QUICK, "--max-steps", "2", "--save-steps", "1", "--output-dir", str(out)],
        )
    finally:
        manager().unregister("test-train-hooks")
    assert first.exit_code == 0, first.output
    # Off a terminal: one line per logged step, then the summary table.
    assert [line.split()[1] for line in first.stdout.splitlines() if line.startswith("step ")] == [
        "1/2",
        "2/2",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["reward_start"] is not None
    assert list((out / "runs").rglob("events.out.tfevents.*")), "no TensorBoard log"
    assert (out / "checkpoint-2").is_dir() and (out / "final" / "config.json").is_file()
    assert not list(out.glob(".staging-*")), "a checkpoint was left half-published"
    episodes = read_episodes(out)
    assert len(episodes) == 8 and all(e["text"] and e["env"] == "guess" for e in episodes)
    assert set(episodes[0]) >= {"segments", "status", "messages", "sanitized_chars"}
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["rollout"]["max_new_tokens"] == 4 and saved["grpo"]["max_steps"] == 2
    assert len(hooks.begin) == 1 and hooks.begin[0]["env"] == "guess"
    assert hooks.begin[0]["grpo"] == saved["grpo"]
    assert [s["steps"] for s in hooks.end] == [2]

    again = runner.invoke(cli, ["train", *QUICK, "--max-steps", "2", "--output-dir", str(out)])
    assert again.exit_code == 2 and "--resume" in again.output and "--overwrite" in again.output

    # The saved config alone runs the same run again.
    copy = tmp_path / "copy"
    rerun = runner.invoke(
        cli, ["train", "--config", str(out / "config.yaml"), "--output-dir", str(copy), "--json"]
    )
    assert rerun.exit_code == 0, rerun.output
    assert [e["text"] for e in read_episodes(copy)] == [e["text"] for e in episodes]

    changed = runner.invoke(
        cli, ["train", *QUICK, "--learning-rate", "0.5", "--output-dir", str(out), "--resume"]
    )
    assert changed.exit_code == 2 and "learning_rate is 0.5" in changed.output

    resumed = runner.invoke(
        cli, ["train", "--max-steps", "3", "--output-dir", str(out), "--resume", "--json"]
    )
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert summary["steps"] == 3 and summary["resumed_from"].endswith("checkpoint-2")
    assert yaml.safe_load((out / "config.yaml").read_text())["grpo"]["max_steps"] == 3


def test_report_to_none_writes_no_tensorboard_log(tmp_path):
    out = tmp_path / "run"
    args = ["train", *QUICK, "--max-steps", "1", "--report-to", "none", "--output-dir", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert not list(out.rglob("events.out.tfevents.*"))  # the default writes one (test above)
    assert yaml.safe_load((out / "config.yaml").read_text())["grpo"]["report_to"] == []
    assert read_episodes(out)  # the run's own records, whatever it reports to


@pytest.mark.parametrize(
    ("value", "said"),
    [("tensorbord", "give tensorboard, wandb or both"), ("none,wandb", "or none")],
)
def test_a_bad_report_to_is_one_sentence(value, said):
    result = CliRunner().invoke(cli, ["train", *QUICK, "--report-to", value])
    assert result.exit_code == 2 and said in result.output, result.output


def test_lora_saves_an_adapter(tmp_path):
    out = tmp_path / "lora"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            *QUICK,
            "--max-steps",
            "1",
            "--lora",
            "--lora-r",
            "4",
            "--lora-target-modules",
            "q_proj,v_proj",
            "--output-dir",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and set(adapter["target_modules"]) == {"q_proj", "v_proj"}


def test_lora_on_all_linear_modules_as_help_shows_it(tmp_path):
    """`--lora-target-modules all-linear`, the default --help shows, is peft's keyword, not a
    module name (it once reached peft as the list ["all-linear"]: no such module)."""
    out = tmp_path / "lora"
    result = CliRunner().invoke(cli, ["train", *QUICK, "--max-steps", "1", "--lora",
                                      "--lora-target-modules", "all-linear",
                                      "--output-dir", str(out), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    names = {m.rsplit(".", 1)[-1] for m in adapter["target_modules"]}
    assert {"q_proj", "v_proj", "down_proj"} <= names, adapter["target_modules"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "3", "--num-generations", "2"], "not a multiple of num_generations"),
        (["--max-episode-tokens", "20"], "raise it above"),
        (["--grpo", "learning_rat=0.1"], "Did you mean 'learning_rate'?"),
        (["--resume"], "found no run"),
    ],
)
def test_bad_options_get_one_sentence(tmp_path, args, message):
    result = run_cli(
        "train",
        *QUICK,
        "--output-dir",
        str(tmp_path / "x"),
        *args,
        timeout=scaled(300),
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def write_config(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("make_args", "named"),
    [
        (lambda tmp: ["--max-steps", "0"], ["grpo.max_steps", "0", "at least 1"]),
        (lambda tmp: ["--max-steps", "-1"], ["grpo.max_steps", "-1", "at least 1"]),
        (lambda tmp: ["--grpo", "warmup_steps=ten"], ["grpo.warmup_steps", "'ten'", "a number"]),
        (lambda tmp: ["--grpo", "beta=[1]"], ["grpo.beta", "[1]", "a number"]),
        (
            lambda tmp: ["--config", write_config(tmp / "c.yaml", "grpo: {learning_rate: fast}")],
            ["grpo.learning_rate", "'fast'", "a number"],
        ),
        (
            lambda tmp: ["--config", write_config(tmp / "c.yaml", "rollout: {step_timeout: soon}")],
            ["rollout.step_timeout", "'soon'", "a number or null"],
        ),
        (
            lambda tmp: ["--config", write_config(tmp / "c.yaml", "model: [1, 2]")],
            ["model", "[1, 2]", "text"],
        ),
        (
            lambda tmp: ["--config", write_config(tmp / "c.yaml", "rollout: {max_turn: 3}")],
            ["max_turn", "Did you mean 'max_turns'?"],
        ),
        (lambda tmp: ["--output-dir", "/sys/trl-env-test"], ["/sys/trl-env-test", "cannot"]),
        (
            lambda tmp: ["--output-dir", str(Path(write_config(tmp / "f", "")) / "run")],
            ["cannot be written", "Not a directory"],
        ),
    ],
)
def test_bad_values_name_option_value_and_what_is_accepted(tmp_path, make_args, named):
    args = make_args(tmp_path)  # each refused before training; else 1 step, not the default 100
    if "--max-steps" not in args:
        args += ["--max-steps", "1"]
    if "--output-dir" not in args:
        args += ["--output-dir", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, ["train", *QUICK, *args])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()  # stdout may say what was about to load: progress, not the error
    assert line.startswith("Error: ") and "\n" not in line, line
    assert all(part in line for part in named), line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_use_vllm_without_vllm_is_one_sentence(tmp_path):
    result = CliRunner().invoke(
        cli, ["train", *QUICK, "--use-vllm", "--max-steps", "1", "--output-dir", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "pip install trl[vllm]" in result.output and "Traceback" not in result.output


def test_help_shows_every_default():
    import dataclasses

    from trl_env.config import RolloutConfig, option_help
    from trl_env.training.config import GRPO_DEFAULTS, TINY_DEFAULTS
    from trl_env.training.grpo_fields import grpo_fields

    text = " ".join(CliRunner().invoke(cli, ["train", "--help"]).output.split())
    repeated = {
        f.name: f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        for f in dataclasses.fields(RolloutConfig)
        if f.metadata.get("multiple")
    }
    for name, (value, _) in option_help().items():
        if name in repeated:  # a repeatable flag (--env-server URL) has no default to show
            assert f"{repeated[name]} " in text
            continue
        if name == "seed" or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        shown = str(getattr(value, "value", value))
        tiny = TINY_DEFAULTS["rollout"].get(name)
        if tiny is not None:
            shown += f" (tiny model: {tiny})"
        assert f"{flag} " in text and f"[default: {shown}]" in text.split(f"{flag} ", 1)[1]
    assert f"[default: {GRPO_DEFAULTS['learning_rate']}]" in text
    # GRPO fields trl-env leaves alone show TRL's own default, read from its source.
    assert f"[default: {grpo_fields()['gradient_accumulation_steps'].default}]" in text


def test_grpo_fields_read_from_source_equal_grpoconfig():
    from dataclasses import MISSING, fields

    from trl_env.training.grpo_fields import grpo_fields

    read = grpo_fields()
    for f in fields(GRPOConfig):
        if (
            f.name in read
            and f.default is not MISSING
            and not isinstance(read[f.name].default, str)
        ):
            assert read[f.name].default == f.default, f.name
    assert {"learning_rate", "num_generations", "max_steps", "seed"} <= set(read)


def test_unknown_env_is_the_registry_error(tmp_path):
    result = run_cli(
        "train",
        "--env",
        "gues",
        "--processor",
        "qwen3",
        timeout=scaled(120),
    )
    assert result.returncode == 2
    assert "Did you mean 'guess'?" in result.stderr and "Traceback" not in result.stderr


def test_accelerate_launch_trains_on_both_ranks(tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",  # with no GPU, trl-env asks for use_cpu and accelerate uses gloo
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "trl_env",
            "train",
            *QUICK,
            "--max-steps",
            "2",
            "--output-dir",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=scaled(600),
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [
        [json.loads(line) for line in (out / "episodes" / f"rank{r}.jsonl").open()] for r in (0, 1)
    ]
    assert all(len(eps) == 8 for eps in ranks)  # 2 steps x 4 episodes on each rank
    assert {e["seed"] for e in ranks[0]}.isdisjoint({e["seed"] for e in ranks[1]})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2


@pytest.mark.parametrize(
    ("env", "processor", "env_args"),
    [
        ("sokoban", "qwen3", []),
        ("wordle", "qwen2.5", []),
        ("calculator", "llama3.1", []),
        ("python", "gemma3", ["--env-arg", "max_turns=2"]),
        ("guess", "llama3.2", []),
        ("guess", "gemma2", []),
    ],
)
def test_every_env_and_family_trains_a_step(tmp_path, env, processor, env_args):
    result = run_cli(
        "train",
        "--env",
        env,
        "--processor",
        processor,
        *env_args,
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--num-generations",
        "2",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "6",
        "--train-seeds",
        "8",
        "--output-dir",
        str(tmp_path),
        "--json",
        timeout=scaled(600),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["steps"] == 1
    episodes = [json.loads(line) for line in (tmp_path / "episodes" / "rank0.jsonl").open()]
    assert len(episodes) == 4 and all(e["status"] != "error" for e in episodes), episodes


def test_a_processor_that_does_not_fit_the_model_is_refused(tmp_path):
    from trl_env import load_processor
    from trl_env.models import model_path

    llama = model_path("tiny", load_processor("llama3.1"))
    result = run_cli(
        "train",
        "--env",
        "guess",
        "--processor",
        "qwen3",
        "--model",
        llama,
        "--output-dir",
        str(tmp_path),
        timeout=scaled(300),
    )
    assert result.returncode == 1
    assert "Processor qwen3 does not fit tokenizer" in result.stderr
    # the installed processor whose own check passes on that tokenizer is named
    assert "The installed processor llama3.1 fits it: --processor llama3.1." in result.stderr
    assert "Traceback" not in result.stderr


def start_training(out: Path, *extra: str, episodes: int = 8) -> subprocess.Popen:
    """`trl-env train` in a subprocess, returned once it has logged ``episodes`` episodes."""
    proc = subprocess.Popen(
        [TRL_ENV, "train", *QUICK, "--max-steps", "500", "--output-dir", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = out / "episodes" / "rank0.jsonl"
    deadline = time.monotonic() + 300
    while not (log.exists() and log.read_text().count("\n") >= episodes):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.2)
    return proc


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_a_checkpoint_and_resume_continues(tmp_path, sig, code):
    out = tmp_path / "run"
    # The second step's episodes are in, so the first checkpoint is saved and a second follows.
    proc = start_training(out, "--save-steps", "1", "--json", episodes=16)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=scaled(300))
    assert proc.returncode == code, stderr[-2000:]
    summary = json.loads(stdout)
    steps = summary["steps"]
    assert 2 <= steps < 500 and summary["stopped_by"] == sig.name
    checkpoint = out / f"checkpoint-{steps}"
    assert summary["checkpoint"] == str(checkpoint) and str(checkpoint) in stderr
    assert checkpoint.is_dir() and not (out / "final").exists()
    # The newest checkpoint cut short: resume falls back to the one before, and says so.
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    resumed = run_cli(
        "train",
        "--max-steps",
        str(steps + 1),
        "--output-dir",
        str(out),
        "--resume",
        "--json",
        timeout=scaled(300),
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert summary["steps"] == steps + 1
    assert summary["resumed_from"] == str(out / f"checkpoint-{steps - 1}")
    assert f"checkpoint-{steps} is not usable (model.safetensors is truncated" in resumed.stderr


def test_resume_with_no_usable_checkpoint_says_so(tmp_path):
    out = tmp_path / "run"
    first = CliRunner().invoke(
        cli, ["train", *QUICK, "--max-steps", "1", "--save-steps", "1", "--output-dir", str(out)]
    )
    assert first.exit_code == 0, first.output
    (out / "checkpoint-1" / "trainer_state.json").write_text("{not json")
    # more steps than it trained: a run trained to its end has nothing to resume
    result = CliRunner().invoke(
        cli, ["train", "--output-dir", str(out), "--resume", "--max-steps", "2"]
    )
    assert result.exit_code == 2
    assert "no usable checkpoint" in result.output and "trainer_state.json" in result.output
    assert f"start the run again with: trl-env train --config {out / 'config.yaml'}" in (
        result.output
    )


def test_a_second_ctrl_c_exits_at_once(tmp_path):
    out = tmp_path / "run"
    proc = start_training(out)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)  # well inside the step: the first signal only asked for a checkpoint
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    # 130 from the handler; or killed by SIGINT itself when the step (and its checkpoint) ended
    # before the second signal arrived and the default handler was back, which a fast step can.
    assert proc.returncode in (130, -signal.SIGINT), stderr[-2000:]
    if list(out.glob("checkpoint-*")):
        assert "saved" in stderr
    else:
        assert "without a checkpoint" in stderr


def test_a_second_ctrl_c_while_the_run_closes_still_names_its_checkpoint(tmp_path):
    out = tmp_path / "run"
    proc = start_training(out)
    proc.send_signal(signal.SIGINT)
    # summary.json is written once the checkpoint is: the run is closing its envs and printing
    while proc.poll() is None and not (out / "summary.json").exists():
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    checkpoint = json.loads((out / "summary.json").read_text())["checkpoint"]
    assert Path(checkpoint).is_dir() and Path(checkpoint).name in stderr, stderr[-2000:]
    assert "Interrupted." not in stderr


class SometimesCrashes(LengthEnv):
    """Raises on every third episode's first step."""

    count = 0

    def reset(self, seed):
        SometimesCrashes.count += 1
        self.doomed = SometimesCrashes.count % 3 == 0
        return super().reset(seed)

    def step(self, action):
        if self.doomed:
            raise RuntimeError("env crashed")
        return super().step(action)


def test_a_crashing_env_never_stops_training(qwen3, grpo_trainer):
    rollout = make_rollout_func(env=SometimesCrashes, processor=qwen3.processor, max_new_tokens=4)
    prompts = [f"c{i}" for i in range(18)]
    trainer = grpo_trainer(
        rollout, prompts, per_device_train_batch_size=6, num_generations=2, max_steps=3, seed=42
    )
    trainer.train()
    assert trainer.state.global_step == 3
    errors = [
        h["rollout/status_error"] for h in trainer.state.log_history if "rollout/status_error" in h
    ]
    assert errors and all(e == pytest.approx(1 / 3) for e in errors)
