"""``trl_env.__all__`` is exactly the API the README documents, and every name resolves."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trl_env

README = Path(__file__).resolve().parents[1] / "README.md"


def documented() -> set[str]:
    text = README.read_text(encoding="utf-8")
    table = text[text.index("<!-- api -->") : text.index("<!-- /api -->")]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    return {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}


def test_all_equals_the_documented_api():
    names = documented() | {"Action", "Delta", "Language", "Seed"}
    assert set(trl_env.__all__) == names
    assert len(trl_env.__all__) == len(set(trl_env.__all__))


def test_every_public_name_resolves():
    for name in trl_env.__all__:
        assert getattr(trl_env, name) is not None, name


def test_importing_the_package_stays_light():
    heavy = "('torch', 'transformers', 'trl')"
    code = f"import sys, trl_env; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_each_public_name_resolves_lazily_from_its_one_home():
    # `import trl_env` imports nothing else (tests/test_import_guard.py): each name comes from the
    # module _HOMES names, and the TYPE_CHECKING block gives type checkers the same imports.
    assert sorted(trl_env._HOME) == sorted(trl_env.__all__)
    tree = ast.parse(Path(trl_env.__file__).read_text(encoding="utf-8"))
    checked = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    seen = {
        a.name: node.module
        for node in checked.body
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    assert seen == trl_env._HOME
    for name, module in trl_env._HOME.items():
        assert getattr(importlib.import_module(f"trl_env.{module}"), name) is getattr(trl_env, name)
    assert set(trl_env.__all__) <= set(dir(trl_env))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'trl_env' has no attribute 'Nope'"):
        trl_env.Nope  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'Nope'"):
        from trl_env import Nope  # noqa: F401
