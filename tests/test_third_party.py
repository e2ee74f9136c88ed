"""A third-party environment package, written and pip-installed outside this repo, is found by name.

It is installed with ``pip --target`` into a temporary folder, never into the test environment,
and reached through ``PYTHONPATH``: exactly what a user's ``pip install`` gives, with no change
to this repo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trl_env.testing.fake_dist import COUNT_ENV, run_cli
from trl_env.testing.packages import pip_install_package
from trl_env.testing.timeouts import scaled

# One xdist worker runs the module (make test: --dist loadgroup): the package is installed once.
pytestmark = pytest.mark.xdist_group("third_party")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``acme-counting`` (the sample count env) built from its own folder and installed into a
    --target folder."""
    root = tmp_path_factory.mktemp("third_party")
    assert REPO not in root.parents, "the package must live outside the repo"
    target = pip_install_package(
        root,
        "acme-counting",
        "2.0.1",
        "acme_count",
        COUNT_ENV,
        ("trl_env.envs", {"acme-count": "acme_count:CountEnv"}),
    )
    assert (target / "acme_count" / "__init__.py").is_file()
    return target


def env_with(site: Path) -> dict[str, str]:
    paths = [str(site), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_not_visible_without_the_install():
    rows = json.loads(run_cli("list", "--json").stdout)
    assert "acme-count" not in {r["name"] for r in rows}


def test_listed_with_its_distribution_and_version(site):
    result = run_cli("list", "--json", env=env_with(site))
    assert result.returncode == 0, result.stderr
    (row,) = [r for r in json.loads(result.stdout) if r["name"] == "acme-count"]
    assert row == {
        "kind": "env",
        "name": "acme-count",
        "value": "acme_count:CountEnv",
        "distribution": "acme-counting",
        "version": "2.0.1",
        "status": "ok",
    }


def test_resolves_by_name_and_plays(site):
    script = textwrap.dedent(
        """
        import json, trl_env
        env = trl_env.load_env("acme-count", target=2)
        texts = [env.reset("train-0"), env.step("1"), env.step("2")]
        print(json.dumps([texts, env.reward, env.alive, isinstance(env, trl_env.Env)]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env_with(site), cwd=site.parent, capture_output=True, text=True, timeout=scaled(120),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == [["Say 1.", "Say 2.", "You win."], 1.0, False, True]


def test_unknown_name_lists_it_among_the_installed(site):
    script = "import trl_env; trl_env.load_env('acme-cont')"
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env_with(site), capture_output=True, text=True,
        timeout=scaled(120), check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "Did you mean 'acme-count'?" in proc.stderr
    assert "pip install" not in proc.stderr  # never a guessed package name
