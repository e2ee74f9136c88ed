"""Reading moves out of free text: ``"left"``, ``"L"``, ``"move up"``, ``"↑"``, ``"lurd"``.

Every direction word in the text is a move, in order; other words are ignored, so
``"move left, then up"`` is two moves. A word made only of the letters u, d, l, r (``"llu"``)
is the usual Sokoban move string, one move per letter.
"""

from __future__ import annotations

import re

WORDS = {
    "up": "up",
    "u": "up",
    "north": "up",
    "down": "down",
    "d": "down",
    "south": "down",
    "left": "left",
    "l": "left",
    "west": "left",
    "right": "right",
    "r": "right",
    "east": "right",
}
ARROWS = {
    "↑": "up",
    "⬆": "up",
    "↓": "down",
    "⬇": "down",
    "←": "left",
    "⬅": "left",
    "→": "right",
    "➡": "right",
}
_LETTERS = {"u": "up", "d": "down", "l": "left", "r": "right"}
# Words keep their apostrophes ("I'd" is one word, not "I" and "d"); arrows are one token each.
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|[↑⬆↓⬇←⬅→➡]")
_MOVE_STRING = re.compile(r"[udlr]{2,}")


def parse_moves(text: str) -> list[str]:
    """The moves in ``text``, in order (``[]`` when there is none)."""
    moves: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        token = match.group()
        if token in WORDS:
            moves.append(WORDS[token])
        elif token in ARROWS:
            moves.append(ARROWS[token])
        elif _MOVE_STRING.fullmatch(token):
            moves.extend(_LETTERS[ch] for ch in token)
    return moves
