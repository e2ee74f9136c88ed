"""Guess-the-number environment for trl-env (entry point ``guess``)."""

from .env import GuessEnv, parse_guess

__all__ = ["GuessEnv", "parse_guess"]
