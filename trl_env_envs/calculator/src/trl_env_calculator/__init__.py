"""Calculator environment for trl-env (entry point ``calculator``)."""

from .env import CalculatorEnv
from .problems import PROBLEMS
from .tools import add, divide, multiply, subtract

__all__ = ["PROBLEMS", "CalculatorEnv", "add", "divide", "multiply", "subtract"]
