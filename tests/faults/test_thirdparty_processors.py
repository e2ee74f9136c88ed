"""A processor or an ``on_episode_end`` hook that raises, exits, hangs or returns odd values ends
only its own episode (status ``error``, one sentence); the batch goes on, in both isolation
modes. Played on the tiny qwen3 model with its real processor wrapped."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import hostile_envs as H
import pytest
from playing import play_tiny

from trl_env.episode import Episode
from trl_env.hookspecs import hookimpl
from trl_env.plugins import manager

pytestmark = pytest.mark.timeout(180)

SEEDS = ["s0", "bad-1", "s2", "s3"]
STEP_TIMEOUT = 2.0  # generous: a loaded machine must not time out the calm episodes
TIMED_OUT = r"took longer than the step timeout \(2s\)"


def play(
    stack: Any, processor: Any, mode: str = "thread", env: Any = H.Calm, **kw: Any
) -> list[Episode]:
    options = {"seed": 11, "step_timeout": STEP_TIMEOUT, "error_reward": -1.0, **kw}
    return play_tiny(stack, env, SEEDS, mode, processor=processor, **options)


def trace(ep: Episode) -> tuple[Any, ...]:
    return ep.seed, ep.status, ep.reward, ep.prompt_ids, ep.completion_ids, ep.env_mask


@pytest.fixture(scope="module")
def calm(qwen3) -> list[Episode]:
    return play(qwen3, H.HostileProcessor(qwen3.processor, "none", "none"))


PROCESSOR_CASES = [
    ("parse_agent_output", "raise", r"failed parsing the model output: ValueError: the regex"),
    ("parse_agent_output", "exit", r"failed parsing the model output: SystemExit: 4"),
    ("parse_agent_output", "interrupt", r"failed parsing the model output: KeyboardInterrupt"),
    ("parse_agent_output", "hang", TIMED_OUT + " parsing the model output"),
    ("parse_agent_output", "sleep", TIMED_OUT + " parsing the model output"),
    ("parse_agent_output", "unprintable", r"RuntimeError: no text for you"),
    ("parse_agent_output", "bytes", r"returned bytes as the action"),
    ("append_user_input", "raise", r"failed rendering the first prompt: ValueError"),
    ("append_user_input", "exit", r"failed rendering the first prompt: SystemExit"),
    ("append_user_input", "int", r"failed rendering the first prompt: TypeError"),
    ("append_user_input", "hang", TIMED_OUT + " rendering the first prompt"),
]


@pytest.mark.parametrize(
    ("method", "kind", "words"), PROCESSOR_CASES, ids=[f"{m}-{k}" for m, k, _ in PROCESSOR_CASES]
)
def test_a_hostile_processor_call_ends_only_its_episode(qwen3, calm, no_leaks, method, kind, words):
    episodes = play(qwen3, H.HostileProcessor(qwen3.processor, method, kind))
    hit = [i for i, ep in enumerate(episodes) if ep.status != "done"]
    assert len(hit) == 1, [(ep.status, ep.error) for ep in episodes]
    ep = episodes[hit[0]]
    assert ep.status == "error" and ep.reward == -1.0
    assert re.search(words, ep.error), ep.error
    assert "\n" not in ep.error
    for i, (got, want) in enumerate(zip(episodes, calm, strict=True)):
        if i != hit[0]:
            assert trace(got) == trace(want)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_parser_that_exits_ends_one_episode_in_either_isolation_mode(qwen3, calm, mode):
    episodes = play(qwen3, H.HostileProcessor(qwen3.processor, "parse_agent_output", "exit"), mode)
    assert sorted(ep.status for ep in episodes) == ["done", "done", "done", "error"]


def test_an_action_whose_len_lies_reaches_the_env_as_a_real_str(qwen3, calm):
    episodes = play(qwen3, H.HostileProcessor(qwen3.processor, "parse_agent_output", "lying"))
    assert [ep.status for ep in episodes] == ["done"] * 4
    actions = [m["content"] for ep in episodes for m in ep.messages if m["role"] == "assistant"]
    long = [a for a in actions if len(a) == 500]
    assert len(long) == 1 and type(long[0]) is str
    # the env counted the real length, not the 3 that __len__ claims
    replies = [m["content"] for ep in episodes for m in ep.messages if m["role"] == "user"]
    assert any("you wrote 500 characters" in r for r in replies)


@pytest.fixture
def hook() -> Iterator[Any]:
    """Registers a hostile on_episode_end hook plugin for one test."""
    registered: list[str] = []

    def register(kind: str) -> H.HostileHook:
        plugin = H.HostileHook(kind)
        hookimpl(plugin.on_episode_end.__func__)
        name = f"hostile-hook-{kind}-{len(registered)}"
        manager().register(plugin, name)
        registered.append(name)
        return plugin

    yield register
    for name in registered:
        manager().unregister(name)


HOOK_CASES = [
    ("raise", r"failed in on_episode_end: ValueError: the regex gave up"),
    ("exit", r"failed in on_episode_end"),
    ("interrupt", r"on_episode_end hook failed: KeyboardInterrupt"),
    ("hang", r"on_episode_end hook took longer than the step timeout \(2s\)"),
    ("sleep", r"on_episode_end hook took longer than the step timeout \(2s\)"),
]


# hooks run in the trainer in both modes: two kinds under process isolation show it
HOOK_RUNS = [(*case, "thread") for case in HOOK_CASES] + [
    (*case, "process") for case in HOOK_CASES if case[0] in ("raise", "hang")
]


@pytest.mark.parametrize(
    ("kind", "words", "mode"), HOOK_RUNS, ids=[f"{k}-{m}" for k, _, m in HOOK_RUNS]
)
def test_a_hostile_hook_ends_only_its_episode(qwen3, calm, hook, no_leaks, kind, words, mode):
    plugin = hook(kind)
    handed: list[tuple[str, str]] = []
    episodes = play(
        qwen3, qwen3.processor, mode, on_episode=lambda ep: handed.append((ep.seed, ep.status))
    )
    assert sorted(plugin.heard) == sorted(SEEDS)
    bad = episodes[1]
    assert bad.status == "error" and bad.reward == -1.0 and re.search(words, bad.error), bad.error
    assert [ep.status for i, ep in enumerate(episodes) if i != 1] == ["done"] * 3
    # on_episode gets each episode once, after its hooks, with its final status
    assert sorted(handed) == sorted((ep.seed, ep.status) for ep in episodes)


class SlowDel(H.DelRecorder):
    block = 30.0  # past the step timeout: the close job's deadline stops it


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the stopped del
@pytest.mark.parametrize("env", [H.DelRecorder, SlowDel], ids=["del", "slow-del"])
def test_an_envs_del_runs_on_the_pool_with_a_deadline(qwen3, calm, env):
    H.DELETED_ON.clear()
    episodes = play(qwen3, qwen3.processor, env=env)
    assert [ep.status for ep in episodes] == ["done"] * 4
    # each env was let go in its close job, on a pool thread, never on the scheduler's
    assert len(H.DELETED_ON) == 4 and set(H.DELETED_ON) == {"trl-env-call"}, H.DELETED_ON
