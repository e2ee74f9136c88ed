"""Parsing and rendering of the tool-call formats: every text gives calls or readable errors."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_env.tool_formats import (
    FORMATS,
    BadCall,
    JsonFormat,
    PythonFormat,
    QwenFormat,
    Reply,
    ToolCall,
    blocks,
    extract_answer,
    get_format,
    python_signature,
)

ADD_SCHEMA = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "number", "description": "The first number."},
                "b": {"type": "integer", "nullable": True, "description": "The second."},
                "mode": {"type": "string", "enum": ["x", "y"], "description": "How."},
            },
            "required": ["a", "b"],
        },
        "return": {"type": "number"},
    },
}


# -- answers and blocks ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>42</answer>", "42"),
        ("so <answer> 4 2 </answer> done", "4 2"),
        ("<answer>1</answer><answer>2</answer>", "1"),
        ("cut off <answer>17", "17"),
        ("<answer></answer>", ""),
        ("no answer here", None),
        ("</answer>", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_blocks_closed_unclosed_and_limit() -> None:
    assert blocks("<a>1</a> x <a>2</a><a>3", "<a>", "</a>", 10) == [
        ("1", True),
        ("2", True),
        ("3", False),
    ]
    assert blocks("<a>1</a><a>2</a>", "<a>", "</a>", 1) == [("1", True)]


# -- qwen ----------------------------------------------------------------------------------------
def test_qwen_parses_calls_in_order_with_argument_spellings() -> None:
    action = (
        'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>{"name": "add", "parameters": {"a": 3, "b": 4}}</tool_call>'
        '<tool_call>```json\n{"name": "add", "arguments": "{\\"a\\": 5, \\"b\\": 6}"}\n```'
        "</tool_call>"
        '<tool_call>{"name": "now"}</tool_call>'
    )
    calls = QwenFormat().parse(action, 10)
    assert [(c.name, c.kwargs) for c in calls if isinstance(c, ToolCall)] == [
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 3, "b": 4}),
        ("add", {"a": 5, "b": 6}),
        ("now", {}),
    ]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("", "empty"),
        ("{bad json}", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"arguments": {}}', 'no "name"'),
        ('{"name": "add", "arguments": [1, 2]}', "must be a JSON object of named arguments"),
        ('{"name": "add", "arguments": "{oops"}', "is not JSON"),
        ("[" * 100_000, "not valid JSON"),
    ],
)
def test_qwen_malformed_calls_say_why(body: str, fragment: str) -> None:
    (call,) = QwenFormat().parse(f"<tool_call>{body}</tool_call>", 5)
    assert isinstance(call, BadCall)
    assert fragment in call.message


def test_qwen_unclosed_call_is_read_or_explained() -> None:
    (ok,) = QwenFormat().parse('<tool_call>{"name": "add", "arguments": {}}', 5)
    assert isinstance(ok, ToolCall)
    (bad,) = QwenFormat().parse('<tool_call>{"name": "add", "argu', 5)
    assert isinstance(bad, BadCall) and "not closed" in bad.message


def test_qwen_render_marks_errors() -> None:
    call = ToolCall("add")
    text = QwenFormat().render([Reply(call, "3", True), Reply(BadCall("nope"), "nope", False)])
    assert text == (
        "<tool_response>\n3\n</tool_response>\n<tool_response>\nError: nope\n</tool_response>"
    )


def test_qwen_describe_lists_schemas_and_format() -> None:
    text = QwenFormat().describe([ADD_SCHEMA])
    assert "<tools>" in text and '"name": "add"' in text and "<tool_call>" in text
    assert "<tool_response>" in text


# -- json lines --------------------------------------------------------------------------------
def test_json_lines_parse_objects_at_line_starts_even_multiline() -> None:
    action = (
        "I will call add.\n"
        '{"name": "add", "arguments": {"a": 1, "b": 2}}\n'
        "text {not a call}\n"
        '  {"name": "add",\n   "arguments": {"a": 3, "b": 4}}\n'
        "{broken\n"
        '{"name": "add", "arguments": {"a": 5, "b": 6}} trailing words\n'
    )
    calls = JsonFormat().parse(action, 10)
    assert [type(c).__name__ for c in calls] == ["ToolCall", "ToolCall", "BadCall", "ToolCall"]
    assert [c.kwargs["a"] for c in calls if isinstance(c, ToolCall)] == [1, 3, 5]


def test_json_render_uses_result_or_error_keys() -> None:
    text = JsonFormat().render(
        [Reply(ToolCall("add"), "3", True), Reply(BadCall("bad"), "bad", False)]
    )
    assert text.splitlines() == ['{"name": "add", "result": "3"}', '{"error": "bad"}']


# -- python calls ------------------------------------------------------------------------------
def test_python_calls_positional_keyword_and_literals() -> None:
    action = (
        "First:\nadd(1, b=2)\n  add(a=-1.5, b=[1, {'k': None}])  \n"
        "```python\nadd('x', b=True)\n```\nThis line (is prose) and not a call"
    )
    calls = PythonFormat().parse(action, 10)
    assert [(c.name, c.args, c.kwargs) for c in calls if isinstance(c, ToolCall)] == [
        ("add", (1,), {"b": 2}),
        ("add", (), {"a": -1.5, "b": [1, {"k": None}]}),
        ("add", ("x",), {"b": True}),
    ]


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("add(x, 2)", "literals"),
        ("add(1 + 2)", "literals"),
        ("add(**kw)", "name each argument"),
        ("add(1,, 2)", "could not parse"),
        ("add(" + "[" * 500 + "]" * 500 + ")", "could not parse"),
        ("add(" + "9" * 5000 + ")", "longer than"),
        ("add(" + "1," * 3000 + ")", "longer than"),
    ],
)
def test_python_bad_calls_say_why(line: str, fragment: str) -> None:
    (call,) = PythonFormat().parse(line, 5)
    assert isinstance(call, BadCall)
    assert fragment in call.message


def test_python_lines_that_are_not_name_calls_are_prose() -> None:
    assert PythonFormat().parse("obj.method(1)\n(1)\nsee add(1) here\n", 5) == []


def test_python_signature_from_schema() -> None:
    text = python_signature(ADD_SCHEMA)
    assert text.splitlines()[0] == "add(a: float, b: int | None, mode: str = ...) -> float"
    assert "mode: How. (one of ['x', 'y'])" in text


def test_python_render_echoes_the_call() -> None:
    call = ToolCall("add", (1,), {}, text="add(1)")
    assert PythonFormat().render([Reply(call, "boom", False)]) == ">>> add(1)\nError: boom"


# -- shared properties -------------------------------------------------------------------------
def test_get_format_names_and_unknown() -> None:
    assert {get_format(name).name for name in FORMATS} == {"qwen", "json", "python"}
    fmt = JsonFormat()
    assert get_format(fmt) is fmt
    with pytest.raises(ValueError, match="unknown call_format 'xml'"):
        get_format("xml")


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize(
    "action",
    [
        "<tool_call>" * 20_000,
        "{\n" * 50_000,
        '{"name": "' + "x" * 200_000,
        "add(" * 30_000 + ")",
        ("add(1)\n" * 20_000),
        "\n".join(["f(" + "(" * 150 + ")" * 150 + ")"] * 300),
    ],
)
def test_adversarial_actions_parse_fast(name: str, action: str) -> None:
    start = time.perf_counter()
    calls = get_format(name).parse(action, 6)
    assert len(calls) <= 6
    assert time.perf_counter() - start < 2.0


CALL_PIECES = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        '"arguments"',
        ":",
        ",",
        '"add"',
        "[",
        "]",
        "\n",
        "add(",
        ")",
        "=",
        "1",
        "-",
        "'",
        '"',
        "null",
        "<answer>",
    ]
)


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.lists(st.one_of(CALL_PIECES, st.text(max_size=5)), max_size=40).map("".join))
def test_random_call_like_text_never_raises(action: str) -> None:
    for name in ("qwen", "json", "python"):
        fmt = get_format(name)
        calls = fmt.parse(action, 8)
        assert all(isinstance(c, ToolCall | BadCall) for c in calls)
        rendered = fmt.render([Reply(c, "x", isinstance(c, ToolCall)) for c in calls])
        assert isinstance(rendered, str)
