"""ChatFormat: a processor declared as data satisfies the protocol and composes its messages."""

from __future__ import annotations

from trl_env import extras
from trl_env.chat_format import ChatFormat
from trl_env.protocols import Processor


class Toy(ChatFormat):
    """A made-up format: [role] text </> with a newline between messages."""

    name = "toy"
    chat_template = "toy"
    role_header = "[{role}] "
    turn_end = "</>"
    stop_tokens = ("</>",)
    separator = "\n"
    extra_ends = ("<eos>",)
    bos = "<s>"


class ToyDefault(Toy):
    default_system = "Be kind."
    trim = True


class ToyNoSystem(Toy):
    assistant_role = "model"
    merge_system_into_user = True


def test_protocol_and_extras() -> None:
    toy = Toy()
    assert isinstance(toy, Processor)
    assert extras.stop_tokens(toy) == ("</>",)
    assert extras.turn_close(toy) == "</>"
    assert extras.turn_separator(toy) == "\n"
    assert toy.tiny_spec is None


def test_first_prompt_and_user_turns() -> None:
    toy = Toy()
    assert extras.first_prompt(toy, "Rules", " hi ") == (
        "<s>[system] Rules</>\n[user]  hi </>\n[assistant] "
    )
    assert extras.first_prompt(toy, "", "hi") == "<s>[user] hi</>\n[assistant] "
    assert toy.append_user_input("next") == "[user] next</>\n[assistant] "


def test_default_system_and_trimming() -> None:
    assert extras.first_prompt(ToyDefault(), "", " hi ") == (
        "<s>[system] Be kind.</>\n[user] hi</>\n[assistant] "
    )


def test_system_merged_into_the_first_user_message() -> None:
    toy = ToyNoSystem()
    assert toy.init_system_input("Rules") == "<s>"
    assert extras.first_prompt(toy, "Rules", "hi") == "<s>[user] Rules\n\nhi</>\n[model] "
    assert extras.first_prompt(toy, "", "hi") == "<s>[user] hi</>\n[model] "


def test_parse_cuts_at_any_end_and_splits_declared_reasoning() -> None:
    class Thinking(Toy):
        reasoning_tags = ("<think>", "</think>")

    toy = Thinking()
    assert toy.parse_agent_output("<think>plan</think> go left</>junk") == ("plan", "go left")
    assert toy.parse_agent_output("go<eos>more") == ("", "go")
    # Two blocks read as the Qwen and DeepSeek templates read them: first block, last action.
    two = "<think>a</think>b<think>c</think> d</>"
    assert toy.parse_agent_output(two) == ("a", "d")


def test_a_family_without_a_reasoning_format_keeps_think_in_the_action() -> None:
    assert Toy().parse_agent_output("<think>plan</think> go</>") == ("", "<think>plan</think> go")


def test_an_override_of_the_engine_separator_leaves_messages_alone() -> None:
    class NoSeparator(Toy):
        turn_separator = ""

    toy = NoSeparator()
    assert extras.turn_separator(toy) == ""
    assert toy.append_user_input("x").startswith("[user] x</>\n")
