"""trl-env: text environments and per-model processors for multi-turn RL with TRL.

Light names are imported here; the rollout engine (torch, transformers) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    DuplicatePluginError,
    PluginLoadError,
    PluginNotFoundError,
    ProtocolError,
    TrlEnvError,
)
from .protocols import Action, Delta, Env, Language, Processor, Seed
from .registry import load_env, load_processor, register_env, register_processor

if TYPE_CHECKING:
    from .rollout import Episode, RolloutConfig, batch_rollout
    from .tools import TaskSet, ToolEnv
    from .trl_integration import env_reward, make_rollout_func

_LAZY = {
    "batch_rollout": "trl_env.rollout",
    "Episode": "trl_env.rollout",
    "RolloutConfig": "trl_env.rollout",
    "make_rollout_func": "trl_env.trl_integration",
    "env_reward": "trl_env.trl_integration",
    "ToolEnv": "trl_env.tools",
    "TaskSet": "trl_env.tools",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trl_env' has no attribute {name!r}")


__all__ = [
    "Action",
    "Delta",
    "DuplicatePluginError",
    "Env",
    "Episode",
    "Language",
    "PluginLoadError",
    "PluginNotFoundError",
    "Processor",
    "ProtocolError",
    "RolloutConfig",
    "Seed",
    "TaskSet",
    "ToolEnv",
    "TrlEnvError",
    "batch_rollout",
    "env_reward",
    "load_env",
    "load_processor",
    "make_rollout_func",
    "register_env",
    "register_processor",
]
