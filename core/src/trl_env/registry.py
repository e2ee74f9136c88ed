"""Plugin lookup by name, in one place.

Listing reads entry-point metadata only; a plugin module is imported when its name is resolved,
so a broken plugin fails only when it is used, and every other plugin keeps working.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

from . import discovery
from .discovery import ENVS_GROUP, PROCESSORS_GROUP
from .errors import (
    DuplicatePluginError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionError,
    ProtocolError,
    describe,
)
from .protocols import Env, Processor, Tokenizer, not_an_env

T = TypeVar("T")
Factory = Callable[..., Any]

IN_PROCESS = "(registered in-process)"


class PluginInfo(NamedTuple):  # not a dataclass: cheaper to create at start-up
    """One name in a group, as the metadata (or an in-process registration) describes it.

    ``enabled`` is False for an entry point that ``TRL_ENV_PLUGINS`` leaves out.
    """

    kind: str
    name: str
    value: str
    distribution: str
    version: str
    enabled: bool = True

    @classmethod
    def of(cls, kind: str, ep: discovery.EntryPoint) -> PluginInfo:
        return cls(kind, ep.name, ep.value, ep.distribution, ep.version, ep.enabled)

    def to_dict(self) -> dict[str, str]:
        """Every field but ``enabled`` (`trl-env list` says that in its status)."""
        return {key: value for key, value in self._asdict().items() if key != "enabled"}


class Registry(Generic[T]):
    """Name -> factory for one kind of plugin (environments or processors)."""

    def __init__(
        self, kind: str, group: str, protocol: type, noun: str, check: Callable[[Any, str], None]
    ) -> None:
        self.kind = kind
        self.group = group
        self.protocol = protocol
        self.noun = noun
        self.check = check  # (made, "environment 'name'") -> None, or ProtocolError
        self._local: dict[str, Factory] = {}

    # -- in-process registration (notebooks, tests) --------------------------------------
    def register(self, name: str, factory: Factory, *, replace: bool = False) -> None:
        if not callable(factory):
            raise ProtocolError(f"The factory registered for {self.noun} {name!r} is not callable.")
        if name in self._local and not replace:
            raise DuplicatePluginError(
                f"{self.noun.capitalize()} {name!r} is already registered in this process; "
                "pass replace=True to override it."
            )
        self._local[name] = factory

    def unregister(self, name: str) -> None:
        self._local.pop(name, None)

    # -- listing: metadata only ---------------------------------------------------------
    def infos(self) -> list[PluginInfo]:
        """Every name, from metadata and in-process registrations; deselected ones included."""
        infos = [
            PluginInfo.of(self.kind, ep) for ep in discovery.scan().group(self.group, disabled=True)
        ]
        for name, factory in self._local.items():
            value = f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', '?')}"
            infos.append(PluginInfo(self.kind, name, value, IN_PROCESS, ""))
        return sorted(infos, key=lambda i: (i.name, i.distribution))

    def names(self) -> list[str]:
        """The names that resolve (``TRL_ENV_PLUGINS`` honoured)."""
        return sorted({info.name for info in self.infos() if info.enabled})

    def registered_here(self, name: str) -> Factory | None:
        """The factory registered as ``name`` in this process (None: an entry point's, or none)."""
        return self._local.get(name)

    # -- resolution: imports only the plugin asked for -----------------------------------
    def require(self, name: str) -> None:
        """Refuse an unknown (or doubly registered) name in one sentence, importing nothing:
        where the plugin's code must not run (a trainer whose envs run in worker processes)."""
        if name not in self._local:
            self._entry_point(name)

    def _entry_point(self, name: str) -> discovery.EntryPoint:
        matches = [ep for ep in discovery.scan().group(self.group) if ep.name == name]
        if not matches:
            raise PluginNotFoundError(self._unknown_message(name))
        if len(matches) > 1:
            owners = " and ".join(f"{ep.distribution} ({ep.value})" for ep in matches)
            raise DuplicatePluginError(
                f"{self.noun.capitalize()} {name!r} is registered by both {owners}; "
                "uninstall one of them."
            )
        return matches[0]

    def factory(self, name: str) -> Factory:
        if name in self._local:
            return self._local[name]
        ep = self._entry_point(name)
        try:
            factory = ep.load()
        except (Exception, SystemExit) as exc:  # any failure inside a plugin's import is its own
            raise PluginLoadError(
                f"{self.noun.capitalize()} {name!r} from {ep.origin} failed to import: "
                f"{describe(exc)}"
            ) from exc
        if not callable(factory):
            raise ProtocolError(
                f"Entry point {ep.name} = {ep.value} of {ep.distribution} is not callable; "
                f"it must be a class or function that returns a {self.protocol.__name__}."
            )
        return factory

    def create(self, name: str, **kwargs: Any) -> T:
        return self.build(name, self.factory(name), kwargs)

    def build(self, name: str, factory: Factory, kwargs: dict[str, Any]) -> T:
        """Call ``factory(**kwargs)`` and check the result, with the registry's messages."""
        try:
            obj = factory(**kwargs)
        except TypeError as exc:
            raise PluginOptionError(
                f"Could not create {self.noun} {name!r} with options {_fmt_kwargs(kwargs)}: {exc}"
            ) from exc
        except Exception as exc:
            if getattr(exc, "exit_code", None) == 2:  # an env kit's refusal of a value given
                raise PluginOptionError(f"Could not create {self.noun} {name!r}: {exc}") from exc
            raise PluginLoadError(
                f"Creating {self.noun} {name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        self.check(obj, f"{self.noun} {name!r}")
        return obj

    def _unknown_message(self, name: str) -> str:
        # Only names that exist are suggested: never a guessed package name to pip install.
        import difflib

        names = self.names()
        msg = f"Unknown {self.noun} {name!r}."
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        if close:
            msg += f" Did you mean {' or '.join(repr(c) for c in close)}?"
        msg += f" Installed {self.noun}s: {', '.join(names) if names else 'none'}."
        scan = discovery.scan()
        hidden = [e for e in scan.group(self.group, disabled=True) if e.name == name]
        if hidden:
            msg += f" {hidden[0].distribution} has it, but {discovery.SELECT_VAR} leaves it out."
        elif scan.broken:
            msg += (
                " Distributions with broken metadata: "
                + "; ".join(f"{b.distribution}: {b.reason}" for b in scan.broken)
                + "."
            )
        elif not close:
            msg += (
                " If it comes from a package, install that package (the trl-env README lists "
                "this project's), then `trl-env list` shows it."
            )
        return msg


def _fmt_kwargs(kwargs: dict[str, Any]) -> str:
    shown = {k: v for k, v in kwargs.items() if k != "tokenizer"}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items()) or "(none)"


def check_protocol(obj: Any, protocol: type, what: str) -> None:
    """Refuse ``obj`` with a message naming every member it lacks or that is not a method."""
    # Not isinstance(): a runtime Protocol accepts any attribute for a method (step = "north").
    members = _protocol_members(protocol)
    missing = [m for m in members if not hasattr(obj, m)]
    methods = _methods(protocol)
    not_callable = [
        m for m in members if m in methods and hasattr(obj, m) and not callable(getattr(obj, m))
    ]
    problems = []
    if missing:
        problems.append(f"it lacks {', '.join(missing)}")
    if not_callable:
        problems.append(f"{', '.join(not_callable)} must be methods")
    if not problems:
        return
    raise ProtocolError(
        f"{what} returned a {type(obj).__name__}, which is not a {protocol.__name__}: "
        f"{'; '.join(problems)} (a {protocol.__name__} needs {', '.join(members)})."
    )


def _methods(protocol: type) -> set[str]:
    return {m for m in _protocol_members(protocol) if callable(getattr(protocol, m, None))}


def _protocol_members(protocol: type) -> list[str]:
    annotated = list(getattr(protocol, "__annotations__", {}))
    methods = [m for m, v in vars(protocol).items() if callable(v) and not m.startswith("_")]
    return annotated + methods


def check_env(obj: Any, what: str) -> None:
    """Refuse ``obj`` when it is not an env, by the one check every way of making one uses."""
    problem = not_an_env(obj, what)
    if problem:
        raise ProtocolError(f"{problem}.")


envs: Registry[Env] = Registry("env", ENVS_GROUP, Env, "environment", check_env)
processors: Registry[Processor] = Registry(
    "processor",
    PROCESSORS_GROUP,
    Processor,
    "processor",
    lambda obj, what: check_protocol(obj, Processor, what),
)


def register_env(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Register an environment factory under ``name`` in this process."""
    envs.register(name, factory, replace=replace)


def register_processor(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Register a processor factory under ``name`` in this process."""
    processors.register(name, factory, replace=replace)


ISOLATION_GROUP = "trl_env.isolation"  # NAME = process: the env NAME asks for its own process


def declared_isolation(source: Any) -> str | None:
    """The isolation an env source asks for (``process`` or ``thread``), or None. A registered
    name answers from its distribution's metadata (entry point ``NAME = process`` in the group
    :data:`ISOLATION_GROUP`), never by importing the env: the point of asking is often to keep
    it out of this process. A factory (a class, an in-process registration, a spec's factory
    of a registered name) answers by its ``isolation`` attribute."""
    import functools

    if isinstance(source, functools.partial) and source.func is load_env and source.args:
        source = source.args[0]  # EnvSpec.factory(): a registered name and its options
    if isinstance(source, str):
        if source in envs._local:
            return _isolation_of(envs._local[source])
        scan = discovery.scan()
        owners = {ep.distribution for ep in scan.group(envs.group) if ep.name == source}
        asked = [
            ep.value.strip()
            for ep in scan.group(ISOLATION_GROUP)
            if ep.name == source and ep.distribution in owners
        ]
        return asked[0] if asked and asked[0] in ("process", "thread") else None
    return _isolation_of(source)


def _isolation_of(factory: Any) -> str | None:
    value = getattr(factory, "isolation", None)
    return value if value in ("process", "thread") else None


def load_env(name: str, **kwargs: Any) -> Env:
    """Create the environment registered as ``name``."""
    return envs.create(name, **kwargs)


def load_processor(name: str, tokenizer: Tokenizer | None = None, **kwargs: Any) -> Processor:
    """Create the processor registered as ``name`` for ``tokenizer``."""
    if tokenizer is not None:
        kwargs["tokenizer"] = tokenizer
    return processors.create(name, **kwargs)


def all_infos(kinds: Iterable[Registry[Any]] = (envs, processors)) -> list[PluginInfo]:
    out: list[PluginInfo] = []
    for reg in kinds:
        out.extend(reg.infos())
    return out
