"""trl-env: text environments and per-model processors for multi-turn RL with TRL.

``import trl_env`` imports nothing else: each public name is imported from its home module the
first time it is used (PEP 562), so ``trl-env --help``, ``list`` and tab completion pay only for
what they print. tests/test_import_guard.py holds the modules each of them loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time, _HOMES below
    from .async_worker import EnvRolloutWorker
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
    from .rollout import batch_rollout
    from .spec import EnvSpec
    from .tools import TaskSet, ToolEnv
    from .trl_integration import env_reward, make_rollout_func
    from .wire import Wire

# home module -> the public names it defines; keep in step with the block above and __all__
_HOMES = {
    "async_worker": ("EnvRolloutWorker",),
    "backends": ("build_backend",),
    "chat_format": ("ChatFormat",),
    "config": ("Isolation", "RolloutConfig"),
    "curriculum": ("Curriculum",),
    "envkit": ("EnvKit", "Option", "option_specs"),
    "episode": ("Episode", "Status"),
    "errors": (
        "DuplicatePluginError",
        "PluginLoadError",
        "PluginNotFoundError",
        "ProtocolError",
        "TrlEnvError",
    ),
    "mixture": ("Mixture", "MixtureEnv"),
    "protocols": ("Action", "Delta", "Env", "Language", "Processor", "Seed", "Tokenizer"),
    "registry": ("load_env", "load_processor", "register_env", "register_processor"),
    "rollout": ("batch_rollout",),
    "spec": ("EnvSpec",),
    "tools": ("TaskSet", "ToolEnv"),
    "trl_integration": ("env_reward", "make_rollout_func"),
    "wire": ("Wire",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


if not TYPE_CHECKING:  # a module __getattr__ would let a checker accept any name at all

    def __getattr__(name: str) -> Any:
        module = _HOME.get(name)
        if module is None:
            raise AttributeError(f"module 'trl_env' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # found by plain lookup from now on
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
