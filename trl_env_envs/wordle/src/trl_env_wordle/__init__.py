"""Wordle-like deduction game for trl-env (entry point ``wordle``)."""

from .env import WordleEnv
from .rules import marks, read_guess

__all__ = ["WordleEnv", "marks", "read_guess"]
