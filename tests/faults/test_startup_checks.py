"""The start-up checks (an env's seeds, its first prompt, its demonstrations) play env code
through the guarded boundary in the run's isolation mode: an env that raises, hangs or
segfaults there stops
`train`, `eval` and `sft` with exit status 1 and one sentence, no traceback."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

import hostile_envs as H
import pytest

from trl_env.config import RolloutConfig
from trl_env.errors import PluginOptionError
from trl_env.startup import EnvStartError, demonstrations, env_seeds, first_prompt
from trl_env.testing.fake_dist import (  # noqa: F401 - the fixture
    FakeDistributions,
    error_line,
    fake_distribution,
)

pytestmark = pytest.mark.timeout(300)

HERE = str(Path(__file__).resolve().parent)
MODES = ("thread", "process")
# (kind, isolation modes where it can be survived, what the sentence says)
KINDS = [
    ("raise", MODES, r"raised KeyError: 'the level file is missing'"),
    ("hang", MODES, r"took longer than the step timeout \(2s\)"),
    ("sleep", ("process",), r"took longer than the step timeout \(2s\)"),  # stuck in C
    ("segfault", ("process",), r"killed by SIGSEGV"),
]
CASES = [(kind, mode, words) for kind, modes, words in KINDS for mode in modes]
IDS = [f"{kind}-{mode}" for kind, mode, _ in CASES]


def config(mode: str) -> RolloutConfig:
    return RolloutConfig(env_isolation=mode, step_timeout=2.0)


def sentence(exc: EnvStartError, mode: str) -> str:
    text = str(exc)
    assert "\n" not in text and text.endswith(".")
    assert text.startswith(f"The env 'bad' failed its start-up check ({mode} isolation): ")
    return text


@pytest.mark.parametrize("mode", MODES)
def test_a_calm_env_passes_both_checks(qwen3, no_leaks, mode):
    assert env_seeds(H.Calm, "eval", 3, config(mode)) == ["eval-0", "eval-1", "eval-2"]
    prompt = first_prompt(H.Calm, qwen3.processor, config(mode))
    assert "Game train-0: the board is empty." in prompt and H.Calm.system_prompt in prompt


@pytest.mark.parametrize(("kind", "mode", "words"), CASES, ids=IDS)
def test_seeds_that_fail_are_one_sentence(no_leaks, kind, mode, words):
    source = functools.partial(H.StartFails, kind=kind, at="seeds")
    with pytest.raises(EnvStartError) as info:
        env_seeds(source, "train", 4, config(mode), "bad")
    text = sentence(info.value, mode)
    assert "asking the environment for its seeds" in text and re.search(words, text), text


@pytest.mark.parametrize(("kind", "mode", "words"), CASES, ids=IDS)
def test_a_reset_that_fails_is_one_sentence(qwen3, no_leaks, kind, mode, words):
    source = functools.partial(H.StartFails, kind=kind, at="reset")
    with pytest.raises(EnvStartError) as info:
        first_prompt(source, qwen3.processor, config(mode), "bad")
    text = sentence(info.value, mode)
    assert "resetting the environment" in text and re.search(words, text), text


@pytest.mark.parametrize("mode", MODES)
def test_demonstrations_are_read_behind_the_boundary(no_leaks, mode):
    source = functools.partial(H.StartFails, at="nowhere")
    assert demonstrations(source, ["train-0", "train-1"], config(mode)) == [["left", "up"]] * 2
    assert demonstrations(H.Calm, ["train-0"], config(mode)) is None  # no such extra


@pytest.mark.parametrize("mode", MODES)
def test_a_demonstration_has_the_declared_reset_deadline(no_leaks, mode):
    assert demonstrations(H.SlowDemonstration, ["train-0"], config(mode)) == [["left"]]


@pytest.mark.parametrize(
    ("kind", "mode", "words"),
    [*CASES, *(("wrong", m, r"returned str, not a list of actions") for m in MODES)],
    ids=[*IDS, "wrong-thread", "wrong-process"],
)
def test_a_demonstration_that_fails_is_one_sentence(no_leaks, kind, mode, words):
    source = functools.partial(H.StartFails, kind=kind, at="demonstrate")
    with pytest.raises(EnvStartError) as info:
        demonstrations(source, ["train-0", "train-1"], config(mode), "bad")
    text = sentence(info.value, mode)
    assert "demonstrate('train-0')" in text and re.search(words, text), text


@pytest.mark.parametrize("mode", MODES)
def test_options_the_factory_refuses_stay_a_usage_error(qwen3, no_leaks, mode):
    # A refusal of the user's options is theirs to fix: the factory's own sentence, exit 2, not
    # an env fault wrapped in "failed its start-up check".
    with pytest.raises(PluginOptionError) as info:
        first_prompt(H.refuses_its_options, qwen3.processor, config(mode), "bad")
    assert str(info.value) == "Could not create environment 'bad': width 3 is below height 5."
    assert info.value.exit_code == 2


def test_a_processor_that_fails_to_render_is_one_sentence(qwen3, no_leaks):
    processor = H.HostileProcessor(qwen3.processor, "append_user_input", "exit")
    with pytest.raises(EnvStartError) as info:
        first_prompt(H.Calm, processor, config("thread"), "bad")
    assert "the processor failed rendering the first prompt: SystemExit: 4" in str(info.value)


ENV_MODULE = """
import functools
import hostile_envs as H

reset_segfault = functools.partial(H.StartFails, kind="segfault", at="reset")
reset_hang = functools.partial(H.StartFails, kind="hang", at="reset")
reset_raise = functools.partial(H.StartFails, kind="raise", at="reset")
seeds_raise = functools.partial(H.StartFails, kind="raise", at="seeds")
demonstrate_segfault = functools.partial(H.StartFails, kind="segfault", at="demonstrate")
"""


@pytest.fixture
def cli(fake_distribution: FakeDistributions, tmp_path):  # noqa: F811
    """Runs `trl-env` with the hostile envs registered as startfail-NAME."""
    names = ("reset_segfault", "reset_hang", "reset_raise", "seeds_raise", "demonstrate_segfault")
    fake_distribution(
        "trl-env-startfail",
        envs={f"startfail-{n.replace('_', '-')}": f"startfail_envs:{n}" for n in names},
        modules={"startfail_envs": ENV_MODULE},
    )
    env = fake_distribution.env()
    env["PYTHONPATH"] = os.pathsep.join([HERE, env["PYTHONPATH"]])
    env.pop("TRL_ENV_PLUGINS", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        from trl_env.testing.fake_dist import run_cli

        return run_cli(*args, env=env, cwd=tmp_path, timeout=240)

    return run


TRAIN = ("train", "--processor", "qwen3", "--model", "tiny", "--max-steps", "1")


@pytest.mark.parametrize(
    ("env", "mode", "words"),
    [
        ("startfail-reset-segfault", "process", r"resetting the environment failed: .*SIGSEGV"),
        ("startfail-reset-hang", "thread", r"resetting the environment took longer than"),
    ],
)
def test_train_stops_in_one_sentence_when_an_env_fails_its_start_up_check(
    cli, tmp_path, env, mode, words
):
    out = tmp_path / "run"
    result = cli(*TRAIN, "--env", env, "--env-isolation", mode, "--step-timeout", "2",
                 "--output-dir", str(out))  # fmt: skip
    line = error_line(result)
    assert f"The env '{env}' failed its start-up check ({mode} isolation)" in line
    assert re.search(words, line), line


def test_eval_stops_in_one_sentence_when_the_seeds_fail(cli):
    result = cli("eval", "--env", "startfail-seeds-raise", "--processor", "qwen3",
                 "--episodes", "1", "--env-isolation", "process")  # fmt: skip
    line = error_line(result)
    assert "asking the environment for its seeds raised KeyError" in line


def test_sft_stops_in_one_sentence_when_a_demonstration_crashes_its_worker(cli, tmp_path):
    out = tmp_path / "run"
    result = cli("sft", "--env", "startfail-demonstrate-segfault", "--processor", "qwen3",
                 "--episodes", "2", "--env-isolation", "process",
                 "--output-dir", str(out))  # fmt: skip
    line = error_line(result)
    assert "failed its start-up check (process isolation)" in line
    assert re.search(r"demonstrate\('train-0'\) failed: .*SIGSEGV", line), line
    assert not out.exists()


@pytest.mark.parametrize(
    ("kind", "words", "timeout"),
    [("exit", r"failed its check against the tokenizer: SystemExit: 4", 120.0),
     ("hang", r"took longer than 1 s to render", 1.0)],
)  # fmt: skip
def test_a_processor_that_fails_its_check_against_the_tokenizer_is_one_sentence(
    qwen3, no_leaks, kind, words, timeout
):
    from trl_env.errors import TrlEnvError
    from trl_env.startup import processor_fits

    processor = H.HostileProcessor(qwen3.processor, "append_user_input", kind)
    with pytest.raises(TrlEnvError) as info:
        processor_fits(processor, qwen3.tokenizer, "hostile", timeout=timeout)
    assert re.search(words, str(info.value)) and "\n" not in str(info.value), str(info.value)
    processor_fits(qwen3.processor, qwen3.tokenizer, "qwen3")  # the real one fits
