"""trl-env 0.1.x envs and six-string processors, played through ``trl_env.compat``.

The env below is written the way 0.1.x's ``Env`` protocol asks (``reset``/``step`` return
``(env, text)``, here a new env each time; ``reward`` and ``alive`` attributes). The processor
is 0.1.x's qwen3 one, given as its six strings; the model is the tiny offline qwen3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from trl_env.compat import v01_env, v01_processor
from trl_env.episode import Status
from trl_env.errors import TrlEnvError
from trl_env.rollout import batch_rollout

# 0.1.x's qwen3 processor, as its six strings (data of the Qwen3 chat format)
QWEN3_V01 = {
    "prefix_system": "<|im_start|>system\n",
    "suffix_system": "<|im_end|>\n",
    "prefix_user": "<|im_start|>user\n",
    "suffix_user": "<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "begin_answer": "</think>",
    "end_answer": "<|im_end|>",
}
SYSTEM = "Count down: answer anything, once per number."


class Countdown:
    """A 0.1.x env: immutable, each call returns the env to use next."""

    def __init__(self, left: int = 0, actions: tuple[str, ...] = ()) -> None:
        self.left = left
        self.actions = actions
        self.alive = left > 0
        self.reward = float(sum(len(a) for a in actions))

    def reset(self, seed: str) -> tuple[Countdown, str]:
        left = int(seed) % 3 + 2
        return Countdown(left), f"Count down from {left}."

    def step(self, action: str) -> tuple[Countdown, str]:
        after = Countdown(self.left - 1, (*self.actions, action))
        return after, f"{after.left} left."


def test_a_v01_env_plays_through_v01_env_with_its_processor(qwen3):
    processor = v01_processor(**QWEN3_V01)
    seeds = ["0", "1", "2", "3"]
    episodes = batch_rollout(
        seeds,
        env=v01_env(Countdown, system_prompt=SYSTEM),
        processor=processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=6,
        max_turns=10,
        seed=0,
    )
    decode = qwen3.tokenizer.decode
    for seed, ep in zip(seeds, episodes, strict=True):
        left = int(seed) % 3 + 2
        assert ep.status == Status.DONE, ep.error
        assert ep.turns == left  # the env's alive ended it
        # the first prompt is 0.1.x's: system, then the env's first text as a user turn
        first = f"Count down from {left}."
        assert decode(ep.prompt_ids) == (
            processor.init_system_input(SYSTEM) + processor.append_user_input(first)
        )
        # every env text after a step is inserted as a user turn, masked, in order
        runs, run = [], []
        for token, m in zip(ep.completion_ids, ep.env_mask, strict=True):
            if m == 0:
                run.append(token)
            elif run:
                runs.append(decode(run))
                run = []
        expected = [processor.append_user_input(f"{k} left.") for k in range(left - 1, 0, -1)]
        inserted = [r.removeprefix(QWEN3_V01["end_answer"]) for r in runs]
        assert inserted == expected
        # the env saw the action 0.1.x's parsing gives for each turn: its reward says how long
        actions = [
            processor.parse_agent_output(m["content"])[1]
            for m in ep.messages
            if m["role"] == "assistant"
        ]
        assert len(actions) == left
        assert ep.reward == float(sum(len(a) for a in actions))


class Tally:
    """A 0.1.x env whose ``reset`` returns one env every episode shares (0.1.x let it)."""

    def __init__(self) -> None:
        self.left, self.alive, self.reward = 0, False, 0.0

    def reset(self, seed: str) -> tuple[Tally, str]:
        TALLY.left, TALLY.alive = 3, True
        return TALLY, "Count down from 3."

    def step(self, action: str) -> tuple[Tally, str]:
        self.left -= 1
        self.alive = self.left > 0
        return self, f"{self.left} left."


TALLY = Tally()


def shared_tally() -> Tally:
    return TALLY


@pytest.mark.parametrize("factory", [Tally, shared_tally], ids=["reset", "factory"])
def test_one_0_1_env_for_several_episodes_is_refused_as_without_compat(qwen3, factory):
    def play(seeds: list[str]) -> list[Any]:
        return batch_rollout(
            seeds,
            env=v01_env(factory, system_prompt=SYSTEM),
            processor=v01_processor(**QWEN3_V01),
            tokenizer=qwen3.tokenizer,
            model=qwen3.model,
            max_new_tokens=4,
            max_turns=5,
        )

    # Four episodes used to play silently on one env, their turns mixed into one count.
    episodes = play(["0", "1", "2", "3"])
    played = [ep for ep in episodes if ep.status != Status.ERROR]
    refused = [ep for ep in episodes if ep.status == Status.ERROR]
    assert len(played) == 1 and played[0].turns == 3, [ep.error for ep in episodes]
    for ep in refused:
        assert "returned the env that another episode plays now" in ep.error, ep.error
    # once its episode is over, the env may play another
    (again,) = play(["4"])
    assert again.status == Status.DONE, again.error


def test_the_six_strings_parse_and_render_as_0_1_did():
    p = v01_processor(**QWEN3_V01)
    assert p.parse_agent_output("plan</think>\n\nup<|im_end|>junk") == ("plan", "\n\nup")
    assert p.parse_agent_output("a</think>b</think>c") == ("a</think>b", "c")
    assert p.parse_agent_output("no tags here") == ("", "no tags here")
    assert p.append_user_input("hi").startswith("<|im_start|>user\nhi<|im_end|>")
    assert p.stop_tokens == ("<|im_end|>",) and p.turn_close == "<|im_end|>"
    assert p.turn_separator == ""  # 0.1.x wrote nothing between turns
    assert v01_processor(**QWEN3_V01, turn_separator="\n").turn_separator == "\n"


def test_a_type1_config_or_processor_object_is_read_for_its_strings():
    @dataclass
    class Type1ProcessorConfig:  # 0.1.x's config: six string fields
        prefix_system: str
        suffix_system: str
        prefix_user: str
        suffix_user: str
        begin_answer: str
        end_answer: str

    config = Type1ProcessorConfig(**QWEN3_V01)

    class Type1Processor:
        def __init__(self, config):
            self.config = config

    for given in (config, Type1Processor(config)):
        p = v01_processor(given)
        assert p.init_system_input("S") == "<|im_start|>system\nS<|im_end|>\n"


def test_mistakes_are_one_sentence():
    with pytest.raises(TrlEnvError, match="lacks end_answer"):
        v01_processor(**{k: v for k, v in QWEN3_V01.items() if k != "end_answer"})
    with pytest.raises(TrlEnvError, match="has no 'suffix_assistant'"):
        v01_processor(**QWEN3_V01, suffix_assistant="")
    with pytest.raises(TrlEnvError, match="not 'Countdown'"):
        v01_env(Countdown(3))  # an instance: every episode needs an env of its own

    class Broken(Countdown):
        def reset(self, seed):
            return f"text only {seed}"

    env = v01_env(Broken)()
    with pytest.raises(TrlEnvError, match=r"returns \(env, text\); Broken.reset returned str"):
        env.reset("1")


def test_extras_and_system_prompt_come_through():
    class WithExtras(Countdown):
        system_prompt = "from the env"

        def reset(self, seed):
            return WithExtras(2), "go"

        def close(self):
            self.closed = True

    env = v01_env(WithExtras)()
    assert env.system_prompt == "from the env"  # the env's own, when v01_env gives none
    assert v01_env(WithExtras, system_prompt="given")().system_prompt == "given"
    assert env.reset("0") == "go"
    assert env.alive and env.reward == 0.0
    env.close()  # the current env's (the one reset returned)
    assert env._env.closed
    assert not hasattr(env, "seeds")  # an extra the env lacks stays missing (its default holds)
