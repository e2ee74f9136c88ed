"""Server text made safe to print: a server must not drive the user's terminal.

Escape sequences (CSI such as ``ESC[2J``, OSC such as a window title or OSC 52's clipboard
write, and the rest), other C0/C1 controls and DEL are removed; a carriage return, which would
let a line overwrite the one before, is shown as ``\\r``. Newlines and tabs stay.
"""

from __future__ import annotations

import re

# ESC [ ... final, ESC ] ... (BEL or ST), ESC P/X/^/_ ... ST, then any other two-byte ESC x;
# their 8-bit forms (CSI U+009B, OSC U+009D, DCS U+0090 ...) too.
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal control sequences or control characters."""
    text = _SEQUENCES.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\\r")
    return _CONTROLS.sub("", text)
