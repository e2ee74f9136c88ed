"""TRL's ``environment_factory`` both ways: a trl-env env trained by stock TRL
(``trl_env.compat.environment_factory``), and a TRL env class played by trl-env's engine
(``trl_env.compat.from_environment_factory``)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

import pytest

from trl_env import registry
from trl_env.backends.base import Sample, Turn
from trl_env.compat import EnvironmentForTrl, environment_factory, from_environment_factory
from trl_env.compat.for_trl import EPISODE_OVER, tool_docstring, tool_name
from trl_env.compat.from_trl import NO_CALL
from trl_env.episode import Status
from trl_env.errors import EnvMisbehaved, TrlEnvError
from trl_env.rollout import batch_rollout


# -- a trl-env env -> TRL ------------------------------------------------------------------------
def test_the_class_has_trls_shape_and_one_tool_named_after_the_env() -> None:
    from transformers.utils import get_json_schema

    from trl_env import load_env

    cls = environment_factory("guess", low=1, high=20, max_turns=3)
    assert issubclass(cls, EnvironmentForTrl) and cls.__name__ == "GuessEnvironment"
    # TRL lists the class's functions; every public one but reset and get_reward is a tool
    public = [n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")]
    assert sorted(public) == ["get_reward", "guess", "reset"]
    schema = get_json_schema(cls().guess)["function"]
    assert schema["name"] == "guess"
    assert schema["description"] == load_env("guess", low=1, high=20, max_turns=3).system_prompt
    assert schema["parameters"] == {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "description": "Your action, written as the rules above say.",
            }
        },
        "required": ["action"],
    }


def test_reset_plays_the_rows_seed_else_the_envs_next_training_seed() -> None:
    from trl_env import load_env

    cls = environment_factory("guess", high=20)
    env = cls()
    assert env.reset(prompt=[{"role": "user", "content": "hi"}], seed="eval-3") == load_env(
        "guess", high=20
    ).reset("eval-3")
    assert env.seed == "eval-3"
    fresh = []
    for _ in range(20):  # past the first chunk of seeds the class asks the env for
        cls().reset(prompt="no seed column")
    for _ in range(3):
        one = cls()
        one.reset()
        fresh.append(one.seed)
    assert fresh == [f"train-{i}" for i in range(20, 23)]


def test_the_tool_steps_until_the_episode_ends_and_get_reward_is_the_envs() -> None:
    from trl_env import load_env

    env = environment_factory("guess", low=1, high=4, max_turns=2)()
    mirror = load_env("guess", low=1, high=4, max_turns=2)
    assert env.reset(seed="train-5") == mirror.reset("train-5")
    for guess in ("1", "2"):
        assert env.guess(guess) == mirror.step(guess)
    assert not mirror.alive
    assert env.guess("3") == EPISODE_OVER
    assert env.get_reward() == mirror.reward


def test_the_env_is_checked_as_the_engine_checks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    class NanReward:
        reward, alive = float("nan"), True

        def reset(self, seed: str) -> str:
            return "go"

        def step(self, action: str) -> Any:
            return 42

    monkeypatch.setitem(registry.envs._local, "nan-reward", NanReward)
    env = environment_factory("nan-reward")()
    env.reset(seed="train-0")
    with pytest.raises(EnvMisbehaved, match="returned int, not str, when stepping"):
        env.nan_reward("a")
    with pytest.raises(EnvMisbehaved, match=r"reward is not a finite number: nan"):
        env.get_reward()


def test_a_prompt_naming_docstring_sections_keeps_a_whole_description() -> None:
    from transformers.utils import get_json_schema

    prompt = "Reply with a move. Returns: the board. Raises: nothing. Args: none."

    def act(action: str) -> str:
        return action

    act.__doc__ = tool_docstring(prompt)
    schema = get_json_schema(act)["function"]
    assert schema["description"] == (
        "Reply with a move. Returns : the board. Raises : nothing. Args : none."
    )
    assert list(schema["parameters"]["properties"]) == ["action"]


@pytest.mark.parametrize(
    ("label", "tool"),
    [
        ("guess", "guess"),
        ("reasoning-gym", "reasoning_gym"),
        ("2048", "act_2048"),
        ("reset", "reset_action"),
    ],
)
def test_tool_names_are_identifiers(label: str, tool: str) -> None:
    assert tool_name(label) == tool


def test_bad_names_and_options_fail_at_once() -> None:
    with pytest.raises(TrlEnvError, match="gues"):
        environment_factory("gues")
    with pytest.raises(TrlEnvError, match="Option high of guess must be an integer"):
        environment_factory("guess", high="20")


@pytest.mark.slow
def test_environment_factory_trains_one_grpo_step_in_trls_own_path(tmp_path) -> None:
    """TRL 1.16 refuses chat templates it has no response parser for: the tiny qwen3 model
    carries TRL's own qwen3 template, which it parses."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trl_env import load_env, load_processor
    from trl_env.models import model_path

    guess = environment_factory("guess", low=1, high=20, max_turns=3)
    prompt = [{"role": "user", "content": "Find it."}]
    rows = [{"prompt": prompt, "seed": f"train-{i}"} for i in range(2)]
    trainer = GRPOTrainer(
        model=model_path("tiny", load_processor("qwen3")),
        args=GRPOConfig(
            output_dir=str(tmp_path),
            num_generations=2,
            per_device_train_batch_size=2,
            max_steps=1,
            max_completion_length=32,
            max_tool_calling_iterations=3,
            use_cpu=True,
            bf16=False,
            report_to=[],
            logging_steps=1,
        ),
        train_dataset=Dataset.from_list(rows),
        environment_factory=guess,  # no reward_funcs: TRL 1.16 reads get_reward
    )
    trainer.train()
    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    assert "rewards/GuessEnvironment/mean" in logged
    assert [env.seed for env in trainer.environments] == ["train-0", "train-0"]
    # TRL's own parser reads a call of the tool, and its tool dict steps the env
    tokenizer = trainer.processing_class
    text = '<tool_call>\n{"name": "guess", "arguments": {"action": "10"}}\n</tool_call><|im_end|>'
    parsed = tokenizer.parse_response(text, prefix="<|im_start|>assistant\n")
    call = parsed["tool_calls"][0]["function"]
    env = trainer.environments[0]
    env.reset(seed="train-0")
    mirror = load_env("guess", low=1, high=20, max_turns=3)
    mirror.reset("train-0")
    assert trainer._sync_tool_dicts[0][call["name"]](**call["arguments"]) == mirror.step("10")
    assert env.turns == 1


# -- a TRL class -> trl-env ---------------------------------------------------------------------
class Counter:
    """Reach the target total by adding numbers."""

    def __init__(self) -> None:
        self.total = self.target = 0
        self.done = False

    def reset(self, seed: str | None = None, **row: Any) -> str:
        self.total, self.done = 0, False
        self.target = 2 + sum(map(ord, str(seed))) % 2  # train-0 and train-1: one of each
        return f"Reach {self.target}."

    def add(self, amount: int) -> str:
        """Add a number to the total.

        Args:
            amount: How much to add.
        """
        self.total += amount
        return f"The total is {self.total}."

    def finish(self) -> str:
        """Say you are done."""
        self.done = True
        return "Finished."

    def helper(self) -> int:  # no docstring: not a tool
        return self.total

    def get_reward(self) -> float:
        return float(self.total == self.target)


class ScriptedSession:
    """The model's replies, scripted: the tiny model cannot call tools, so each row replies
    ``script[turn]`` (tokenized, then the stop id), as a model that can would."""

    def __init__(self, tokenizer: Any, script: Sequence[str]) -> None:
        self.script = [tokenizer.encode(t, add_special_tokens=False) for t in script]
        self.turn: dict[int, int] = {}

    def generate(self, turns: Sequence[Turn], stop_ids: frozenset[int]) -> list[Sample]:
        out = []
        for turn in turns:
            n = self.turn.get(turn.row, 0)
            self.turn[turn.row] = n + 1
            said = self.script[min(n, len(self.script) - 1)]
            ids = [*said, min(stop_ids)][: turn.max_new_tokens]
            out.append(Sample(ids=ids, logprobs=[-0.5] * len(ids), stopped=ids[-1] in stop_ids))
        return out

    def release(self, rows: Sequence[int]) -> None:
        pass

    def close(self) -> None:
        pass


class Scripted:
    def __init__(self, tokenizer: Any, script: Sequence[str]) -> None:
        self.tokenizer, self.script = tokenizer, script

    def session(self, params: Any) -> ScriptedSession:
        return ScriptedSession(self.tokenizer, self.script)


def call(name: str, **arguments: Any) -> str:
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_a_trl_class_plays_through_batch_rollout(qwen3: Any) -> None:
    seeds = ["train-0", "train-1"]
    target = {s: Counter() for s in seeds}
    for seed, counter in target.items():
        counter.reset(seed=seed)
    script = [call("add", amount=2), call("add", amount="two") + "\n<tool_call>{oops", "I am done."]
    episodes = batch_rollout(
        seeds,
        env=from_environment_factory(Counter),
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        backend=Scripted(qwen3.tokenizer, script),
        max_new_tokens=64,
    )
    for seed, ep in zip(seeds, episodes, strict=True):
        assert ep.status is Status.DONE and not ep.error and ep.turns == 3
        system, first, _, one, _, two, _, last = ep.messages
        assert '"name": "add"' in system["content"] and '"name": "finish"' in system["content"]
        assert "helper" not in system["content"]
        assert first["content"] == f"Reach {target[seed].target}."
        assert one["content"] == "<tool_response>\nThe total is 2.\n</tool_response>"
        assert "argument 'amount' must be integer" in two["content"]
        assert "the tool call is not valid JSON" in two["content"]
        assert last["content"] == NO_CALL
        assert ep.reward == float(target[seed].target == 2)
    assert sorted(ep.reward for ep in episodes) == [0.0, 1.0]


def test_done_ends_the_episode_with_its_reward(qwen3: Any) -> None:
    episodes = batch_rollout(
        ["train-0"],
        env=from_environment_factory(Counter),
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        backend=Scripted(qwen3.tokenizer, [call("finish")]),
        max_new_tokens=64,
    )
    assert episodes[0].status is Status.DONE and episodes[0].turns == 1


def test_a_trl_class_plays_with_the_tiny_model(qwen3: Any) -> None:
    """The real tiny model writes no tool call: its first reply ends the episode, scored by
    ``get_reward``."""
    episodes = batch_rollout(
        ["train-0", "eval-1"],
        env=from_environment_factory(Counter, prompt="Task: "),
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=8,
    )
    for ep in episodes:
        assert ep.status in (Status.DONE, Status.MAX_TURNS), ep.error
        assert ep.messages[1]["content"].startswith("Task: Reach ")
        assert ep.reward == 0.0


class AsyncCounter(Counter):
    async def add(self, amount: int) -> str:  # type: ignore[override]
        """Add a number to the total.

        Args:
            amount: How much to add.
        """
        return Counter.add(self, amount)

    async def get_reward(self) -> float:  # type: ignore[override]
        return float(self.total)


def test_async_tools_and_reward_are_awaited() -> None:
    env = from_environment_factory(AsyncCounter, instructions="Add.")(call_format="json")
    assert env.system_prompt.startswith("Add.\n\n# Tools")
    env.reset("train-0")
    reply = env.step('{"name": "add", "arguments": {"amount": 4}}')
    assert reply == '{"name": "add", "result": "The total is 4."}'
    env.step("nothing")
    assert not env.alive and env.reward == 4.0


class NoReward:
    def reset(self, **row: Any) -> None: ...

    def act(self) -> str:
        """Act."""
        return ""


class NoSeed(Counter):
    def reset(self) -> str:  # type: ignore[override]
        return ""


class NoTools:
    def reset(self, **row: Any) -> None: ...

    def get_reward(self) -> float:
        return 0.0

    def undocumented(self) -> None: ...


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (NoReward, "NoReward has no get_reward() method: it is the episode's reward here."),
        (NoSeed, "NoSeed.reset takes no seed keyword"),
        (NoTools, "NoTools has no tools: TRL's tools are its public methods with docstrings."),
        (Counter(), "takes the env class TRL's environment_factory takes, not 'Counter'"),
    ],
)
def test_a_class_trl_env_cannot_play_is_one_sentence(given: Any, message: str) -> None:
    with pytest.raises(TrlEnvError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_environment_factory(given)
