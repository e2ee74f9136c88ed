"""ToolEnv: functions become tools, calls get replies, an answer ends and scores the episode."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_env import Env, ProtocolError
from trl_env.testing.envs import check_env
from trl_env.tools import (
    Task,
    TaskSet,
    Tool,
    ToolEnv,
    as_task,
    match_answer,
    parse_number,
    run_call,
    tool_schema,
    truncate,
)


def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def repeat(text: str, times: int = 1) -> str:
    """Repeat a text.

    Args:
        text: What to repeat.
        times: How many times.
    """
    return text * times


def pick(color: str) -> str:
    """Pick a color.

    Args:
        color: The color to pick. (choices: ["red", "blue"])
    """
    return color


def explode(reason: str) -> str:
    """Always fails.

    Args:
        reason: Why.
    """
    raise RuntimeError(reason)


def leave() -> str:
    """Calls sys.exit, which must not end the trainer."""
    sys.exit(3)


def blob() -> dict:
    """Returns structured data."""
    return {"values": [1, 2.5, None], "ok": True}


TOOLS = [add, repeat, pick, explode, leave, blob]


def question(seed: str) -> tuple[str, int]:
    return f"What is 2 + {len(seed)}?", 2 + len(seed)


def make(call_format: str = "qwen", **kwargs: object) -> ToolEnv:
    return ToolEnv(TOOLS, question, call_format=call_format, **kwargs)  # type: ignore[arg-type]


def qwen(name: str, **arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


# -- tools and schemas ---------------------------------------------------------------------------
def test_schema_comes_from_hints_and_docstring() -> None:
    schema = tool_schema(repeat)
    fn = schema["function"]
    assert fn["name"] == "repeat"
    assert fn["parameters"]["properties"]["times"]["type"] == "integer"
    assert fn["parameters"]["required"] == ["text"]


def test_undocumented_function_is_refused_with_advice() -> None:
    def bare(x: int) -> int:
        return x

    with pytest.raises(ProtocolError, match=r"'bare' cannot be described.*Args"):
        ToolEnv([bare], question)


def test_explicit_tool_schema_and_duplicate_names() -> None:
    schema = {"type": "function", "function": {"name": "double", "parameters": {}}}
    env = ToolEnv([Tool(lambda x: 2 * x, schema)], question, call_format="python")
    env.reset("s")
    assert env.step("double(21)") == ">>> double(21)\n42"
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        ToolEnv([add, add], question)
    with pytest.raises(ValueError, match="at least one tool"):
        ToolEnv([], question)
    with pytest.raises(ValueError, match="max_turns"):
        make(max_turns=0)


def test_tool_env_is_an_env_and_import_stays_light() -> None:
    assert isinstance(make(), Env)
    code = "import sys, trl_env.tools; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- replies -------------------------------------------------------------------------------------
def test_calls_run_in_order_with_one_reply_each() -> None:
    env = make()
    env.reset("abc")
    reply = env.step(
        "thinking...\n" + qwen("add", a=2, b=3) + qwen("repeat", text="ab", times=2) + qwen("blob")
    )
    assert reply == (
        "<tool_response>\n5\n</tool_response>\n"
        "<tool_response>\nabab\n</tool_response>\n"
        '<tool_response>\n{"values": [1, 2.5, null], "ok": true}\n</tool_response>'
    )
    assert env.alive and env.reward == 0.0


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (qwen("nope"), "Error: unknown tool 'nope'. Available tools: add, repeat, pick"),
        (qwen("add", a=1), "Error: bad arguments for add: missing a required argument: 'b'"),
        (qwen("add", a=1, b=2, c=3), "unexpected keyword argument 'c'"),
        (qwen("add", a="1", b=2), "argument 'a' must be number, got \"1\""),
        (qwen("add", a=True, b=2), "argument 'a' must be number, got true"),
        (qwen("repeat", text="x", times=2.5), "argument 'times' must be integer"),
        (qwen("pick", color="green"), "argument 'color' must be one of ['red', 'blue']"),
        (qwen("explode", reason="kaboom"), "Error: explode raised RuntimeError: kaboom"),
        (qwen("leave"), "Error: leave raised SystemExit: 3"),
        ("<tool_call>{nope}</tool_call>", "Error: the tool call is not valid JSON"),
    ],
)
def test_errors_are_replies_and_the_episode_goes_on(action: str, expected: str) -> None:
    env = make()
    env.reset("s")
    reply = env.step(action)
    assert reply.startswith("<tool_response>\n") and expected in reply
    assert env.alive
    assert env.step(qwen("add", a=1, b=1)) == "<tool_response>\n2\n</tool_response>"


def test_integral_floats_are_accepted_as_integers() -> None:
    env = make()
    env.reset("s")
    assert "xxx" in env.step(qwen("repeat", text="x", times=3.0))


def test_too_many_calls_are_skipped_with_a_note() -> None:
    env = make(max_calls=2)
    env.reset("s")
    reply = env.step(qwen("add", a=1, b=1) * 5)
    assert reply.count("<tool_response>") == 2
    assert reply.endswith(
        "[Only the first 2 tool calls of a reply are run; the rest were skipped.]"
    )


def test_long_output_is_cut_with_a_note() -> None:
    env = make(max_output_chars=50)
    env.reset("s")
    reply = env.step(qwen("repeat", text="y", times=10_000))
    assert "y" * 50 + "\n[... cut: 9950 more characters]" in reply
    assert len(reply) < 200


def test_reply_without_calls_or_answer_gets_a_hint() -> None:
    env = make()
    env.reset("s")
    reply = env.step("I am not sure what to do.")
    assert "No tool call and no answer found" in reply and "<tool_call>" in reply
    assert env.alive


# -- answers, reward, turns ----------------------------------------------------------------------
def test_answer_ends_and_scores_without_running_calls() -> None:
    env = make()
    assert env.reset("abc") == "What is 2 + 3?"
    reply = env.step(qwen("explode", reason="must not run") + "<answer>5</answer>")
    assert reply == "Your answer was recorded: 5"
    assert (env.alive, env.reward, env.answer) == (False, 1.0, "5")
    assert env.step("<answer>6</answer>") == "The episode is over; start a new one with reset."
    assert env.reward == 1.0


def test_wrong_answer_scores_zero_and_custom_reward_fn_sees_the_task() -> None:
    seen: list[tuple[str, Task]] = []

    def partial(answer: str, task: Task) -> float:
        seen.append((answer, task))
        return 0.25

    env = ToolEnv([add], question, partial)
    env.reset("ab")
    env.step("<answer>seven</answer>")
    assert env.reward == 0.25
    assert seen == [("seven", Task("What is 2 + 2?", 4))]
    wrong = make()
    wrong.reset("ab")
    wrong.step("<answer>5</answer>")
    assert wrong.reward == 0.0


def test_turn_limit_ends_the_episode_with_zero() -> None:
    env = make(max_turns=2)
    env.reset("s")
    env.step(qwen("add", a=1, b=1))
    assert env.alive
    reply = env.step("hmm")
    assert not env.alive and env.reward == 0.0
    assert reply.endswith("Out of turns: no answer was given within 2 replies.")


@pytest.mark.parametrize("call_format", ["qwen", "json", "python"])
def test_every_format_plays_an_episode(call_format: str) -> None:
    env = make(call_format)
    assert "<answer>" in env.system_prompt and "add" in env.system_prompt
    env.reset("abcd")
    action = {
        "qwen": qwen("add", a=2, b=4),
        "json": '{"name": "add", "arguments": {"a": 2, "b": 4}}',
        "python": "add(2, b=4)",
    }[call_format]
    assert "6" in env.step(action)
    env.step("<answer>6</answer>")
    assert env.reward == 1.0


def test_conformance_kit() -> None:
    tasks = TaskSet(lambda rng: (f"What is {rng.randint(0, 10**6)} + 1?", 0), name="t")
    check_env(
        lambda: ToolEnv([add], tasks, max_turns=4),
        actions=[qwen("add", a=1, b=2), "<answer>3</answer>", "<tool_call>{"],
        reward_range=(0.0, 1.0),
        episodes=8,
        examples=15,
    )


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(
    st.sampled_from(["qwen", "json", "python"]),
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(
                lambda name, args: qwen(name, **args),
                st.sampled_from(["add", "repeat", "pick", "explode", "leave", "zzz"]),
                st.dictionaries(
                    st.sampled_from(["a", "b", "text", "times", "color", "x"]),
                    st.one_of(
                        # bounded: repeat(text, times) must not allocate gigabytes
                        st.integers(-1000, 1000),
                        st.floats(-1000, 1000),
                        st.sampled_from([float("nan"), float("inf"), 10**30]),
                        st.text(max_size=5),
                        st.none(),
                    ),
                    max_size=3,
                ),
            ),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_random_and_malformed_calls_never_raise(call_format: str, actions: list[str]) -> None:
    env = make(call_format, max_turns=3)
    env.reset("seed")
    for action in actions:
        reply = env.step(action)
        assert isinstance(reply, str) and reply
        assert 0.0 <= env.reward <= 1.0


# -- tasks and answers -------------------------------------------------------------------------
def test_task_set_is_deterministic_and_splits_never_share_questions() -> None:
    tasks = TaskSet(lambda rng: (f"q{rng.randint(0, 300)}", 1), name="small")
    assert tasks("train-3") == tasks("train-3")
    train = {tasks(s).question for s in tasks.seeds("train", 300)}
    evals = {tasks(s).question for s in tasks.seeds("eval", 100)}
    assert train and evals and not train & evals
    assert all(tasks.split_of(q) == "eval" for q in evals)
    assert tasks("anything").question.startswith("q")
    with pytest.raises(ValueError, match="split must be one of"):
        tasks.seeds("test", 1)


def test_task_set_with_too_few_questions_says_so() -> None:
    tasks = TaskSet(lambda rng: ("only one", 1), name="one", max_tries=50)
    wanted = "eval" if tasks.split_of("only one") == "train" else "train"
    with pytest.raises(ValueError, match=f"no {wanted} question in 50 tries"):
        tasks(f"{wanted}-0")


def test_tool_env_seeds_come_from_the_task_set() -> None:
    tasks = TaskSet(lambda rng: ("q", 1))
    env = ToolEnv([add], tasks)
    assert env.seeds("eval", 2) == ["eval-0", "eval-1"]
    assert make().seeds("train", 2) == ["train-0", "train-1"]


def test_as_task_accepts_pairs_only() -> None:
    assert as_task(("q", 1)) == Task("q", 1)
    with pytest.raises(ProtocolError):
        as_task(("q", 1, 2))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42.0),
        (" -3.5 ", -3.5),
        ("1,234", 1234.0),
        ("$5", 5.0),
        ("3/4", 0.75),
        ("\\boxed{7}", 7.0),
        ("12.", 12.0),
        ("1e400", None),
        ("1/0", None),
        ("nan", None),
        ("seven", None),
        ("", None),
        ("9" * 500, None),
    ],
)
def test_parse_number(text: str, value: float | None) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("given", "answer", "reward"),
    [
        ("42", 42, 1.0),
        ("42.0000000001", 42, 1.0),
        ("41", 42, 0.0),
        ("121013309", 121013308, 0.0),  # a relative tolerance would take it
        ("121013308.0", 121013308, 1.0),
        ("3.1415926", 3.14159265, 1.0),
        ("Paris", "paris", 1.0),
        (" New   York ", "new york", 1.0),
        ("London", "Paris", 0.0),
        ("", 0, 0.0),
    ],
)
def test_match_answer(given: str, answer: object, reward: float) -> None:
    assert match_answer(given, Task("q", answer)) == reward


def test_run_call_survives_unprintable_results_and_errors() -> None:
    class Weird:
        def __str__(self) -> str:
            raise ValueError("no")

        __repr__ = __str__

    def weird() -> str:
        """Returns something unprintable."""
        return Weird()  # type: ignore[return-value]

    def raises_weird() -> str:
        """Raises something unprintable."""

        class Bad(Exception):
            def __str__(self) -> str:
                raise ValueError("no")

        raise Bad

    tools = {t.__name__: Tool(t, tool_schema(t)) for t in (weird, raises_weird)}
    from trl_env.tool_formats import ToolCall

    text, ok = run_call(ToolCall("weird"), tools)
    assert ok and "cannot be shown" in text
    text, ok = run_call(ToolCall("raises_weird"), tools)
    assert not ok and text == "raises_weird raised Bad"


def test_truncate() -> None:
    assert truncate("abc", 3) == "abc"
    assert truncate("abcd", 3) == "abc\n[... cut: 1 more characters]"
