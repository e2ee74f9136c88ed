"""Fake installed distributions for tests: real ``importlib.metadata`` discovery, nothing installed.

Each distribution is a fresh folder holding ``<name>-<version>.dist-info/{METADATA,
entry_points.txt}`` and its modules' source. Putting that folder on ``sys.path`` (or on
``PYTHONPATH`` of a subprocess) is all ``importlib.metadata`` needs to find it, as in pluggy's
own tests. Plugin authors get the ``fake_distribution`` fixture::

    from trl_env.testing.fake_dist import fake_distribution  # in conftest.py

    def test_my_env_by_name(fake_distribution):
        fake_distribution("my-dist", envs={"maze": "my_mod:Maze"}, modules={"my_mod": SOURCE})
        env = trl_env.load_env("maze")
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..discovery import ENVS_GROUP, PLUGINS_GROUP, PROCESSORS_GROUP

EntryPoints = Mapping[str, Mapping[str, str]]  # group -> {name: "module:attr"}

# A sample env's module source, for tests that find an env by name (class ``CountEnv``, its
# own factory): say 1, 2, 3 in turn; a wrong number ends the game.
COUNT_ENV = """
class CountEnv:
    def __init__(self, target=3):
        self.target = target
        self.reward = 0.0
        self.alive = False
        self.said = 0

    def reset(self, seed):
        self.said, self.reward, self.alive = 0, 0.0, True
        return "Say 1."

    def step(self, action):
        if not self.alive:
            return "Over."
        if action.strip() != str(self.said + 1):
            self.alive = False
            return "Wrong."
        self.said += 1
        if self.said == self.target:
            self.reward, self.alive = 1.0, False
            return "You win."
        return f"Say {self.said + 1}."
"""


@dataclass(frozen=True)
class FakeDistribution:
    """One distribution written by :func:`write_distribution`."""

    name: str
    version: str
    path: Path  # the folder to put on sys.path
    modules: tuple[str, ...]


def write_distribution(
    root: Path,
    name: str,
    version: str = "1.0",
    *,
    envs: Mapping[str, str] | None = None,
    processors: Mapping[str, str] | None = None,
    plugins: Mapping[str, str] | None = None,
    entry_points: EntryPoints | None = None,
    modules: Mapping[str, str] | None = None,
) -> FakeDistribution:
    """Write distribution ``name`` into a new folder under ``root``; touch nothing else.

    ``envs``, ``processors`` and ``plugins`` map entry-point names to ``"module:attr"`` in the
    three trl-env groups; ``entry_points`` adds any other group. ``modules`` maps dotted module
    names to their source (dedented); parent packages get an empty ``__init__.py``.
    """
    groups: dict[str, dict[str, str]] = {}
    for group, eps in (
        (ENVS_GROUP, envs),
        (PROCESSORS_GROUP, processors),
        (PLUGINS_GROUP, plugins),
    ):
        if eps:
            groups.setdefault(group, {}).update(eps)
    for group, eps in (entry_points or {}).items():
        groups.setdefault(group, {}).update(eps)

    # One folder per distribution: importlib.metadata caches a folder's listing by its mtime,
    # which is too coarse to see a second distribution written into the same folder at once.
    path = _fresh_dir(root, name)
    info = path / f"{_normalize(name)}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
            for group, eps in groups.items()
        )
    )
    _write_modules(path, modules or {})
    importlib.invalidate_caches()
    return FakeDistribution(name, version, path, tuple(modules or ()))


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _fresh_dir(root: Path, name: str) -> Path:
    base = root / _normalize(name)
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    path.mkdir(parents=True)
    return path


def _write_modules(path: Path, modules: Mapping[str, str]) -> None:
    packages = {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 1)}
    for module in sorted(packages | set(modules)):
        parts = module.split(".")
        if module in packages:
            path.joinpath(*parts).mkdir(parents=True, exist_ok=True)
            target = path.joinpath(*parts, "__init__.py")
        else:
            target = path.joinpath(*parts[:-1], parts[-1] + ".py")
        target.write_text(textwrap.dedent(modules.get(module, "")))


@dataclass
class FakeDistributions:
    """Factory for fake distributions, for this process and for subprocesses.

    Call it like :func:`write_distribution` without ``root``. With a ``monkeypatch`` each
    distribution goes on ``sys.path`` (undone with it); ``env()`` gives a subprocess environment
    whose ``PYTHONPATH`` sees every distribution made so far.
    """

    root: Path
    monkeypatch: pytest.MonkeyPatch | None = None
    made: list[FakeDistribution] = field(default_factory=list)

    def __call__(self, name: str, *args: Any, **parts: Any) -> FakeDistribution:
        """:func:`write_distribution` under :attr:`root` (its arguments, ``root`` left out)."""
        dist = write_distribution(self.root, name, *args, **parts)
        self.made.append(dist)
        if self.monkeypatch is not None:
            self.monkeypatch.syspath_prepend(str(dist.path))
        _forget_plugin_manager()
        return dist

    @property
    def pythonpath(self) -> str:
        """The folders of every distribution made, newest first, as for ``PYTHONPATH``."""
        return os.pathsep.join(str(d.path) for d in reversed(self.made))

    def env(self, **extra: str) -> dict[str, str]:
        """``os.environ`` plus ``PYTHONPATH`` pointing at the fake distributions."""
        env = dict(os.environ)
        paths = [self.pythonpath, env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env.update(extra)
        return env

    def run_cli(
        self, *args: str, cwd: str | Path | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """:func:`run_cli` with ``PYTHONPATH`` pointing at the fake distributions."""
        return run_cli(*args, env=self.env(), cwd=cwd, timeout=timeout)

    def cleanup(self) -> None:
        """Drop the fake modules from ``sys.modules`` so the next test imports its own."""
        tops = {m.split(".")[0] for d in self.made for m in d.modules}
        for mod in [m for m in sys.modules if m.split(".")[0] in tops]:
            del sys.modules[mod]
        _forget_plugin_manager()


def console_script() -> str:
    """The ``trl-env`` script installed next to this interpreter (else the one on ``PATH``)."""
    script = Path(sys.executable).with_name("trl-env")
    if script.exists():
        return str(script)
    found = shutil.which("trl-env")
    if found is None:
        raise FileNotFoundError("no trl-env console script; is trl-env installed?")
    return found


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``trl-env`` console script in a subprocess; output captured as text."""
    return subprocess.run(
        [console_script(), *args],
        env=dict(env) if env is not None else None,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``Error:`` line of a :func:`run_cli` that failed as it should: exit status 1, no
    traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def _forget_plugin_manager() -> None:
    # The process-wide plugin manager loads entry points once; a new one sees the new fakes.
    from ..plugins import manager

    manager.cache_clear()


@pytest.fixture
def fake_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeDistributions]:
    """Factory fixture: ``fake_distribution(name, envs=..., modules=...)`` on ``sys.path``."""
    fakes = FakeDistributions(tmp_path / "fake-site", monkeypatch)
    _forget_plugin_manager()
    yield fakes
    fakes.cleanup()
