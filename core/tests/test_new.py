"""``trl-env new``: the generated packages install, are found by name and pass their own tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from trl_env.cli import new_cmd
from trl_env.cli.main import cli
from trl_env.testing.fake_dist import run_cli

REPO = Path(__file__).resolve().parents[2]


def new(*args: str):
    return CliRunner().invoke(cli, ["new", *args])


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


# -- rendering -------------------------------------------------------------------------------
def test_env_package_layout_and_metadata(tmp_path):
    result = new("env", "maze-run", "--dir", str(tmp_path / "pkg"))
    assert result.exit_code == 0, result.output
    pkg = tmp_path / "pkg"
    assert files_under(pkg) == {
        "pyproject.toml",
        "README.md",
        "src/trl_env_maze_run/__init__.py",
        "src/trl_env_maze_run/env.py",
        "src/trl_env_maze_run/py.typed",
        "tests/test_trl_env_maze_run.py",
    }
    project = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    assert project["name"] == "trl-env-maze-run"
    assert project["entry-points"]["trl_env.envs"] == {"maze-run": "trl_env_maze_run:MazeRunEnv"}
    assert project["dependencies"][0].startswith("trl-env")
    for path in pkg.rglob("*"):
        if path.is_file():
            assert "{{" not in path.read_text(), f"unfilled placeholder in {path}"
    assert "Created trl-env-maze-run (environment 'maze-run')" in result.output
    # The next steps work in a plain venv: the install brings pytest (the test extra).
    assert f"pip install -e '{pkg}[test]'" in result.output
    assert any(r.startswith("pytest") for r in project["optional-dependencies"]["test"])
    assert f"python -m pytest {pkg / 'tests'}" in result.output


def test_processor_package_registers_a_processor(tmp_path):
    result = new("processor", "mistral", "--dir", str(tmp_path / "p"))
    assert result.exit_code == 0, result.output
    project = tomllib.loads((tmp_path / "p" / "pyproject.toml").read_text())["project"]
    assert project["entry-points"] == {
        "trl_env.processors": {"mistral": "trl_env_mistral:MistralProcessor"}
    }


def test_default_folder_is_the_distribution_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = new("env", "trl-env-sokoban")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "trl-env-sokoban" / "src" / "trl_env_sokoban" / "env.py").is_file()


def test_refuses_to_overwrite(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")
    result = new("env", "maze", "--dir", str(target))
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {target} already exists;")
    assert files_under(target) == {"mine.txt"}


def test_an_empty_folder_may_be_filled(tmp_path):
    (tmp_path / "empty").mkdir()
    result = new("env", "maze", "--dir", str(tmp_path / "empty"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "empty" / "pyproject.toml").is_file()


@pytest.mark.parametrize("name", ["3d", "Maze", "my maze", "maze-", "a/b", ""])
def test_invalid_names_are_usage_errors(tmp_path, name):
    result = new("env", name, "--dir", str(tmp_path / "x"))
    assert result.exit_code == 2
    assert result.output.startswith("Error: Invalid environment name")
    assert not (tmp_path / "x").exists()


def test_missing_template_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(new_cmd, "template_dirs", lambda: [tmp_path / "nowhere"])
    result = new("env", "maze", "--dir", str(tmp_path / "x"))
    assert result.exit_code == 1
    assert "template is not part of this trl-env install" in result.output
    assert str(tmp_path / "nowhere") in result.output
    assert not (tmp_path / "x").exists()


def test_a_failed_render_leaves_nothing_behind(tmp_path, monkeypatch):
    template = tmp_path / "tpl" / "env"
    (template / "src").mkdir(parents=True)
    (template / "README.md.tmpl").write_text("{{name}}")
    (template / "src" / "bad.py.tmpl").write_text("{{no_such_placeholder}}")
    monkeypatch.setattr(new_cmd, "template_dirs", lambda: [tmp_path / "tpl"])
    result = new("env", "maze", "--dir", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "unknown placeholder {{no_such_placeholder}}" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tpl"]


def test_the_template_is_not_a_workspace_member():
    # The Makefile installs every plugins/*/pyproject.toml; the template must not be one.
    template = REPO / "plugins" / "template"
    assert not (template / "pyproject.toml").exists()
    assert not list(template.rglob("*.py")), "template code must end in .tmpl"
    assert (template / "env" / "pyproject.toml.tmpl").is_file()


def test_the_template_used_is_the_one_in_plugins():
    # Whether found in the installed package (a link or a copy) or in the checkout, the files
    # rendered are plugins/template's: no stale copy can ship.
    for kind in ("env", "processor"):
        found = new_cmd.find_template(kind)
        assert sorted(files_under(found)) == sorted(files_under(REPO / "plugins/template" / kind))
        for rel in files_under(found):
            assert (found / rel).read_bytes() == (
                REPO / "plugins/template" / kind / rel
            ).read_bytes()


# -- the generated packages, installed -------------------------------------------------------
# The tests of the installed packages share one xdist worker (make test: --dist loadgroup), so
# the packages are rendered and pip-installed once, not once per worker.
ONE_INSTALL = pytest.mark.xdist_group("new_installed")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """Both variants rendered by the real script, then pip-installed into a --target folder."""
    root = tmp_path_factory.mktemp("new")
    # Made inside another project, as in a checkout of trl-env: its pytest settings must not apply.
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "--not-an-option"\n')
    packages = {"env": root / "trl-env-knot", "processor": root / "trl-env-plainchat"}
    for kind, folder in packages.items():
        name = folder.name.removeprefix("trl-env-")
        result = run_cli("new", kind, name, "--dir", str(folder))
        assert result.returncode == 0, result.stderr
    site = root / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(site),
         *map(str, packages.values())],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return {**packages, "site": site}


def with_site(site: Path) -> dict[str, str]:
    paths = [str(site), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@ONE_INSTALL
def test_generated_packages_are_found_by_name(installed):
    result = run_cli("list", "--json", env=with_site(installed["site"]))
    assert result.returncode == 0, result.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(result.stdout)}
    assert rows[("env", "knot")]["distribution"] == "trl-env-knot"
    assert rows[("processor", "plainchat")]["distribution"] == "trl-env-plainchat"
    assert rows[("env", "knot")]["status"] == "ok"


@ONE_INSTALL
def test_generated_tests_pass(installed):
    # `pytest` in each package's folder, against the installed copy (src/ is not on the path),
    # as a user's would run: the package's own settings, not those of the project around it.
    for kind in ("env", "processor"):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=installed[kind], env=with_site(installed["site"]),
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        assert " passed" in proc.stdout and "skipped" not in proc.stdout


@ONE_INSTALL
def test_generated_code_is_ruff_clean(installed):
    config = str(REPO / "pyproject.toml")
    folders = [str(installed["env"]), str(installed["processor"])]
    for args in (["check"], ["format", "--check"]):
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "--config", config, *folders],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr


@ONE_INSTALL
def test_generated_env_declares_its_options_with_the_kit(installed):
    script = (
        "import json\n"
        "from trl_env.envkit import option_specs\n"
        "from trl_env_knot import KnotEnv\n"
        "print(json.dumps([[s.name, s.type, s.default] for s in option_specs(KnotEnv)]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=with_site(installed["site"]), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [["high", "int", 100], ["max_turns", "int", 10]]
