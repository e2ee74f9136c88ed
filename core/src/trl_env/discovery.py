"""One pass over the installed distributions for trl-env's entry points, robust to bad metadata.

``importlib.metadata.entry_points()`` parses every distribution's ``entry_points.txt`` and raises
on the first malformed one, which would take every command down with a traceback. This scan
reads each file as text, parses only those that mention a ``trl_env.`` group, and records a
distribution whose metadata cannot be read as *broken*, with the reason, instead of raising.
It is also the one place ``TRL_ENV_PLUGINS`` (which distributions and names are loaded) is read.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import sys
from typing import Any, NamedTuple

GROUP_PREFIX = "trl_env."
ENVS_GROUP = "trl_env.envs"
PROCESSORS_GROUP = "trl_env.processors"
PLUGINS_GROUP = "trl_env.plugins"
SELECT_VAR = "TRL_ENV_PLUGINS"


# NamedTuple rather than dataclass: a dataclass costs about a millisecond to create, and this
# module is on every command's start-up path.
class EntryPoint(NamedTuple):
    """One trl-env entry point with its distribution; ``enabled`` is False when deselected."""

    group: str
    name: str
    value: str
    distribution: str
    version: str
    enabled: bool = True

    def load(self) -> Any:
        return md.EntryPoint(self.name, self.value, self.group).load()

    @property
    def origin(self) -> str:
        where = f"{self.group}:{self.name} = {self.value}"
        return f"distribution {self.distribution} (entry point {where})"


class LazyFactory:
    """A factory named by ``"module:attribute"`` (as an entry point names one), imported on
    its first call: what a plugin registers when its module is heavy (a backend needing torch,
    a host kind's machinery)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __repr__(self) -> str:
        return f"LazyFactory({self.target!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import importlib

        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)


class Broken(NamedTuple):
    """A distribution whose trl-env metadata cannot be used, and why (one sentence)."""

    distribution: str
    version: str
    reason: str


class Scan(NamedTuple):
    entry_points: tuple[EntryPoint, ...]
    broken: tuple[Broken, ...]
    selection: frozenset[str] | None  # TRL_ENV_PLUGINS as normalized names; None: load all

    def group(self, group: str, *, disabled: bool = False) -> list[EntryPoint]:
        """Entry points of ``group``; deselected ones too when ``disabled``."""
        return [e for e in self.entry_points if e.group == group and (disabled or e.enabled)]

    def unmatched_selection(self) -> list[str]:
        """Names in ``TRL_ENV_PLUGINS`` that no distribution or entry point has."""
        if self.selection is None:
            return []
        known = {normalize(e.distribution) for e in self.entry_points}
        known |= {normalize(e.name) for e in self.entry_points}
        known |= {normalize(b.distribution) for b in self.broken}
        return sorted(self.selection - known)


def normalize(name: str) -> str:
    """PEP 503 name normalization: ``Trl_Env.Qwen`` and ``trl-env-qwen`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def selection() -> frozenset[str] | None:
    """``TRL_ENV_PLUGINS`` as a set of names: unset means everything, empty means nothing."""
    raw = os.environ.get(SELECT_VAR)
    if raw is None:
        return None
    return frozenset(normalize(part.strip()) for part in raw.split(",") if part.strip())


def _selected(chosen: frozenset[str] | None, distribution: str, name: str) -> bool:
    return chosen is None or normalize(distribution) in chosen or normalize(name) in chosen


# The scan is kept while sys.path, the modification times of its folders (an install adds a
# dist-info folder, which changes its folder's time, as importlib.metadata's own cache relies on)
# and the selection stay the same; forget() drops it outright.
_memo: dict[tuple[object, ...], Scan] = {}


def _path_state() -> tuple[tuple[str, int], ...]:
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, -1))
    return tuple(state)


def scan() -> Scan:
    """Every trl-env entry point on ``sys.path`` and every broken distribution, in path order."""
    chosen = selection()
    key = (_path_state(), chosen)
    if key not in _memo:
        _memo.clear()
        _memo[key] = _scan(chosen)
    return _memo[key]


def forget() -> None:
    """Drop the remembered scan (after installing or writing a distribution in this process)."""
    _memo.clear()


def _scan(chosen: frozenset[str] | None) -> Scan:
    found: list[EntryPoint] = []
    broken: list[Broken] = []
    seen: set[str] = set()
    for dist in md.distributions():
        problem: str | None = None
        try:
            text = dist.read_text("entry_points.txt")
        except (OSError, UnicodeDecodeError) as exc:  # we cannot tell whose it is: say so
            text, problem = None, f"its entry_points.txt cannot be read ({exc})"
        else:
            if not text or f"[{GROUP_PREFIX}" not in text:
                continue  # not a trl-env plugin: its metadata is none of our business
        name, version, meta_problem = _identity(dist)
        if name is None:
            broken.append(Broken(_where(dist), version, meta_problem or problem or "no name"))
            continue
        if normalize(name) in seen:
            continue  # the first distribution of a name on sys.path wins, as in importlib
        seen.add(normalize(name))
        groups = _parse(text) if text is not None and problem is None else problem
        if isinstance(groups, str):
            broken.append(Broken(name, version, groups))
            continue
        for group, entries in (groups or {}).items():
            for ep_name, value in entries:
                if md.EntryPoint.pattern.match(value) is None:
                    reason = f"entry point {group}:{ep_name} = {value!r} is not 'module:attribute'"
                    broken.append(Broken(name, version, reason))
                    continue
                enabled = _selected(chosen, name, ep_name)
                found.append(EntryPoint(group, ep_name, value, name, version, enabled))
    return Scan(tuple(found), tuple(broken), chosen)


def version(name: str) -> str:
    """The installed version of distribution ``name`` ("?" if absent), without the email parser."""
    try:
        return _identity(md.distribution(name))[1]
    except md.PackageNotFoundError:
        return "?"


def _identity(dist: md.Distribution) -> tuple[str | None, str, str | None]:
    """(name, version, problem) from the distribution's METADATA headers.

    Read line by line rather than through ``dist.metadata``: the email parser that it imports
    would add a tenth to the start-up of every command, and only these two headers are needed.
    """
    try:
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    except (OSError, UnicodeDecodeError) as exc:
        return None, "?", f"its METADATA cannot be read ({exc})"
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first blank line; the description follows
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in headers:
            headers[key] = value.strip()
    name = headers.get("Name")
    if not name:
        return None, headers.get("Version", "?"), "its METADATA has no Name"
    return name, headers.get("Version", "?"), None


def _where(dist: md.Distribution) -> str:
    path = getattr(dist, "_path", None)  # PathDistribution's folder; only for the message
    return str(path) if path is not None else repr(dist)


def _parse(text: str) -> dict[str, list[tuple[str, str]]] | str:
    """The ``trl_env.*`` sections of an entry_points.txt, or a one-sentence reason it is broken.

    Read line by line by the rules importlib.metadata loads entry points with (stripped lines,
    ``[group]`` headers, ``name = value`` split at the first ``=``; blank lines and comments
    skipped), not with configparser: importing it cost every command 2% of the floor.
    """
    groups: dict[str, list[tuple[str, str]]] = {}
    group: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
            continue
        if group is None:
            return f"its entry_points.txt has an entry before any [group] header: {line!r}"
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            return f"line {number} of its entry_points.txt is not 'name = value': {line!r}"
        if group.startswith(GROUP_PREFIX):
            groups.setdefault(group, []).append((name.strip(), value.strip()))
    return groups
