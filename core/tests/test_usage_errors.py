"""Usage errors: exit status 2 and one sentence in every command, said before torch is imported,
and no run folder left by a run that never started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_env.testing.timeouts import scaled

# Runs the CLI as `trl-env` does, then says on stderr's last line whether torch got imported.
_PROBE = (
    "import sys\n"
    "from trl_env.cli.main import main\n"
    "sys.argv = ['trl-env', *sys.argv[1:]]\n"
    "try:\n"
    "    main()\n"
    "finally:\n"
    "    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
)
TIMEOUT = scaled(120)


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )


CASES = {
    "unknown env": (["--env", "guesss"], "Unknown environment 'guesss'"),
    "unknown option": (["--env", "guess", "--env-arg", "colour=1"], "has no option 'colour'"),
    "bad option value": (["--env", "guess", "--env-arg", "high=x"], "Option high of guess"),
    "infinite weight": (["--env", "guess:inf"], "positive finite number"),
    "nan error reward": (["--env", "guess", "--error-reward", "nan"], "finite number"),
    "missing model path": (["--env", "guess", "--model", "/no/such/model"], "no such file"),
    "model is a file": (["--env", "guess", "--model", sys.executable], "is a file, not a model"),
    "model folder without config": (["--env", "guess", "--model", "/"], "holds no config.json"),
    "unknown backend": (["--env", "guess", "--backend", "vlm"], "Did you mean 'vllm'"),
    "env server not a url": (["--env", "guess", "--env-server", "host:1"], "not an http://"),
}
TRAIN_CASES = {
    "groups": (["--env", "guess", "--batch-size", "8", "--num-generations", "3"], "multiple of"),
}


@pytest.mark.parametrize("command", ["train", "eval"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_usage_error_exits_2_before_torch(tmp_path: Path, command: str, case: str) -> None:
    args, said = CASES[case]
    proc = _run([command, *args, "--processor", "qwen3"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "torch imported: False"
    assert len(lines) == 2 and lines[0].startswith("Error: ") and said in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # no run folder, no records file


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_train_usage_error_exits_2_before_torch(tmp_path: Path, case: str) -> None:
    args, said = TRAIN_CASES[case]
    proc = _run(["train", *args, "--processor", "qwen3"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "torch imported: False"


def test_unknown_processor_and_grpo_option(tmp_path: Path) -> None:
    for args, said in (
        (["--processor", "qwen33"], "Unknown processor 'qwen33'"),
        (["--processor", "qwen3", "--grpo", "learning_rat=1"], "Did you mean 'learning_rate'"),
    ):
        proc = _run(["train", "--env", "guess", *args], tmp_path)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == "torch imported: False"


def test_play_unknown_env_and_option(tmp_path: Path) -> None:
    for args in (["--env", "guesss"], ["--env", "guess", "--env-arg", "colour=1"]):
        proc = _run(["play", *args], tmp_path)
        assert proc.returncode == 2, proc.stderr


def test_offline_hub_id_is_one_sentence(tmp_path: Path) -> None:
    # each names what its own command takes instead (check has no --model)
    for args, instead in (
        (
            ["train", "--env", "guess", "--processor", "qwen3", "--model", "nobody/not-cached"],
            "`--model tiny`",
        ),
        (["check", "--processor", "qwen3", "--tokenizer", "nobody/not-cached"], "--tokenizer a"),
    ):
        proc = _run(args, tmp_path, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
        assert proc.returncode == 2, proc.stderr
        assert "HF_HUB_OFFLINE" in proc.stderr and "Traceback" not in proc.stderr
        assert instead in proc.stderr
        assert "--model" not in proc.stderr or args[0] != "check"
    assert not (tmp_path / "runs").exists()


def _laughs(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for n in range(1, levels):
        lines.append(f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]")
    return "\n".join([*lines, "env: guess", "processor: qwen3"]) + "\n"


@pytest.mark.parametrize(
    "text, said",
    [
        (_laughs(9), "expands to more than"),  # 9**9 values once expanded
        ("a: &a [*a]\nenv: guess\n", "expands to more than"),
        ("env: guess\n#" + "x" * (2 << 20) + "\n", "KiB"),
    ],
    ids=["billion-laughs", "self-alias", "too-big"],
)
def test_config_file_bounds(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "c.yaml").write_text(text, encoding="utf-8")
    proc = _run(["train", "--config", "c.yaml"], tmp_path)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr


def test_an_alias_bomb_in_one_option_value_is_refused_before_it_expands() -> None:
    from trl_env.cli.options import parse_kv
    from trl_env.errors import UsageError

    levels = ["&a0 [" + ", ".join(["lol"] * 9) + "]"]
    levels += [f"&a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 9)]
    bomb = "[" + ", ".join(levels) + "]"  # under 300 bytes: 9**9 values once expanded
    with pytest.raises(UsageError, match="--env-arg modules expands to more than"):
        parse_kv([f"modules={bomb}"], "--env-arg")
    assert parse_kv(["modules=[&m q_proj, *m]"], "--env-arg") == {"modules": ["q_proj"] * 2}


def test_config_with_few_aliases_still_loads(tmp_path: Path) -> None:
    from trl_env.training.config import load_config

    path = tmp_path / "c.yaml"
    path.write_text("env_args: &opts {low: 1, high: 9}\nprocessor_args: *opts\n", "utf-8")
    assert load_config(path)["processor_args"] == {"low": 1, "high": 9}


def test_a_run_refused_after_its_folder_was_made_leaves_none(tmp_path: Path) -> None:
    # GRPOConfig's own checks (an optimizer it does not know) come after the output folder was
    # made and written to: the folder, and runs/ above it, are removed again.
    args = ["train", "--env", "guess", "--processor", "qwen3", "--grpo", "optim=no_such_optim"]
    proc = _run(args, tmp_path)
    assert proc.returncode == 2 and "GRPOConfig refused" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def _stopped_run(folder: Path, command: str = "", checkpoint: int | None = None) -> None:
    """A run folder as a run stopped early leaves it: its config, no final/, maybe a checkpoint
    (whole: a trainer state and a safetensors file as long as its header says)."""
    folder.mkdir(parents=True)
    config = f"command: {command}\n" if command else "grpo: {max_steps: 9}\n"
    (folder / "config.yaml").write_text(f"{config}env: guess\nprocessor: qwen3\n")
    if checkpoint is not None:
        saved = folder / f"checkpoint-{checkpoint}"
        saved.mkdir()
        (saved / "trainer_state.json").write_text(f'{{"global_step": {checkpoint}}}')
        header = b"{}"
        (saved / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)


MODEL_FLAGS = {  # command -> its flag naming a model, and the rest of a command line
    "train": ("--model", ["--env", "guess", "--processor", "qwen3"]),
    "eval": ("--model", ["--env", "guess", "--processor", "qwen3"]),
    "sft": ("--model", ["--env", "guess", "--processor", "qwen3"]),
    "check": ("--tokenizer", ["--processor", "qwen3"]),
}


@pytest.mark.parametrize("command", sorted(MODEL_FLAGS))
def test_a_stopped_run_s_final_model_names_its_last_checkpoint(tmp_path: Path, command: str):
    """Before: Hugging Face's "Repo id must be in the form ..." and exit 1."""
    flag, rest = MODEL_FLAGS[command]
    _stopped_run(tmp_path / "runs" / "x" / "train", checkpoint=3)
    proc = _run([command, *rest, flag, "runs/x/train/final"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    error, probe = proc.stderr.strip().splitlines()
    assert probe == "torch imported: False"
    assert error == (
        f"Error: {flag} runs/x/train/final does not exist: the run in runs/x/train did not end "
        "(it saves its model to final/ when it does); its last checkpoint is a model too "
        f"({flag} runs/x/train/checkpoint-3), or carry the run on with: trl-env train "
        "--output-dir runs/x/train --resume."
    )


def test_a_missing_model_path_names_its_folder_and_the_close_entry(tmp_path: Path) -> None:
    _stopped_run(tmp_path / "runs" / "none", checkpoint=None)
    _stopped_run(tmp_path / "runs" / "sft", command="sft")
    _stopped_run(tmp_path / "runs" / "done", checkpoint=2)
    (tmp_path / "runs" / "done" / "final").mkdir()
    for model, said in (
        ("runs/none/final", "the run in runs/none did not end (it saves its model to final/ "
         "when it does) and saved no checkpoint; start it again with: trl-env train --config "
         "runs/none/config.yaml --overwrite."),
        ("runs/sft/final", "the sft run in runs/sft did not end (it saves its model to final/ "
         "when it does); run it again with: trl-env sft --config runs/sft/config.yaml "
         "--overwrite."),
        ("runs/done/fnal", "no such file or directory in runs/done; did you mean runs/done/final?"),
        ("runs/dome/final", "no such file or directory (runs/dome does not exist)."),
    ):  # fmt: skip
        proc = _run(["train", "--env", "guess", "--processor", "qwen3", "--model", model], tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines()[0].endswith(said), proc.stderr
