"""The pluggy manager for ``trl_env.plugins``: each plugin loads and runs in isolation.

The rest of trl-env calls this facade (``manager().episode_end(record)``), never ``pm.hook``.
A plugin that fails to import, exits, hangs at import or raises in a hook is reported once on
stderr, in one line naming its distribution, and everything else goes on without it. The hooks
every command passes through (``register_commands``, ``register_backends``,
``register_env_hosts``) have the import's deadline too: one that never returns is named while
it runs, then left out, what it registered with it.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import pluggy

from . import discovery, hookspecs
from .discovery import PLUGINS_GROUP
from .errors import DuplicatePluginError, PluginNotFoundError, TrlEnvError, describe

if TYPE_CHECKING:  # imported by the two listings below: `--help` and completion need no registry
    from .registry import PluginInfo

TIMEOUT_VAR = "TRL_ENV_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT = 10.0  # seconds a plugin may take to import, or a register hook, before it is out
BUILTIN = "trl_env.builtin"


class Registration(NamedTuple):
    """One name a plugin registers through a ``register_*`` hook: who, its factory, and (an env
    host kind) the rollout option whose being set selects it (``env_servers``)."""

    plugin: str
    factory: Callable[..., Any]
    selected_by: str = ""


def import_timeout() -> float:
    try:
        return max(float(os.environ.get(TIMEOUT_VAR, DEFAULT_TIMEOUT)), 0.0)
    except ValueError:
        return DEFAULT_TIMEOUT


def warn(problem: str) -> None:
    """One line on stderr; the CLI and the library report plugin problems the same way."""
    print(f"warning: {problem}", file=sys.stderr, flush=True)


class PluginManager:
    """Typed facade over pluggy so the rest of the code never calls ``pm.hook`` directly."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("trl_env")
        self.pm.add_hookspecs(hookspecs)
        self.failures: dict[str, str] = {}  # plugin name -> why it is not (fully) working
        self._origins: dict[str, discovery.EntryPoint] = {}
        self._reported: set[str] = set()
        self._impls_cache: dict[str, list[Any]] = {}
        self._late: dict[str, str] = {}  # plugins whose hook missed its deadline: why
        self._loaded = False

    # -- loading ---------------------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Import and register every selected ``trl_env.plugins`` entry point, once."""
        if self._loaded:
            return
        self._loaded = True
        scan = discovery.scan()
        for broken in scan.broken:
            self._fail(f"dist:{broken.distribution}", _broken_line(broken))
        for name in scan.unmatched_selection():
            self._fail(
                f"select:{name}",
                f"{discovery.SELECT_VAR} names {name!r}, which no installed distribution or "
                "entry point has.",
            )
        for ep in scan.group(PLUGINS_GROUP):
            if ep.name in self._origins:
                first = self._origins[ep.name].distribution
                self._fail(
                    ep.name,
                    f"plugin {ep.name!r} is registered by both {first} and {ep.distribution}; "
                    f"only {first}'s is loaded.",
                )
                continue
            self._origins[ep.name] = ep
            plugin, problem = _import(ep)
            if problem is None:
                try:
                    self.register(plugin, ep.name)
                except Exception as exc:  # pluggy refuses hooks it does not know, say
                    problem = f"{type(exc).__name__}: {exc}"
            if problem is not None:
                self._fail(ep.name, f"plugin {ep.name!r} from {ep.origin} left out: {problem}")
            else:
                self._check_hook_names(ep.name, plugin)

    def _check_hook_names(self, name: str, plugin: object) -> None:
        """Name a hook implementation that matches no spec (a typo would never be called)."""
        for caller in self.pm.get_hookcallers(plugin) or []:
            mine = [i for i in caller.get_hookimpls() if i.plugin is plugin and not i.optionalhook]
            if caller.has_spec() or not mine:
                continue
            import difflib  # only for a typo: every CLI start loads the plugins

            specs = [n for n in vars(hookspecs) if hasattr(getattr(hookspecs, n), "trl_env_spec")]
            close = difflib.get_close_matches(caller.name, specs, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self._fail(
                name,
                f"{self._label(name)} implements {caller.name!r}, which is not a trl-env hook"
                f"{hint}; it is never called.",
            )

    def register(self, plugin: object, name: str) -> None:
        self._impls_cache.clear()
        self.pm.register(plugin, name=name)

    def unregister(self, name: str) -> None:
        self._impls_cache.clear()
        if self.pm.has_plugin(name):
            self.pm.unregister(name=name)

    def _fail(self, key: str, problem: str) -> None:
        """Record a problem under ``key`` and report it on stderr the first time."""
        self.failures.setdefault(key, problem)
        if problem not in self._reported:
            self._reported.add(problem)
            warn(problem)

    def _label(self, name: str) -> str:
        if name == BUILTIN:
            return "trl-env"
        ep = self._origins.get(name)
        return f"plugin {name!r} from distribution {ep.distribution}" if ep else f"plugin {name!r}"

    # -- calling hooks ---------------------------------------------------------------------
    def _impls(self, hook: str) -> list[Any]:
        self.load_entry_points()
        if hook not in self._impls_cache:
            # pluggy's own call order: the plugin registered last is called first.
            found = getattr(self.pm.hook, hook).get_hookimpls()
            self._impls_cache[hook] = list(reversed(found))
        return self._impls_cache[hook]

    def _call(self, impl: Any, hook: str, deadline: bool = False, **kwargs: Any) -> str | None:
        """Call one plugin's hook; a plugin's bug is recorded and reported, not raised, and
        returned as one sentence. With ``deadline``, a hook that has not returned within
        :func:`import_timeout` seconds is left running on its own thread and reported.

        A :class:`TrlEnvError` (a duplicate name, say) is for the user to see and propagates.
        """
        if impl.plugin_name in self._late:  # it may still be running: never called again
            return self._late[impl.plugin_name]
        label = self._label(impl.plugin_name)
        call = functools.partial(impl.function, **{arg: kwargs[arg] for arg in impl.argnames})
        try:
            if deadline:
                _within(call, import_timeout(), f"waiting for {label} in {hook}")
            else:
                call()
        except TrlEnvError:
            raise
        except _Late as late:
            problem = (
                f"{label} left out: its {hook} did not return in {late.seconds:g} s "
                f"({TIMEOUT_VAR} sets the limit; {discovery.SELECT_VAR} can leave it out)"
            )
            self._fail(impl.plugin_name, problem)
            self._late[impl.plugin_name] = problem
            return problem
        except (Exception, SystemExit) as exc:
            problem = f"{label} failed in {hook}: {describe(exc)}"
            self._fail(impl.plugin_name, problem)
            return problem
        return None

    def _fire(self, hook: str, **kwargs: Any) -> None:
        for impl in self._impls(hook):
            self._call(impl, hook, **kwargs)

    def add_commands(self, cli: Any) -> None:
        """Let each plugin add its commands to ``cli``; a failing plugin is reported, not fatal."""
        for impl in self._impls("register_commands"):
            self._call(impl, "register_commands", deadline=True, cli=cli)

    def episode_end(self, episode: Mapping[str, Any] | Any) -> list[str]:
        """Fire ``on_episode_end``. Takes a record or an object with ``to_dict()``, converted
        only when some plugin listens, so the call costs next to nothing otherwise. Returns what
        went wrong, one sentence per failing plugin (each is also reported once on stderr)."""
        problems: list[str] = []
        impls = self._impls("on_episode_end")
        if impls:
            record = episode if isinstance(episode, Mapping) else episode.to_dict()
            for impl in impls:
                problem = self._call(impl, "on_episode_end", episode=record)
                if problem:
                    problems.append(problem)
        return problems

    def listening(self, hook: str) -> bool:
        """Whether some plugin implements ``hook`` (plugins are loaded on the first ask)."""
        return bool(self._impls(hook))

    def train_begin(self, config: dict[str, Any]) -> None:
        """Fire ``on_train_begin`` with the resolved training configuration."""
        self._fire("on_train_begin", config=config)

    def train_end(self, summary: dict[str, Any]) -> None:
        """Fire ``on_train_end`` with the closing summary."""
        self._fire("on_train_end", summary=summary)

    # -- what plugins register: backends, env host kinds -------------------------------------
    def _registered(self, hook: str, noun: str) -> dict[str, Registration]:
        """What every plugin's ``hook`` registers, trl-env's own built-ins included: name ->
        :class:`Registration`; a name registered twice is refused, naming both owners. A hook
        past its deadline is left out with what it registered."""
        found: dict[str, Registration] = {}
        for impl in self._impls(hook):
            mine: dict[str, Registration] = {}  # kept if the hook returns

            def register(
                name: str,
                factory: Callable[..., Any],
                selected_by: str = "",
                plugin: str = impl.plugin_name,
                mine: dict[str, Registration] = mine,
            ) -> None:
                taken = {**found, **mine}
                if name in taken:
                    raise DuplicatePluginError(
                        f"{noun} {name!r} is registered by both "
                        f"{self._label(taken[name].plugin)} and {self._label(plugin)}; "
                        "uninstall one of them."
                    )
                mine[name] = Registration(plugin, factory, selected_by)

            self._call(impl, hook, deadline=True, register=register)
            if impl.plugin_name not in self._late:  # what a late hook registered goes with it
                found.update(mine)
        return found

    def env_hosts(self) -> dict[str, Registration]:
        """Every kind of env host (``register_env_hosts``): the built-in ``thread`` and
        ``process``, and the plugins' own."""
        return self._registered("register_env_hosts", "Env host")

    def backends(self) -> dict[str, Callable[..., Any]]:
        """Every registered generation backend: name -> factory."""
        found = self._registered("register_backends", "Generation backend")
        return {name: entry.factory for name, entry in found.items()}

    def backend(self, name: str) -> Callable[..., Any]:
        found = self.backends()
        if name not in found:
            import difflib

            available = ", ".join(sorted(found)) or "none"
            msg = f"Unknown generation backend {name!r}."
            close = difflib.get_close_matches(name, list(found), n=2, cutoff=0.6)
            if close:
                msg += f" Did you mean {' or '.join(repr(c) for c in close)}?"
            msg += f" Available: {available}."
            if self.failures:  # the backend asked for may be in a broken plugin: say which and why
                msg += " Plugins that failed: " + "; ".join(self.failures.values())
            raise PluginNotFoundError(msg)
        return found[name]

    # -- listing -----------------------------------------------------------------------------
    def infos(self) -> list[PluginInfo]:
        """Hook plugins from metadata, deselected ones included."""
        from .registry import PluginInfo

        return [
            PluginInfo.of("plugin", ep)
            for ep in discovery.scan().group(PLUGINS_GROUP, disabled=True)
        ]

    def backend_infos(self) -> list[PluginInfo]:
        """Generation backends and env host kinds, each with the distribution of the plugin
        that registers it."""
        from .registry import PluginInfo

        out = []
        for kind, hook, noun in (
            ("backend", "register_backends", "Generation backend"),
            ("host", "register_env_hosts", "Env host"),
        ):
            for name, entry in sorted(self._registered(hook, noun).items()):
                ep = self._origins.get(entry.plugin)
                dist, version = (ep.distribution, ep.version) if ep else _core()
                out.append(PluginInfo(kind, name, _target(entry.factory), dist, version))
        return out


def _import(ep: discovery.EntryPoint) -> tuple[Any, str | None]:
    """Import ``ep`` off the main thread, so a hung import costs a bounded wait, not the CLI.

    Past a couple of seconds the plugin is named on stderr; past the timeout it is left out
    (its thread is a daemon, so it does not keep the process alive either).
    """
    timeout = import_timeout()
    try:
        plugin = _within(ep.load, timeout, f"importing plugin {ep.name!r} from {ep.origin}")
    except _Late:
        return None, (
            f"its import did not finish in {timeout:g} s ({TIMEOUT_VAR} sets the limit; "
            f"{discovery.SELECT_VAR} can leave it out)"
        )
    except BaseException as exc:  # SystemExit included: a plugin must not end the CLI
        return None, describe(exc)
    return plugin, None


class _Late(Exception):
    """A plugin's import or hook did not return within its deadline."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _within(call: Callable[[], Any], timeout: float, doing: str) -> Any:
    """``call()`` on a thread of its own, its result returned and its exception raised here;
    :class:`_Late` past ``timeout`` s (``still {doing}`` said on stderr after a couple of
    seconds), the thread left to itself (a daemon: it keeps the process alive no longer)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # SystemExit included: handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=f"trl-env {doing}", daemon=True)
    thread.start()
    first_wait = min(2.0, timeout / 2)
    thread.join(first_wait)
    if thread.is_alive():
        warn(f"still {doing} after {first_wait:g} s ...")
        thread.join(timeout - first_wait)
    if thread.is_alive():
        raise _Late(timeout)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _broken_line(broken: discovery.Broken) -> str:
    return f"distribution {broken.distribution} is left out: {broken.reason}"


def _target(factory: Callable[..., Any]) -> str:
    target = getattr(factory, "target", None)
    if isinstance(target, str):
        return target
    module = getattr(factory, "__module__", "?")
    return f"{module}:{getattr(factory, '__qualname__', type(factory).__qualname__)}"


def _core() -> tuple[str, str]:
    return "trl-env", discovery.version("trl-env")


class _Current:
    """``manager()``: the process-wide plugin manager; ``manager.cache_clear()`` starts afresh
    (tests that add distributions), forgetting the entry-point scan too."""

    def __init__(self) -> None:
        self._manager: PluginManager | None = None

    def __call__(self) -> PluginManager:
        if self._manager is None:
            pm = PluginManager()
            from . import builtin_plugin

            pm.register(builtin_plugin, name=BUILTIN)
            self._manager = pm
        return self._manager

    def cache_clear(self) -> None:
        self._manager = None
        discovery.forget()


manager = _Current()
