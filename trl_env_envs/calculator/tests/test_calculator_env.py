"""The calculator env: checkable problems, working tools, readable errors, conformance."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

import pytest

from trl_env import load_env
from trl_env.testing.envs import (
    check_answer_decides_success,
    check_env,
    check_same_output_under_hash_seeds,
)
from trl_env.tools import Task
from trl_env_calculator import PROBLEMS, CalculatorEnv, add, divide, multiply, subtract
from trl_env_calculator.problems import BY_OPERATIONS, TEMPLATES


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_tools_compute_and_tidy_results() -> None:
    assert add(2, 3) == 5
    assert subtract(2.5, 0.5) == 2 and isinstance(subtract(2.5, 0.5), int)
    assert multiply(1.5, 3) == 4.5
    assert divide(12, 4) == 3 and isinstance(divide(12, 4), int)
    assert divide(1, 4) == 0.25
    with pytest.raises(ZeroDivisionError, match="cannot divide by zero"):
        divide(1, 0)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.__name__)
def test_every_template_has_a_positive_whole_answer(template: Callable[..., Task]) -> None:
    rng = random.Random(7)
    for _ in range(200):
        task = template(rng)
        assert isinstance(task.answer, int) and task.answer > 0, task
        assert task.question.endswith("?")


def test_problems_are_deterministic_and_splits_disjoint() -> None:
    env = CalculatorEnv()
    train = [PROBLEMS(s).question for s in env.seeds("train", 200)]
    evals = [PROBLEMS(s).question for s in env.seeds("eval", 60)]
    assert train == [PROBLEMS(s).question for s in env.seeds("train", 200)]
    assert not set(train) & set(evals)
    assert len(set(train)) > 190  # hardly any repeats


def test_solving_with_the_tools_scores_one() -> None:
    env = load_env("calculator")
    assert isinstance(env, CalculatorEnv)
    question = env.reset("train-2")
    assert question == (
        "Dara has 238 coins, then buys 26 packs of 33 coins each. "
        "How many coins does Dara have now?"
    )
    assert env.step(call("multiply", a=26, b=33)) == "<tool_response>\n858\n</tool_response>"
    assert env.step(call("add", a=238, b=858)) == "<tool_response>\n1096\n</tool_response>"
    assert env.step("<answer>1096</answer>") == "Your answer was recorded: 1096"
    assert (env.alive, env.reward) == (False, 1.0)


def test_divide_by_zero_and_bad_calls_are_readable_and_the_episode_goes_on() -> None:
    env = CalculatorEnv()
    env.reset("eval-0")
    reply = env.step(call("divide", a=1, b=0) + call("power", a=2, b=3) + call("add", a="x", b=1))
    assert reply.splitlines()[1] == "Error: divide raised ZeroDivisionError: cannot divide by zero"
    assert "Error: unknown tool 'power'. Available tools: add, subtract, multiply, divide." in reply
    assert "Error: bad arguments for add: argument 'a' must be number" in reply
    assert env.alive
    env.step("<answer>0</answer>")
    assert env.reward == 0.0


@pytest.mark.parametrize(
    ("call_format", "action", "expected"),
    [
        (
            "json",
            '{"name": "multiply", "arguments": {"a": 6, "b": 7}}',
            '{"name": "multiply", "result": "42"}',
        ),
        ("python", "multiply(6, 7)", ">>> multiply(6, 7)\n42"),
    ],
)
def test_other_call_formats(call_format: str, action: str, expected: str) -> None:
    env = CalculatorEnv(call_format=call_format)
    env.reset("train-0")
    assert env.step(action) == expected


@pytest.mark.parametrize("operations", [0, 1, 3])
def test_conformance(operations: int) -> None:
    # The class itself where it can be: the kit then checks the declared options too.
    check_env(
        CalculatorEnv if not operations else lambda: CalculatorEnv(operations=operations),
        actions=[call("add", a=1, b=2), call("divide", a=1, b=0), "<answer>42</answer>", "x"],
        reward_range=(0.0, 1.0),
        episodes=10,
        examples=15,
    )


def test_problems_do_not_depend_on_hash_randomization() -> None:
    # The problems alone, not the env: two interpreters importing transformers take long.
    script = (
        "from trl_env_calculator.problems import PROBLEMS\n"
        "print([PROBLEMS(f'{s}-{i}') for s in ('train', 'eval') for i in range(20)])"
    )
    assert "Task(" in check_same_output_under_hash_seeds(script, what="calculator problems")


@pytest.mark.parametrize(
    "template", [t for group in BY_OPERATIONS.values() for t in group], ids=lambda t: t.__name__
)
def test_every_curriculum_template_has_a_positive_whole_answer(
    template: Callable[..., Task],
) -> None:
    test_every_template_has_a_positive_whole_answer(template)


def test_one_operation_problems_need_exactly_one_operation() -> None:
    env = CalculatorEnv(operations=1)
    for seed in env.seeds("train", 40) + env.seeds("eval", 10):
        env.reset(seed)
        assert env.task is not None
        a, b = map(int, re.findall(r"[0-9]+", env.task.question))
        assert env.task.answer in {a + b, a - b, a * b, a // b, b // a}, env.task.question


@pytest.mark.parametrize("operations", [1, 3])
def test_easiest_and_hardest_problems_play_and_success_follows_the_answer(
    operations: int,
) -> None:
    env = load_env("calculator", operations=operations)
    assert isinstance(env, CalculatorEnv)
    questions = set()
    for seed in ["train-0", "train-1", "eval-0", "eval-1"]:
        questions.add(env.reset(seed))
        assert env.task is not None and env.success is False
        numbers = [int(n) for n in re.findall(r"[0-9]+", env.task.question)]
        assert len(numbers) == (2 if operations == 1 else 4)
        # A real tool call first, then the env's known answer.
        assert "Error" not in env.step(call("multiply", a=numbers[0], b=numbers[1]))
        check_answer_decides_success(env, seed, env.task.answer)
    assert len(questions) == 4


def test_no_answer_is_no_success() -> None:
    env = CalculatorEnv(max_turns=1)
    env.reset("train-3")
    env.step(call("add", a=1, b=2))
    assert not env.alive and env.answer is None and env.success is False


def test_default_problems_are_the_standard_mix() -> None:
    # operations=0 keeps the problems every earlier run trained and evaluated on.
    for seed in ["train-0", "eval-5"]:
        assert CalculatorEnv().reset(seed) == PROBLEMS(seed).question
        assert CalculatorEnv(operations=2).reset(seed) != CalculatorEnv(operations=3).reset(seed)
