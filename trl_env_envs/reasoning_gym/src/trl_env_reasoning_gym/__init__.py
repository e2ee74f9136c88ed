"""reasoning-gym's procedurally generated tasks for trl-env (entry point ``reasoning-gym``)."""

from .env import ReasoningGymEnv
from .tasks import DEFAULT_TASK, TASKS, parse_settings

__all__ = ["DEFAULT_TASK", "TASKS", "ReasoningGymEnv", "parse_settings"]
