"""Copy-the-word environment for trl-env (entry point ``echo``)."""

from .env import EchoEnv, judge

__all__ = ["EchoEnv", "judge"]
