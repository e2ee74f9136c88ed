"""Find the code in a model's reply: fenced ```python blocks, or ``<code>...</code>`` tags.

Rules: if the reply has fenced blocks tagged ``python``, ``py`` or ``python3``, they are joined
in order (one program); otherwise ``<code>`` blocks are (the form of TRL's old
``CodeAgentEnvironment``). Fences with another or no language are not code to run. An unclosed
last block (a turn cut at the token limit) takes the rest of the reply. Linear time.
"""

from __future__ import annotations

from dataclasses import dataclass

from trl_env.tool_formats import blocks

FENCE = "```"
PYTHON_TAGS = frozenset({"python", "py", "python3"})
MAX_BLOCKS = 16


@dataclass(frozen=True)
class Code:
    """The program to run and the style it came in: ``"fence"`` or ``"tag"``."""

    source: str
    style: str


def fenced_python(text: str) -> list[str]:
    """Bodies of the ```python fences of ``text``, in order."""
    out: list[str] = []
    pos = 0
    while len(out) < MAX_BLOCKS:
        start = text.find(FENCE, pos)
        if start < 0:
            break
        line_end = text.find("\n", start)
        if line_end < 0:
            break
        info = text[start + len(FENCE) : line_end].strip().lower()
        close = text.find(FENCE, line_end + 1)
        body = text[line_end + 1 : close if close >= 0 else len(text)]
        if info in PYTHON_TAGS:
            out.append(body)
        if close < 0:
            break
        pos = close + len(FENCE)
    return out


def extract_code(text: str) -> Code | None:
    """The code of a reply, or None if it has none."""
    fenced = [b for b in fenced_python(text) if b.strip()]
    if fenced:
        return Code("\n".join(fenced), "fence")
    tagged = [body for body, _ in blocks(text, "<code>", "</code>", MAX_BLOCKS) if body.strip()]
    if tagged:
        return Code("\n".join(tagged), "tag")
    return None


def wrap_output(text: str, style: str) -> str:
    """Output shown in the style the code came in: an ``output`` fence or ``<output>`` tags."""
    if style == "tag":
        return f"<output>\n{text}\n</output>"
    return f"```output\n{text}\n```"
