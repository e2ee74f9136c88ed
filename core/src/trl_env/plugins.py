"""The pluggy manager for ``trl_env.plugins``: each plugin loads in isolation."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pluggy

from . import hookspecs
from .errors import DuplicatePluginError, PluginNotFoundError, TrlEnvError
from .registry import PLUGINS_GROUP, PluginInfo, _dist_name, _dist_version, entry_points


class PluginManager:
    """Typed facade over pluggy so the rest of the code never calls ``pm.hook`` directly."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("trl_env")
        self.pm.add_hookspecs(hookspecs)
        self.failures: dict[str, str] = {}
        self._origins: dict[str, str] = {}  # plugin name -> "trl-env-x (module:attr)"
        self._loaded = False

    def load_entry_points(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(PLUGINS_GROUP):
            if self.pm.has_plugin(ep.name) or ep.name in self.failures:
                continue
            self._origins[ep.name] = f"{_dist_name(ep)} ({ep.value})"
            try:
                self.pm.register(ep.load(), name=ep.name)
            except Exception as exc:  # a broken plugin must not break the others
                self.failures[ep.name] = (
                    f"{self._label(ep.name)} failed to load: {type(exc).__name__}: {exc}"
                )

    def register(self, plugin: object, name: str) -> None:
        self.pm.register(plugin, name=name)

    def unregister(self, name: str) -> None:
        if self.pm.has_plugin(name):
            self.pm.unregister(name=name)

    def _label(self, name: str) -> str:
        origin = self._origins.get(name)
        return f"plugin {name!r} from {origin}" if origin else f"plugin {name!r}"

    def _impls(self, hook: str) -> list[Any]:
        # pluggy's own call order: the plugin registered last is called first.
        return list(reversed(getattr(self.pm.hook, hook).get_hookimpls()))

    def _call(self, impl: Any, hook: str, **kwargs: Any) -> str | None:
        """Call one plugin's hook; a plugin's bug is recorded and returned, not raised.

        A :class:`TrlEnvError` (a duplicate name, say) is for the user to see and propagates.
        """
        try:
            impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except TrlEnvError:
            raise
        except Exception as exc:
            problem = (
                f"{self._label(impl.plugin_name)} failed in {hook}: {type(exc).__name__}: {exc}"
            )
            self.failures[impl.plugin_name] = problem
            return problem
        return None

    def add_commands(self, cli: Any) -> list[str]:
        """Let each plugin add its commands to ``cli``; returns the failures, one per plugin."""
        problems = [
            self._call(impl, "register_commands", cli=cli)
            for impl in self._impls("register_commands")
        ]
        return [p for p in problems if p]

    def backends(self) -> dict[str, Callable[..., Any]]:
        found: dict[str, tuple[str, Callable[..., Any]]] = {}
        for impl in self._impls("register_backends"):

            def register(
                name: str, factory: Callable[..., Any], plugin: str = impl.plugin_name
            ) -> None:
                if name in found:
                    raise DuplicatePluginError(
                        f"Generation backend {name!r} is registered by both "
                        f"{self._label(found[name][0])} and {self._label(plugin)}; "
                        "uninstall one of them."
                    )
                found[name] = (plugin, factory)

            self._call(impl, "register_backends", register=register)
        return {name: factory for name, (_, factory) in found.items()}

    def backend(self, name: str) -> Callable[..., Any]:
        self.load_entry_points()
        found = self.backends()
        if name not in found:
            available = ", ".join(sorted(found)) or "none"
            msg = f"Unknown generation backend {name!r}. Available: {available}."
            if self.failures:  # the backend asked for may be in a broken plugin: say which and why
                msg += " Plugins that failed: " + "; ".join(self.failures.values())
            raise PluginNotFoundError(msg)
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
