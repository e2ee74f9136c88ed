"""Load a test helper module by its path (suites run with ``--import-mode=importlib``, where a
sibling test file is not importable by name)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_path(path: Path, name: str) -> ModuleType:
    """The module in ``path``, registered as ``name`` (a name of its own per caller, so that two
    suites loading the same file do not share its state)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
