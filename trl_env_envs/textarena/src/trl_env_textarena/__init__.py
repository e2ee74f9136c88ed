"""TextArena's single-player games for trl-env (entry point ``textarena``)."""

from .env import MissingDataError, TextArenaEnv
from .games import DEFAULT_GAME, GAMES

__all__ = ["DEFAULT_GAME", "GAMES", "MissingDataError", "TextArenaEnv"]
