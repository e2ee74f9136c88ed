"""The layer rule of docs/architecture.md, read from its "Layers" table and held against every
import in the core's source (module level or inside a function): no import runs up the layers,
no circle of files imports itself, the core imports no plugin distribution, and the top layer
stays small; and its "What plugins import" table, held against every plugin distribution's
imports of the core: only the modules it names, never a private (underscored) name."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).parents[2]
SOURCE = ROOT / "core" / "src"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Where plugin distributions keep their source (their tests may use anything the core has).
PLUGIN_SOURCES = ("plugins/*/src", "trl_env_envs/*/src", "trl_env_processors/*/src")


def modules() -> dict[str, Path]:
    """Every module of the core: dotted name -> file (a package by its ``__init__``)."""
    found = {}
    for path in (SOURCE / "trl_env").rglob("*.py"):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """The modules ``name`` imports: ``(target, line)``. ``from . import x`` imports ``x``, not
    the package it sits in (which is already importing)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = subs if len(subs) == len(node.names) else [base, *subs]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        out += [(t, node.lineno) for t in targets if t != name]
    return out


def table(heading: str) -> list[tuple[str, list[str]]]:
    """The two-column table under ``## heading`` of docs/architecture.md: (first cell, the
    `code` names of the second), in order."""
    text = ARCHITECTURE.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and not set(cells[0]) <= set("-: "):  # not the rule under the head
            rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    assert rows, f"docs/architecture.md has no {heading!r} table"
    return rows


def layers() -> list[tuple[str, list[str]]]:
    """The "Layers" table of docs/architecture.md, top layer first: (name, module patterns)."""
    return [(name, patterns) for name, patterns in table("Layers") if re.match(r"\d+\.", name)]


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    """The layer's height (0 = the ground) of ``module``; the longest pattern wins."""
    relative = module.removeprefix("trl_env").lstrip(".") or "__init__"
    best: tuple[int, int] | None = None
    for height, (_, patterns) in enumerate(reversed(table)):
        for pattern in patterns:
            name = pattern.removesuffix(".py").replace("/", ".").rstrip(".")
            folder = pattern.endswith("/")
            matches = relative == name or (folder and relative.startswith(name + "."))
            if matches and (best is None or len(name) > best[1]):
                best = (height, len(name))
    return None if best is None else best[0]


def graph() -> dict[str, list[tuple[str, int]]]:
    known = modules()
    return {
        name: [(t, line) for t, line in imports(name, path, known) if t in known]
        for name, path in known.items()
    }


Edges = dict[str, list[tuple[str, int]]]


def upward(edges: Edges, table: list[tuple[str, list[str]]]) -> list[str]:
    """Every import in ``edges`` whose target sits on a higher layer than its importer."""
    names = [name for name, _ in reversed(table)]
    return [
        f"{m} (layer {names[layer_of(m, table) or 0]}) imports {t} "
        f"(layer {names[layer_of(t, table) or 0]}) at line {line}"
        for m, targets in edges.items()
        for t, line in targets
        if (layer_of(t, table) or 0) > (layer_of(m, table) or 0)
    ]


def circles(edges: Edges) -> list[str]:
    """Every circle of imports in ``edges`` (found once per back edge of a depth-first walk)."""
    targets = {m: sorted({t for t, _ in found}) for m, found in edges.items()}
    seen: dict[str, int] = defaultdict(int)  # 0 new, 1 on the path, 2 done
    found: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        seen[module] = 1
        for target in targets.get(module, []):
            if seen[target] == 1:
                found.append(" -> ".join([*path[path.index(target) :], target]))
            elif seen[target] == 0:
                visit(target, [*path, target])
        seen[module] = 2

    for module in sorted(targets):
        if seen[module] == 0:
            visit(module, [module])
    return found


def test_every_module_has_a_layer_and_no_import_runs_up() -> None:
    table = layers()
    edges = graph()
    unplaced = sorted(m for m in edges if layer_of(m, table) is None)
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
    found = upward(edges, table)
    assert not found, "imports that run up the layers:\n" + "\n".join(found)


def test_no_circle_of_files_imports_itself() -> None:
    found = circles(graph())
    assert not found, "import circles in the core:\n" + "\n".join(found)


def test_the_core_imports_no_plugin() -> None:
    known = modules()
    found = [
        f"{name} imports {target} at line {line}"
        for name, path in known.items()
        for target, line in imports(name, path, known)
        if target.startswith("trl_env_")
    ]
    assert not found, "the core imports plugin distributions:\n" + "\n".join(found)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_top_layer_holds_less_than_a_third_of_the_core() -> None:
    table_ = layers()
    known = modules()
    top = [p for m, p in known.items() if layer_of(m, table_) == len(table_) - 1]
    share = sum(map(lines, top)) / sum(lines(p) for p in known.values())
    assert top and share < 1 / 3, f"the top layer ({table_[0][0]}) holds {share:.0%} of the core"


def plugin_modules() -> dict[str, Path]:
    """Every module of every plugin distribution's source: dotted name -> file."""
    found = {}
    for pattern in PLUGIN_SOURCES:
        for src in ROOT.glob(pattern):
            for path in src.rglob("*.py"):
                parts = list(path.relative_to(src).with_suffix("").parts)
                found[".".join(parts)] = path
    return found


def core_imports(path: Path) -> list[tuple[str, list[str], int]]:
    """What ``path`` imports of the core: ``(module, names, line)``; ``names`` empty for
    ``import trl_env.x``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] == "trl_env":
                out.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out += [
                (a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "trl_env"
            ]
    return out


def open_to_plugins() -> set[str]:
    """The core modules of the "What plugins import" table, as dotted names (a folder's name
    ends with a dot: every module in it)."""
    names = set()
    for _, patterns in table("What plugins import"):
        for pattern in patterns:
            if not re.fullmatch(r"trl_env|[\w/]+\.py|[\w/]+/", pattern):
                continue  # a name the row mentions (`EnvHost`), not a module
            dotted = pattern.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            names.add("trl_env" if dotted == "trl_env" else f"trl_env.{dotted}")
    assert "trl_env" in names, "the table names the package's face (`trl_env`)"
    return names


def plugin_problems(path: Path, allowed: set[str], known: dict[str, Path]) -> list[str]:
    """Each import of ``path`` of a core module ``allowed`` does not name, or of a private
    name."""
    problems = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for module, names, line in core_imports(path):
        targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in known] or [module]
        for target in targets:
            folders = [a for a in allowed if a.endswith(".")]
            if target not in allowed and not any(target.startswith(f) for f in folders):
                problems.append(f"{where}:{line} imports {target}")
        private = [n for n in names if n.startswith("_")]
        private += [part for part in module.split(".") if part.startswith("_")]
        if private:
            problems.append(f"{where}:{line} imports private {', '.join(private)}")
    return problems


def test_plugins_import_only_what_the_core_opens_to_them() -> None:
    allowed, known = open_to_plugins(), modules()
    missing = [a for a in allowed if a.rstrip(".") not in known]
    assert not missing, f"the table names modules the core does not have: {missing}"
    found = [p for path in plugin_modules().values() for p in plugin_problems(path, allowed, known)]
    assert plugin_modules(), "no plugin source found"
    assert not found, "plugins importing core internals:\n" + "\n".join(found)


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    """An import up the layers and a circle, as the checks above would meet them."""
    table = layers()
    module = tmp_path / "errors.py"
    module.write_text("from .rollout import play\n\ndef f():\n    from . import boundary\n")
    known = {"trl_env.rollout": module, "trl_env.boundary": module}
    edges = {"trl_env.errors": imports("trl_env.errors", module, known)}
    assert edges["trl_env.errors"] == [("trl_env.rollout", 1), ("trl_env.boundary", 4)]
    assert len(upward(edges, table)) == 2
    assert layer_of("trl_env.testing.envs", table) == len(table) - 1
    assert layer_of("trl_env.cli.main", table) == len(table) - 2
    loop = {"trl_env.a": [("trl_env.b", 1)], "trl_env.b": [("trl_env.a", 1)]}
    assert circles(loop) == ["trl_env.a -> trl_env.b -> trl_env.a"]
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "from trl_env import EnvSpec\nfrom trl_env.envkit import EnvKit, _unknown\n"
        "def f():\n    from trl_env.rollout import play\n    import trl_env.hosts.pool\n"
    )
    allowed = {"trl_env", "trl_env.envkit", "trl_env.hosts.pool", "trl_env.testing."}
    problems = [p.split(" ", 1)[1] for p in plugin_problems(plugin, allowed, modules())]
    assert problems == ["imports private _unknown", "imports trl_env.rollout"]
