"""trl-env: text environments and per-model processors for multi-turn RL with TRL.

Light names are imported here; the rollout engine (torch, transformers) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backends import build_backend
from .chat_format import ChatFormat
from .config import Isolation, RolloutConfig
from .curriculum import Curriculum
from .envkit import EnvKit, Option, option_specs
from .episode import Episode, Status
from .errors import (
    DuplicatePluginError,
    PluginLoadError,
    PluginNotFoundError,
    ProtocolError,
    TrlEnvError,
)
from .mixture import Mixture, MixtureEnv
from .protocols import Action, Delta, Env, Language, Processor, Seed, Tokenizer
from .registry import load_env, load_processor, register_env, register_processor
from .spec import EnvSpec
from .wire import Wire

if TYPE_CHECKING:
    from .async_worker import EnvRolloutWorker
    from .rollout import batch_rollout
    from .tools import TaskSet, ToolEnv
    from .trl_integration import env_reward, make_rollout_func

# The engine and the TRL integration import torch and transformers: loaded on first use.
_LAZY = {
    "EnvRolloutWorker": "trl_env.async_worker",
    "batch_rollout": "trl_env.rollout",
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
    "ChatFormat",
    "Curriculum",
    "Delta",
    "DuplicatePluginError",
    "Env",
    "EnvKit",
    "EnvRolloutWorker",
    "EnvSpec",
    "Episode",
    "Isolation",
    "Language",
    "Mixture",
    "MixtureEnv",
    "Option",
    "PluginLoadError",
    "PluginNotFoundError",
    "Processor",
    "ProtocolError",
    "RolloutConfig",
    "Seed",
    "Status",
    "TaskSet",
    "Tokenizer",
    "ToolEnv",
    "TrlEnvError",
    "Wire",
    "batch_rollout",
    "build_backend",
    "env_reward",
    "load_env",
    "load_processor",
    "make_rollout_func",
    "option_specs",
    "register_env",
    "register_processor",
]
