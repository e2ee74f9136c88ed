"""``trl-env check``: exit 0 when a processor fits, 1 when not, 2 on a usage error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trl_env import registry
from trl_env.cli.main import cli
from trl_env.models import model_path
from trl_env.testing.fake_dist import console_script

qwen = pytest.importorskip("trl_env_qwen")
llama = pytest.importorskip("trl_env_llama")


@pytest.fixture(scope="module")
def llama_dir() -> str:
    return model_path(None, llama.Llama31Processor())


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["check", *args])


def test_fits_exits_0() -> None:
    result = run("--processor", "qwen3")
    assert result.exit_code == 0, result.output
    assert "fits" in result.output and "<|im_end|>" in result.output


def test_qwen3_on_the_llama_tokenizer_exits_1(llama_dir: str) -> None:
    result = run("--processor", "qwen3", "--tokenizer", llama_dir)
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and "does not fit" in result.output
    assert "fits it: --processor llama3.1" in result.output  # whose own check passes there


def test_json_report(llama_dir: str) -> None:
    result = run("--processor", "qwen3", "--tokenizer", llama_dir, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["stop_tokens"] == {"<|im_end|>": None}
    assert report["first_difference"] and report["tokenizer"] == llama_dir
    assert {item["name"] for item in report["items"]} >= {"stop tokens", "segment tokens"}


def test_processor_args_are_typed() -> None:
    result = run("--processor", "qwen3", "--processor-arg", "thinking=false", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["processor"] == "qwen3 (thinking=False)"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--processor", "qwen9"],
        ["--processor", "qwen3", "--processor-arg", "thinking"],
        ["--processor", "qwen3", "--processor-arg", "thinking=maybe"],
        ["--processor", "qwen3", "--processor-arg", "colour=red"],
        ["--processor", "qwen3", "--tokenizer", "./no-such-tokenizer-dir"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_an_unloadable_tokenizer_is_one_line_said_once(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{")
    result = run("--processor", "qwen3", "--tokenizer", str(tmp_path))
    assert result.exit_code == 2
    assert result.output.count("Could not load a tokenizer") == 1
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1


def test_no_tiny_model_without_a_spec_is_a_usage_error() -> None:
    class Bare(qwen.Qwen3Processor):
        tiny_spec = None

    registry.register_processor("bare-test", Bare)
    result = run("--processor", "bare-test")
    assert result.exit_code == 2
    assert "--tokenizer" in result.output


def test_the_installed_script(llama_dir: str) -> None:
    script = console_script()
    ok = subprocess.run(
        [script, "check", "--processor", "llama3.1"], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(
        [script, "check", "--processor", "qwen3", "--tokenizer", llama_dir, "--json"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1, bad.stderr
    assert json.loads(bad.stdout)["ok"] is False
