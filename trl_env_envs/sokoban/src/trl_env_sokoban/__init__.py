"""Sokoban for trl-env (entry point ``sokoban``): procedural levels that are always solvable."""

from .actions import parse_moves
from .board import Board, Level
from .env import SokobanEnv
from .generator import Generated, generate, generate_solved
from .solver import solve

__all__ = [
    "Board",
    "Generated",
    "Level",
    "SokobanEnv",
    "generate",
    "generate_solved",
    "parse_moves",
    "solve",
]
