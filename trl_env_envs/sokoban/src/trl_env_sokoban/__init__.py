"""Sokoban for trl-env (entry point ``sokoban``): procedural levels that are always solvable."""

from .actions import parse_moves
from .board import Board, Level
from .env import SokobanEnv
from .generator import generate
from .solver import solve

__all__ = ["Board", "Level", "SokobanEnv", "generate", "parse_moves", "solve"]
