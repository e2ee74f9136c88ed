"""Microsoft TextWorld's generated text adventures for trl-env (entry point ``textworld``)."""

from .env import TextWorldEnv, command_of, game_text
from .games import Game, Shape, TextWorldError, game_for, quest_split

__all__ = [
    "Game",
    "Shape",
    "TextWorldEnv",
    "TextWorldError",
    "command_of",
    "game_for",
    "game_text",
    "quest_split",
]
