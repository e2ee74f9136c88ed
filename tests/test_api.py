"""``trl_env.__all__`` is exactly the API the README documents, and every name resolves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
