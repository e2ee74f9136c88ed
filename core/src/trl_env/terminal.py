"""Text made safe for a terminal, both ways: what an env prints, and what a person types.

Env text must not drive the user's terminal (set its title, write the clipboard with OSC 52,
clear or overwrite lines), so escape sequences, other C0/C1 controls and DEL are removed before
it is printed, and a carriage return is shown as ``\\r``. Typed lines lose the sequences a
terminal sends for keys that are not text (arrows, function keys), so an arrow key is never read
as an action.
"""

from __future__ import annotations

import re

# CSI (ESC [ or U+009B) with its parameters and final byte; OSC, DCS, SOS, PM and APC strings up
# to BEL or ST; SS3 (ESC O x, what arrow keys send in application mode); any other ESC + byte.
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1bO.?"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal control sequences or control characters (newlines and tabs
    stay; a carriage return, which would let a line overwrite the one before, shows as ``\\r``)."""
    text = _SEQUENCES.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\\r")
    return _CONTROLS.sub("", text)


def typed(line: str) -> str:
    """A typed line without the sequences of special keys, its control characters and its end."""
    return _CONTROLS.sub("", _SEQUENCES.sub("", line.rstrip("\r\n")))
