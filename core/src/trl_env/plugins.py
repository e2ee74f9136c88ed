"""The pluggy manager for ``trl_env.plugins``: each plugin loads in isolation."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pluggy

from . import hookspecs
from .errors import DuplicatePluginError, PluginNotFoundError
from .registry import PLUGINS_GROUP, PluginInfo, _dist_name, _dist_version, entry_points


class PluginManager:
    """Typed facade over pluggy so the rest of the code never calls ``pm.hook`` directly."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("trl_env")
        self.pm.add_hookspecs(hookspecs)
        self.failures: dict[str, str] = {}
        self._loaded = False

    def load_entry_points(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(PLUGINS_GROUP):
            if self.pm.has_plugin(ep.name) or ep.name in self.failures:
                continue
            try:
                self.pm.register(ep.load(), name=ep.name)
            except Exception as exc:  # a broken plugin must not break the others
                self.failures[ep.name] = (
                    f"plugin {ep.name!r} from {_dist_name(ep)} ({ep.value}) failed to load: "
                    f"{type(exc).__name__}: {exc}"
                )

    def register(self, plugin: object, name: str) -> None:
        self.pm.register(plugin, name=name)

    def unregister(self, name: str) -> None:
        if self.pm.has_plugin(name):
            self.pm.unregister(name=name)

    def add_commands(self, cli: Any) -> None:
        self.pm.hook.register_commands(cli=cli)

    def backends(self) -> dict[str, Callable[..., Any]]:
        found: dict[str, Callable[..., Any]] = {}

        def register(name: str, factory: Callable[..., Any]) -> None:
            if name in found:
                raise DuplicatePluginError(f"Two plugins register the generation backend {name!r}.")
            found[name] = factory

        self.pm.hook.register_backends(register=register)
        return found

    def backend(self, name: str) -> Callable[..., Any]:
        self.load_entry_points()
        found = self.backends()
        if name not in found:
            raise PluginNotFoundError(
                f"Unknown generation backend {name!r}. "
                f"Available: {', '.join(sorted(found)) or 'none'}."
            )
        return found[name]

    def episode_end(self, episode: dict[str, Any]) -> None:
        self.pm.hook.on_episode_end(episode=episode)

    def train_begin(self, config: dict[str, Any]) -> None:
        self.pm.hook.on_train_begin(config=config)

    def train_end(self, summary: dict[str, Any]) -> None:
        self.pm.hook.on_train_end(summary=summary)

    def infos(self) -> list[PluginInfo]:
        return [
            PluginInfo("plugin", ep.name, ep.value, _dist_name(ep), _dist_version(ep))
            for ep in entry_points(PLUGINS_GROUP)
        ]


@functools.cache
def manager() -> PluginManager:
    """The process-wide plugin manager (entry points load on first use)."""
    pm = PluginManager()
    from . import builtin_plugin

    pm.register(builtin_plugin, name="trl_env.builtin")
    return pm
