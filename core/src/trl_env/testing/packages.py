"""A real package, built from its own folder and pip-installed into a ``--target`` folder outside
the environment under test: what a user's ``pip install`` of a third-party plugin gives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from .timeouts import scaled

PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
requires-python = ">=3.11"
dependencies = ["trl-env"]

[project.entry-points."{group}"]
{entry_points}

[tool.setuptools.packages.find]
where = ["src"]
"""


def pip_install_package(
    root: Path,
    name: str,
    version: str,
    package: str,
    source: str,
    entry_points: tuple[str, Mapping[str, str]],
) -> Path:
    """Write distribution ``name`` (module ``package`` holding ``source``, entry points
    ``(group, {name: value})``) under ``root``, pip-install it into ``root/site``; return that."""
    folder = root / name
    (folder / "src" / package).mkdir(parents=True)
    group, points = entry_points
    lines = "\n".join(f'{key} = "{value}"' for key, value in points.items())
    (folder / "pyproject.toml").write_text(
        PYPROJECT.format(name=name, version=version, group=group, entry_points=lines)
    )
    (folder / "src" / package / "__init__.py").write_text(textwrap.dedent(source))
    target = root / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(target), str(folder)],
        capture_output=True, text=True, timeout=scaled(300), check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return target
