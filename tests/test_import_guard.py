"""What ``import trl_env``, ``trl-env --help``, ``trl-env list`` and tab completion load, held to
the lists kept here (not a timing: bench/startup.py measures the time).

Each path runs in a fresh interpreter, since this test's own imports would hide a new one, and
reports ``sys.modules`` as it exits, with the chain of imports that loaded each module. A path
loads exactly the trl-env modules listed for it; beyond what bench/startup.py's floor loads
(Python, click, pluggy, the entry-point scan) only the few other modules listed; and never the
training stack. So an eager import added anywhere on these paths fails here the day it is
written, naming the line that made it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from trl_env.testing.modules import load_path
from trl_env.testing.timeouts import scaled

BENCH = Path(__file__).resolve().parents[1] / "bench" / "startup.py"

# Never loaded by these paths (the training stack, and libraries only some commands use).
NEVER = frozenset(
    {
        "torch",
        "transformers",
        "trl",
        "vllm",
        "tokenizers",
        "datasets",
        "accelerate",
        "peft",
        "huggingface_hub",
        "numpy",
        "jinja2",
        "yaml",
        "rich",
        "concurrent.futures",
        "asyncio",
        "configparser",  # entry_points.txt is read as importlib.metadata reads it
    }
)

# What every command line loads before it runs a command: the group and its user errors.
CLI = {"trl_env", "trl_env.cli", "trl_env.cli.main", "trl_env.errors"}
# The hook plugins, loaded for the commands they add (`--help`, completing a name, `list`).
PLUGINS = {
    "trl_env.plugins",
    "trl_env.hookspecs",
    "trl_env.discovery",
    "trl_env.builtin_plugin",
    # this repo's hook plugin: `trl-env openenv` and `trl-env serve`, light until they run
    "trl_env_openenv",
    "trl_env_openenv.commands",
}
LIST = {"trl_env.cli.list_cmd", "trl_env.registry", "trl_env.protocols"}  # the list command
HELP = {"click._textwrap"}  # click's help layout
COMPLETE = {"click.shell_completion", "shlex"}  # click's side of tab completion

# path -> (argv after `trl-env`, or None for `import trl_env`; added environment;
#          the trl_env* modules it loads; other modules it may load beyond the floor)
PATHS: dict[str, tuple[list[str] | None, dict[str, str], set[str], set[str]]] = {
    "import trl_env": (None, {}, {"trl_env"}, set()),
    "trl-env --help": (["--help"], {}, CLI | PLUGINS, HELP),
    "trl-env list": (["list"], {}, CLI | PLUGINS | LIST | {"trl_env.streams"}, set()),
    # what the shell runs on TAB after `trl-env ` (click's bash completion protocol)
    "trl-env <TAB>": (
        [],
        {"COMP_WORDS": "trl-env ", "COMP_CWORD": "1"},
        CLI | PLUGINS,
        COMPLETE,
    ),
    # list's options: its module, which imports (but does not load) the plugins
    "trl-env list --<TAB>": (
        [],
        {"COMP_WORDS": "trl-env list --", "COMP_CWORD": "2"},
        CLI | LIST | {"trl_env.plugins", "trl_env.hookspecs", "trl_env.discovery"},
        COMPLETE,
    ),
}

# Runs first in the probed interpreter: a finder that finds nothing but is asked first about
# every module imported (by a statement or by importlib), and keeps the frames that asked; at
# exit, every loaded module and those chains go to IMPORT_GUARD_REPORT.
PROBE = """\
import atexit, json, os, sys
chains = {}
class Witness:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in chains:
            frames, f = [], sys._getframe(1)
            while f is not None:
                module = f.f_globals.get("__name__", "?")
                if not module.startswith(("importlib", "_frozen_importlib", "__main__")):
                    if not frames or frames[-1][0] != module:
                        frames.append((module, f.f_lineno))
                f = f.f_back
            chains[name] = [f"{module}:{line}" for module, line in reversed(frames)]
        return None
def report():
    with open(os.environ["IMPORT_GUARD_REPORT"], "w") as out:
        json.dump({"modules": sorted(sys.modules), "chains": chains}, out)
atexit.register(report)
sys.meta_path.insert(0, Witness)
"""


class Loaded(NamedTuple):
    modules: set[str]  # sys.modules at exit
    chains: dict[str, list[str]]  # module -> "importer:line" frames that imported it
    stdout: str


def probe(code: str, tmp_path: Path, env: dict[str, str] | None = None) -> Loaded:
    """Run ``code`` after PROBE in a fresh interpreter: what it loaded, and from where."""
    report = tmp_path / "report.json"
    environ = {k: v for k, v in os.environ.items() if k != "TRL_ENV_PLUGINS"}
    environ.update(env or {}, IMPORT_GUARD_REPORT=str(report))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE + code],
        capture_output=True, text=True, env=environ, timeout=scaled(120), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not proc.stderr, proc.stderr[-3000:]  # a plugin left out would change the path
    found = json.loads(report.read_text())
    return Loaded(set(found["modules"]), found["chains"], proc.stdout)


def run_path(name: str, tmp_path: Path) -> Loaded:
    argv, env, _, _ = PATHS[name]
    if argv is None:
        return probe("import trl_env\n", tmp_path)
    if "COMP_WORDS" in env:
        env = {**env, "_TRL_ENV_COMPLETE": "bash_complete"}
    code = f"from trl_env.cli import main\nsys.argv = ['trl-env', *{argv!r}]\nmain()\n"
    return probe(code, tmp_path, env)


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """What the floor of bench/startup.py loads: Python, click, pluggy, the entry-point scan."""
    modules = probe(load_path(BENCH, "startup_bench").FLOOR, tmp_path_factory.mktemp("f")).modules
    assert {"click", "pluggy", "importlib.metadata"} <= modules
    return modules


def unexpected(name: str, found: Loaded, floor: set[str]) -> list[str]:
    """One line per module ``name`` loads that its lists do not have, with its import chain."""
    _, _, ours, others = PATHS[name]

    def listed(m: str) -> bool:
        if m in NEVER:
            return False
        return m in ours if m.startswith("trl_env") else m in floor or m in others

    extra = sorted(m for m in found.modules if not listed(m))
    # each new import is said once, where it is made: not what it pulls in after it, nor what
    # an extension module put in sys.modules without importing it (no finder was asked)
    pulled = {m for m in extra for frame in found.chains.get(m, []) if frame.split(":")[0] in extra}
    lines = []
    for m in extra:
        if m in found.chains and m not in pulled:
            where = " -> ".join([*found.chains[m], m]) if found.chains[m] else "the code run"
            lines.append(f"  {m}, imported by {where}")
    return lines or [f"  {m}, set by an extension module" for m in extra]


@pytest.mark.parametrize("name", list(PATHS))
def test_each_path_loads_only_its_listed_modules(name, floor, tmp_path):
    found = run_path(name, tmp_path)
    bad = unexpected(name, found, floor)
    assert not bad, (
        f"`{name}` now loads modules it did not:\n" + "\n".join(bad) + "\nImport them inside "
        "the function that needs them; if every run of this path needs one, add it to PATHS in "
        "tests/test_import_guard.py (never the training stack)."
    )
    gone = sorted(PATHS[name][2] - found.modules)
    assert not gone, f"`{name}` no longer loads {gone}: take them out of PATHS in this file."


def test_the_completion_paths_complete(tmp_path):
    # The paths above are real completions: the names and options the shell would show.
    names = run_path("trl-env <TAB>", tmp_path).stdout.split()
    assert {"plain,list", "plain,train", "plain,openenv"} <= set(names)
    options = run_path("trl-env list --<TAB>", tmp_path).stdout.split()
    assert {"plain,--json", "plain,--env"} <= set(options)


def test_the_guard_names_an_eager_import_where_it_is_made(floor, tmp_path, monkeypatch):
    """As the test above would meet an eager import: a light path whose function imports the
    engine."""
    (tmp_path / "light.py").write_text("def start():\n    import trl_env.backends\n")
    monkeypatch.setitem(PATHS, "light.start()", (None, {}, {"trl_env"}, {"light"}))
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    found = probe("import trl_env, light\nlight.start()\n", tmp_path, {"PYTHONPATH": path})
    assert "trl_env.backends.base" in found.modules  # what it pulls in: not said
    assert unexpected("light.start()", found, floor) == [
        "  trl_env.backends, imported by light:2 -> trl_env.backends"
    ]
