"""Text formats a model uses to call tools, and how tool results are shown back to it.

Three formats, picked by name in :class:`trl_env.tools.ToolEnv` (``call_format=``):

- ``"qwen"`` (default; alias ``"hermes"``): ``<tool_call>{"name": "add", "arguments": {"a": 1}}
  </tool_call>``; each result comes back as ``<tool_response>...</tool_response>``. This is the
  form Qwen2.5/Qwen3 (and Hermes) chat templates train on.
- ``"json"``: one JSON object per call, starting at the beginning of a line (it may span
  lines): ``{"name": "add", "arguments": {"a": 1}}``; each result is one JSON line
  ``{"name": "add", "result": "..."}`` (``"error"`` instead of ``"result"`` on failure).
- ``"python"``: one call per line, written like Python, arguments as literals:
  ``add(1, b=2)``; each result comes back after ``>>> add(1, b=2)``.

Every parser is linear in the length of the action and never raises: text it cannot read
becomes a :class:`BadCall` whose message the model sees.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
# A python-format call line is refused beyond this length: ast.parse of hostile text is slow.
MAX_CALL_LINE = 4000


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name, positional and keyword arguments, the text as written."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True)
class BadCall:
    """Text that looked like a call but could not be read; ``message`` says why."""

    message: str
    text: str = ""


@dataclass(frozen=True)
class Reply:
    """What one call produced: its result, or (``ok`` False) the error message."""

    call: ToolCall | BadCall
    content: str
    ok: bool


class CallFormat(Protocol):
    """How calls are written (``parse``), shown back (``render``) and explained (``describe``)."""

    name: str
    example: str

    def describe(self, schemas: Sequence[Mapping[str, Any]]) -> str: ...

    def parse(self, action: str, limit: int) -> list[ToolCall | BadCall]: ...

    def render(self, replies: Sequence[Reply]) -> str: ...


# -- shared scanning helpers -------------------------------------------------------------------
def blocks(text: str, open_tag: str, close_tag: str, limit: int) -> list[tuple[str, bool]]:
    """Bodies between ``open_tag`` and ``close_tag`` in order, with whether each was closed.

    An unclosed last tag takes the rest of the text (a turn cut at the token limit). Uses
    ``str.find``, not a lazy regex, so many unclosed tags stay linear.
    """
    out: list[tuple[str, bool]] = []
    pos = 0
    while len(out) < limit:
        start = text.find(open_tag, pos)
        if start < 0:
            break
        start += len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            out.append((text[start:], False))
            break
        out.append((text[start:end], True))
        pos = end + len(close_tag)
    return out


def extract_answer(action: str) -> str | None:
    """The text of the first ``<answer>...</answer>`` (stripped), or None if there is none.

    An unclosed ``<answer>`` takes the rest of the action.
    """
    found = blocks(action, ANSWER_OPEN, ANSWER_CLOSE, 1)
    return found[0][0].strip() if found else None


def _strip_fence(body: str) -> str:
    """``json ...`` fences some models put inside the tags."""
    body = body.strip()
    if body.startswith("```"):
        body = body[3:]
        body = body[4:] if body.startswith("json") else body
        body = body.removesuffix("```")
    return body.strip()


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call_from_json(obj: Any, text: str) -> ToolCall | BadCall:
    """A call from a decoded ``{"name": ..., "arguments": {...}}`` object.

    ``"parameters"`` is read like ``"arguments"``, and arguments given as a JSON string (the
    OpenAI wire form) are decoded.
    """
    if not isinstance(obj, dict):
        return BadCall(f"a tool call must be a JSON object, not {type(obj).__name__}", text)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return BadCall('the tool call has no "name" string', text)
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return BadCall(f'the "arguments" string of {name} is not JSON ({exc})', text)
    if not isinstance(arguments, dict):
        return BadCall(f'"arguments" of {name} must be a JSON object of named arguments', text)
    return ToolCall(name=name, kwargs=arguments, text=text)


def shown(reply: Reply) -> str:
    """A reply's text, errors marked so the model can tell them from results."""
    return reply.content if reply.ok else f"Error: {reply.content}"


def _schema_lines(schemas: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)


def _tools_section(functions: str, call: str, example: str, results: str) -> str:
    """The JSON formats' tools section: the functions, how to write a call (and an example of
    one), how its result comes back."""
    return f"# Tools\n\n{functions}\n\nTo call a function, write {call}:\n{example}\n{results}"


# -- qwen ------------------------------------------------------------------------------------
class QwenFormat:
    """``<tool_call>`` JSON in, ``<tool_response>`` out, as in Qwen's and Hermes' templates."""

    name = "qwen"
    example = '<tool_call>\n{"name": "<tool name>", "arguments": {"<arg>": <value>}}\n</tool_call>'

    def describe(self, schemas: Sequence[Mapping[str, Any]]) -> str:
        return _tools_section(
            "You may call one or more functions to help with the task.\n\n"
            "The functions are described by JSON schemas inside <tools></tools> tags:\n"
            f"<tools>\n{_schema_lines(schemas)}\n</tools>",
            "a JSON object with its name and arguments inside <tool_call></tool_call> tags",
            self.example,
            "Each result comes back inside <tool_response></tool_response> tags.",
        )

    def parse(self, action: str, limit: int) -> list[ToolCall | BadCall]:
        out: list[ToolCall | BadCall] = []
        for body, closed in blocks(action, "<tool_call>", "</tool_call>", limit):
            text = _strip_fence(body)
            if not text:
                out.append(BadCall("the <tool_call> is empty", body))
                continue
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError) as exc:
                hint = "" if closed else " (the <tool_call> tag is not closed)"
                out.append(BadCall(f"the tool call is not valid JSON: {exc}{hint}", body))
                continue
            out.append(call_from_json(obj, text))
        return out

    def render(self, replies: Sequence[Reply]) -> str:
        return "\n".join(f"<tool_response>\n{shown(r)}\n</tool_response>" for r in replies)


# -- json lines ------------------------------------------------------------------------------
class JsonFormat:
    """Bare JSON objects, each starting a line; results as JSON lines."""

    name = "json"
    example = '{"name": "<tool name>", "arguments": {"<arg>": <value>}}'

    def describe(self, schemas: Sequence[Mapping[str, Any]]) -> str:
        return _tools_section(
            f"You may call these functions (JSON schemas, one per line):\n{_schema_lines(schemas)}",
            "a JSON object on a line of its own",
            self.example,
            'Each result comes back as a JSON line {"name": ..., "result": ...} '
            '(or {"name": ..., "error": ...}).',
        )

    def parse(self, action: str, limit: int) -> list[ToolCall | BadCall]:
        decoder = json.JSONDecoder()
        out: list[ToolCall | BadCall] = []
        pos = 0
        while pos < len(action) and len(out) < limit:
            end = action.find("\n", pos)
            end = len(action) if end < 0 else end
            line = action[pos:end]
            body = line.lstrip(" \t")
            if not body.startswith("{"):
                pos = end + 1
                continue
            start = pos + len(line) - len(body)
            try:
                obj, stop = decoder.raw_decode(action, start)
            except (ValueError, RecursionError) as exc:
                out.append(BadCall(f"the tool call is not valid JSON: {exc}", _short(body)))
                pos = end + 1
                continue
            out.append(call_from_json(obj, action[start:stop]))
            next_line = action.find("\n", stop)
            pos = len(action) if next_line < 0 else next_line + 1
        return out

    def render(self, replies: Sequence[Reply]) -> str:
        lines = []
        for r in replies:
            item: dict[str, Any] = {}
            if isinstance(r.call, ToolCall):
                item["name"] = r.call.name
            item["result" if r.ok else "error"] = r.content
            lines.append(json.dumps(item, ensure_ascii=False))
        return "\n".join(lines)


# -- python calls ----------------------------------------------------------------------------
_CALL_START = re.compile(r"[A-Za-z_]\w*\s*\(")
_PY_TYPES = {
    "integer": "int",
    "number": "float",
    "string": "str",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
    "null": "None",
}


def _py_type(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type", "Any")
    names = [_PY_TYPES.get(k, "Any") for k in (kind if isinstance(kind, list) else [kind])]
    if prop.get("nullable") and "None" not in names:
        names.append("None")
    return " | ".join(names)


def python_signature(schema: Mapping[str, Any]) -> str:
    """``add(a: float, b: float) -> float`` and the docstring text, from a function schema."""
    fn = schema.get("function", schema)
    params = fn.get("parameters", {})
    required = set(params.get("required", []))
    parts, docs = [], []
    for arg, prop in params.get("properties", {}).items():
        parts.append(f"{arg}: {_py_type(prop)}" + ("" if arg in required else " = ..."))
        if prop.get("description"):
            choices = f" (one of {prop['enum']})" if "enum" in prop else ""
            docs.append(f"        {arg}: {prop['description']}{choices}")
    returns = f" -> {_py_type(fn['return'])}" if "return" in fn else ""
    head = f"{fn.get('name', '?')}({', '.join(parts)}){returns}"
    args = ["    Args:", *docs] if docs else []
    text = [head, f"    {fn.get('description', '')}".rstrip(), *args]
    return "\n".join(line for line in text if line.strip())


class PythonFormat:
    """``name(1, b="x")`` on a line of its own; results after ``>>> name(...)``."""

    name = "python"
    example = "<tool name>(<value>, <arg>=<value>)"

    def describe(self, schemas: Sequence[Mapping[str, Any]]) -> str:
        sigs = "\n\n".join(python_signature(s) for s in schemas)
        return (
            "# Tools\n\n"
            f"You may call these functions:\n\n{sigs}\n\n"
            "To call a function, write the call on a line of its own, for example "
            f"{self.example}. Arguments must be literals (numbers, strings, lists, dicts, "
            "True, False, None). Each result comes back after '>>> ' and the call."
        )

    def parse(self, action: str, limit: int) -> list[ToolCall | BadCall]:
        out: list[ToolCall | BadCall] = []
        for raw in action.splitlines():
            if len(out) >= limit:
                break
            line = raw.strip()
            if not line.endswith(")") or not _CALL_START.match(line):
                continue
            out.append(self._parse_line(line))
        return out

    @staticmethod
    def _parse_line(line: str) -> ToolCall | BadCall:
        shown = _short(line)
        if len(line) > MAX_CALL_LINE:
            return BadCall(f"the call is longer than {MAX_CALL_LINE} characters", shown)
        try:
            node = ast.parse(line, mode="eval").body
        except Exception as exc:  # SyntaxError, ValueError (huge ints), RecursionError...
            return BadCall(f"could not parse the call: {type(exc).__name__}: {exc}", shown)
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return BadCall("write a call as name(arguments) on a line of its own", shown)
        try:
            args = tuple(ast.literal_eval(a) for a in node.args)
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except Exception:  # any non-literal argument: names, calls, *args, arithmetic
            return BadCall(
                "arguments must be literals (numbers, strings, lists, dicts, True, False, None)",
                shown,
            )
        if len(kwargs) != len(node.keywords):
            return BadCall("**arguments are not supported; name each argument", shown)
        return ToolCall(name=node.func.id, args=args, kwargs=kwargs, text=line)

    def render(self, replies: Sequence[Reply]) -> str:
        return "\n".join(f">>> {r.call.text}\n{shown(r)}" for r in replies)


FORMATS: dict[str, type[QwenFormat] | type[JsonFormat] | type[PythonFormat]] = {
    "qwen": QwenFormat,
    "hermes": QwenFormat,
    "json": JsonFormat,
    "python": PythonFormat,
}


def get_format(name: str | CallFormat) -> CallFormat:
    """The format called ``name`` (see :data:`FORMATS`), or ``name`` itself if it is one."""
    if not isinstance(name, str):
        return name
    try:
        return FORMATS[name]()
    except KeyError:
        raise ValueError(
            f"unknown call_format {name!r}; choose one of {', '.join(sorted(FORMATS))}"
        ) from None
