"""The python env: code blocks run in the sandbox, output is the delta, answers are scored."""

from __future__ import annotations

import random

import pytest

from trl_env import Env, load_env
from trl_env.testing.envs import (
    check_answer_decides_success,
    check_env,
    check_same_output_under_hash_seeds,
)
from trl_env_python import PROBLEMS, PythonEnv, extract_code
from trl_env_python.code_blocks import fenced_python, wrap_output
from trl_env_python.tasks import TEMPLATES, count_divisible, count_divisors


# -- finding code --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "source", "style"),
    [
        ("Let me compute.\n```python\nprint(1)\n```\nDone.", "print(1)\n", "fence"),
        ("```py\na = 1\n```\ntext\n```python3\nprint(a)\n```", "a = 1\n\nprint(a)\n", "fence"),
        ("```PYTHON\nx\n```", "x\n", "fence"),
        ("cut off ```python\nprint(2)", "print(2)", "fence"),
        ("<code>print(3)</code>", "print(3)", "tag"),
        ("<code>a=1</code> then <code>print(a)</code>", "a=1\nprint(a)", "tag"),
        ("```python\nfence wins\n```<code>tag</code>", "fence wins\n", "fence"),
        ("```bash\nrm -rf /\n```\n```\nplain\n```", None, None),
        ("```text\n```python\ninside text\n```", None, None),
        ("```python\n   \n```", None, None),
        ("no code at all", None, None),
        ("```", None, None),
    ],
)
def test_extract_code(text: str, source: str | None, style: str | None) -> None:
    code = extract_code(text)
    if source is None:
        assert code is None
    else:
        assert code is not None and (code.source, code.style) == (source, style)


def test_fence_scan_is_linear_on_hostile_text() -> None:
    assert len(fenced_python("```python\n" * 50_000)) <= 16
    assert extract_code("<code>" * 50_000) is None or True  # returns quickly either way


def test_output_is_wrapped_in_the_style_of_the_code() -> None:
    assert wrap_output("1", "fence") == "```output\n1\n```"
    assert wrap_output("1", "tag") == "<output>\n1\n</output>"


# -- tasks ---------------------------------------------------------------------------------------
def test_task_helpers_match_brute_force() -> None:
    rng = random.Random(0)
    for _ in range(30):
        n, a, b = rng.randint(1, 3000), rng.randint(2, 19), rng.randint(2, 97)
        c = rng.randint(2, 10)
        brute = sum(1 for i in range(1, n + 1) if (i % a == 0 or i % b == 0) and i % c != 0)
        assert count_divisible(n, a, b, c) == brute
        m = rng.randint(1, 5000)
        assert count_divisors(m) == sum(1 for d in range(1, m + 1) if m % d == 0)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.__name__)
def test_templates_give_integer_answers(template) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(1)
    for _ in range(20):
        task = template(rng)
        assert isinstance(task.answer, int) and task.answer >= 0
        assert task.question.endswith("?")


def test_problems_are_deterministic_disjoint_and_hash_independent() -> None:
    train = [PROBLEMS(s).question for s in PROBLEMS.seeds("train", 100)]
    evals = [PROBLEMS(s).question for s in PROBLEMS.seeds("eval", 40)]
    assert not set(train) & set(evals)
    script = (
        "from trl_env_python.tasks import PROBLEMS\n"
        "print([PROBLEMS(f'{s}-{i}') for s in ('train', 'eval') for i in range(10)])"
    )
    assert "Task(" in check_same_output_under_hash_seeds(script, what="python problems")


# -- episodes ------------------------------------------------------------------------------------
def test_solving_a_problem_with_code() -> None:
    env = load_env("python")
    assert isinstance(env, PythonEnv) and isinstance(env, Env)
    question = env.reset("train-3")
    assert question == "How many positive divisors does 786433652 have?"
    code = (
        "```python\n"
        "n = 786433652\n"
        "print(sum(2 if d * d != n else 1 for d in range(1, int(n**0.5) + 1) if n % d == 0))\n"
        "```"
    )
    assert env.step("I'll count them.\n" + code) == "```output\n12\n```"
    assert env.alive and env.reward == 0.0
    assert env.step("<answer>12</answer>") == "Your answer was recorded: 12"
    assert (env.alive, env.reward) == (False, 1.0)


def test_code_tag_form_gets_output_tags_and_errors_are_readable() -> None:
    env = PythonEnv()
    env.reset("eval-0")
    reply = env.step("<code>print(1 / 0)</code>")
    assert reply.startswith("<output>\nTraceback (most recent call last):")
    assert reply.endswith("ZeroDivisionError: division by zero\n[exit code 1]\n</output>")
    assert env.alive


def test_runs_do_not_share_state() -> None:
    env = PythonEnv()
    env.reset("train-0")
    env.step("```python\nx = 41\nopen('state.txt', 'w').write('x')\n```")
    reply = env.step("```python\nimport os\nprint('x' in dir(), os.path.exists('state.txt'))\n```")
    assert reply == "```output\nFalse False\n```"


def test_answer_with_code_ends_without_running_it() -> None:
    env = PythonEnv()
    env.reset("train-1")
    reply = env.step("```python\nwhile True: pass\n```\n<answer>0</answer>")
    assert reply == "Your answer was recorded: 0"
    assert not env.alive


def test_hostile_code_ends_the_step_with_a_readable_result() -> None:
    env = PythonEnv(timeout=20.0, cpu_seconds=1, max_output_chars=300)
    env.reset("train-2")
    loop = env.step("```python\nwhile True: pass\n```")
    assert loop == "```output\n[killed: CPU time limit of 1 s exceeded]\n```"
    flood = env.step("```python\nwhile True: print('spam' * 1000)\n```")
    assert flood.startswith("```output\nspamspam")
    assert "\n[... cut: " in flood and "more characters]\n[killed: output passed" in flood
    assert len(flood) < 300 + 200
    assert env.alive
    env.step("<answer>1</answer>")
    assert not env.alive


def test_no_code_gets_a_hint_and_turns_run_out() -> None:
    env = PythonEnv(max_turns=2)
    env.reset("train-0")
    assert "No code and no answer found" in env.step("hmm")
    reply = env.step("still thinking")
    assert reply.endswith("Out of turns: no answer was given within 2 replies.")
    assert (env.alive, env.reward) == (False, 0.0)
    assert env.step("<answer>1</answer>") == "The episode is over; start a new one with reset."


@pytest.mark.parametrize(
    ("option", "value"), [("max_turns", 0), ("timeout", -1.0), ("memory_mb", True)]
)
def test_bad_options_are_refused(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        PythonEnv(**{option: value})  # type: ignore[arg-type]


def test_conformance() -> None:
    check_env(
        lambda: PythonEnv(max_turns=3, timeout=5.0),
        actions=["```python\nprint(2 + 2)\n```", "<answer>4</answer>", "<code>1/0</code>", "x"],
        reward_range=(0.0, 1.0),
        episodes=4,
        examples=8,
    )


# -- success and curricula -----------------------------------------------------------------------
@pytest.mark.parametrize("max_turns", [1, 100])  # the hardest and the easiest setting
def test_success_follows_the_answer_at_both_ends_of_max_turns(max_turns: int) -> None:
    env = load_env("python", max_turns=max_turns)
    assert isinstance(env, PythonEnv)
    for seed in ["train-4", "eval-2"]:
        env.reset(seed)
        assert env.task is not None and env.success is False
        if max_turns > 1:  # room to run code first: print the answer, then give what printed
            output = env.step(f"```python\nprint({env.task.answer})\n```")
            assert env.alive and env.success is False
            right = output.splitlines()[1]
        else:
            right = env.task.answer
        check_answer_decides_success(env, seed, right)


def test_running_out_of_turns_is_no_success() -> None:
    env = PythonEnv(max_turns=1)
    env.reset("train-0")
    env.step("```python\nprint(1)\n```")
    assert not env.alive and env.answer is None and env.success is False
    with pytest.raises(ValueError, match="max_turns"):
        PythonEnv(max_turns=101)


def test_only_the_exact_number_is_right_for_large_answers() -> None:
    env = PythonEnv()
    for i in range(40):  # find a large answer, where a relative tolerance would hide an error
        env.reset(f"train-{i}")
        assert env.task is not None
        if env.task.answer > 10**7:
            break
    answer = env.task.answer
    assert answer > 10**7
    env.step(f"<answer>{answer + 1}</answer>")
    assert env.reward == 0.0 and env.success is False
    env.reset(f"train-{i}")
    env.step(f"<answer>{answer:,}.0</answer>")  # formatting is still free
    assert env.reward == 1.0 and env.success is True
