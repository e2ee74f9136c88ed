"""``trl-env play``: interactive play over stdin, with an in-process toy env."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import ClassVar

import pytest
from click.testing import CliRunner

from trl_env.cli.main import cli
from trl_env.cli.play_cmd import parse_kv
from trl_env.errors import UsageError
from trl_env.registry import envs, register_env


class CountTo:
    """Reach ``goal`` by replying "+"; anything else is refused. Records options and closing."""

    made: ClassVar[list[CountTo]] = []

    def __init__(self, goal: int = 3, label: str = "count", max_turns: int = 10) -> None:
        self.goal, self.label, self.max_turns = goal, label, max_turns
        self.reward, self.alive, self.value, self.seed, self.closed = 0.0, False, 0, "", False
        self.actions: list[str] = []
        CountTo.made.append(self)

    system_prompt = "Reply + to count up."

    def seeds(self, split: str, count: int) -> list[str]:
        return [f"{split}-seed-{i}" for i in range(count)]

    def reset(self, seed: str) -> str:
        self.seed, self.value, self.alive = seed, 0, True
        return f"[{self.label}] at 0, goal {self.goal}"

    def step(self, action: str) -> str:
        self.actions.append(action)
        if action.strip() != "+":
            return "reply +"
        self.value += 1
        if self.value >= self.goal:
            self.alive, self.reward = False, 1.0
            return "done!"
        return f"at {self.value}"

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def toy() -> Iterator[type[CountTo]]:
    register_env("count-to", CountTo, replace=True)
    CountTo.made.clear()
    yield CountTo
    envs.unregister("count-to")


def play(*args: str, stdin: str = "") -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["play", "--env", "count-to", *args], input=stdin)
    return result.exit_code, result.output


def test_plays_to_the_end_and_reports_reward(toy: type[CountTo]) -> None:
    code, out = play("--env-arg", "goal=2", stdin="+\nhello\n+\n+\n")
    env = toy.made[-1]
    assert code == 0
    assert env.goal == 2 and env.actions == ["+", "hello", "+"]  # the 4th line is never read
    assert "Reply + to count up." in out and "[count] at 0, goal 2" in out
    assert "reply +" in out and "done!" in out
    assert "> hello\n" in out  # piped actions are echoed, so the output reads as a log
    assert "Reward: 1.000" in out and "episode over" in out and env.closed


def test_default_seed_is_first_eval_seed_and_seed_option_wins(toy: type[CountTo]) -> None:
    play(stdin="")
    assert toy.made[-1].seed == "eval-seed-0"
    play("--seed", "my seed", stdin="")
    assert toy.made[-1].seed == "my seed"


@pytest.mark.parametrize("stdin", ["", "+\n", "+\nquit\n+\n", "EXIT\n"])
def test_eof_or_quit_stops_early(toy: type[CountTo], stdin: str) -> None:
    code, out = play(stdin=stdin)
    env = toy.made[-1]
    assert code == 0 and env.alive
    assert env.actions == (["+"] if stdin.startswith("+") else [])
    assert "Reward: 0.000" in out and "stopped by you" in out and env.closed


def test_turn_limit_from_option_or_env(toy: type[CountTo]) -> None:
    code, out = play("--max-turns", "2", stdin="x\nx\nx\n")
    assert code == 0 and toy.made[-1].actions == ["x", "x"] and "turn limit (2)" in out
    play("--env-arg", "max_turns=1", stdin="x\nx\n")
    assert toy.made[-1].actions == ["x"]


def test_env_args_arrive_typed(toy: type[CountTo]) -> None:
    play("--env-arg", "goal=5", "--env-arg", "label='007'", stdin="")
    env = toy.made[-1]
    assert env.goal == 5 and env.label == "007"


def test_no_system_prompt_flag(toy: type[CountTo]) -> None:
    _, out = play("--no-system-prompt", stdin="")
    assert "Reply + to count up." not in out


def test_unknown_env_and_bad_option_are_one_line_errors(toy: type[CountTo]) -> None:
    result = CliRunner().invoke(cli, ["play", "--env", "count-too"], input="")
    assert result.exit_code != 0 and "count-to" in result.output  # did-you-mean suggestion
    code, out = play("--env-arg", "nope=1", stdin="")
    assert code != 0 and "nope" in out and "Traceback" not in out
    code, out = play("--env-arg", "goal", stdin="")
    assert code != 0 and "key=value" in out


def test_arrow_keys_are_not_actions_and_cost_no_turn(toy: type[CountTo]) -> None:
    # What a terminal sends for left, up (normal and application mode) and F5, then Enter.
    code, out = play("--max-turns", "2", stdin="\x1b[D\n\x1b[A\x1bOA\n\x1b[15~\n+\n+\n")
    env = toy.made[-1]
    assert code == 0 and env.actions == ["+", "+"]  # the special keys spent none of 2 turns
    assert out.count("special keys are not actions") == 3
    code, _ = play(stdin="\x1b[C+\n")
    assert toy.made[-1].actions == ["+"]  # a stray arrow beside an action is dropped from it


class Shouting(CountTo):
    """Sends terminal control sequences: a window title, an OSC 52 clipboard write, a clear."""

    system_prompt = "\x1b]0;pwned\x07Reply +."

    def reset(self, seed: str) -> str:
        super().reset(seed)
        return "\x1b]52;c;ZWNobyBwd25lZA==\x07start\x1b[2J\rhidden"


def test_env_text_is_printed_without_control_sequences() -> None:
    register_env("shouting", Shouting, replace=True)
    try:
        result = CliRunner().invoke(cli, ["play", "--env", "shouting"], input="")
    finally:
        envs.unregister("shouting")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "Reply +." in result.output and "start\\rhidden" in result.output


class WhereAmI:
    """Says which process it lives in."""

    def __init__(self) -> None:
        self.reward, self.alive = 0.5, True

    def reset(self, seed: str) -> str:
        return f"pid {os.getpid()}"

    def step(self, action: str) -> str:
        self.alive = False
        return f"pid {os.getpid()} got {action}"


def test_process_isolation_plays_in_a_worker_process() -> None:
    register_env("where-am-i", WhereAmI, replace=True)
    try:
        result = CliRunner().invoke(
            cli, ["play", "--env", "where-am-i", "--env-isolation", "process"], input="hi\n"
        )
    finally:
        envs.unregister("where-am-i")
    assert result.exit_code == 0, result.output
    pids = set(re.findall(r"pid (\d+)", result.output))
    assert len(pids) == 1 and str(os.getpid()) not in pids  # one worker, not this process
    assert "got hi" in result.output and "Reward: 0.500" in result.output


def test_parse_kv_reads_yaml_scalars() -> None:
    got = parse_kv(["a=7", "b=0.5", "c=true", "d=no", "e=hello world", "f='7'", "g=null", "h="])
    assert got == {
        "a": 7,
        "b": 0.5,
        "c": True,
        "d": False,
        "e": "hello world",
        "f": "7",
        "g": None,
        "h": "",
    }
    assert parse_kv(["x=a=b"]) == {"x": "a=b"}  # only the first = splits
    with pytest.raises(UsageError):
        parse_kv(["=3"])


def test_play_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import trl_env.cli.play_cmd\n"
        "bad = [m for m in ('torch', 'transformers', 'trl') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
