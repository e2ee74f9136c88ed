"""The published set: wheels and sdists built as `make dist` does, installed alone in a fresh venv.

The venv holds only the light core and one environment (their wheels, with click, pluggy, rich
and pyyaml from the package index), never torch, transformers or trl. In it, the light commands
(`list`, `play`, `new`, `view`, `compare`), the env conformance kit and `--help` work, and
the commands that need the training stack say in one sentence which extra to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

# One xdist worker runs the module (make test: --dist loadgroup): the dists and the venv are
# built once, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dist")]

REPO = Path(__file__).resolve().parents[1]
MEMBERS = ("core", "trl_env_envs/guess")  # the light core and one env
PROCESSOR = "trl_env_processors/qwen"  # built too, installed by the last test only
IGNORED = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".*")
LIGHT = {"click", "pluggy", "rich", "pyyaml", "trl-env", "trl-env-guess"}


def run(*argv: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("timeout", 300)
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels and sdists of the members, built with the command `make dist` runs."""
    out = tmp_path_factory.mktemp("dist")
    sources = tmp_path_factory.mktemp("sources")
    for member in (*MEMBERS, PROCESSOR):
        # A copy: building writes *.egg-info next to the sources, and two test workers (or an
        # editable install) must not meet there.
        source = shutil.copytree(REPO / member, sources / member, ignore=IGNORED)
        built = run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def light(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the two wheels and their dependencies only; its bin folder."""
    root = tmp_path_factory.mktemp("light-venv")
    venv.create(root, with_pip=False)  # this venv's pip installs into it (pip --python)
    bin_dir = root / "bin"
    wheels = [wheel(dist, member) for member in MEMBERS]
    pip = run(
        sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "--quiet",
        "--disable-pip-version-check", "--find-links", dist, *wheels,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return bin_dir


def wheel(dist: Path, member: str) -> Path:
    project = tomllib.loads((REPO / member / "pyproject.toml").read_text())["project"]
    return dist / f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"


def in_light(bin_dir: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return run(*args, env={**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}, **kwargs)


def test_each_distribution_has_a_wheel_and_an_sdist_at_the_version_it_declares(dist):
    for member in MEMBERS:
        project = tomllib.loads((REPO / member / "pyproject.toml").read_text())["project"]
        stem = f"{project['name'].replace('-', '_')}-{project['version']}"
        assert (dist / f"{stem}.tar.gz").is_file() and (dist / f"{stem}-py3-none-any.whl").is_file()


def test_the_core_version_sorts_above_the_old_releases_on_the_index():
    from packaging.version import Version

    version = tomllib.loads((REPO / "core/pyproject.toml").read_text())["project"]["version"]
    assert Version(version) > Version("0.1.20")


def test_the_light_venv_holds_no_training_stack(light):
    listed = in_light(light, "python", "-m", "pip", "list", "--format=json")
    if listed.returncode != 0:  # a venv made without pip: ask this pip about it instead
        listed = run(sys.executable, "-m", "pip", "--python", light / "python", "list",
                     "--format=json")  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert names & {"torch", "transformers", "trl", "numpy"} == set()
    assert {n.lower() for n in LIGHT} <= names


def test_list_shows_the_env_and_the_backends_with_their_distributions(light):
    result = in_light(light, "trl-env", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(result.stdout)}
    assert rows[("env", "guess")]["distribution"] == "trl-env-guess"
    assert rows[("backend", "transformers")]["distribution"] == "trl-env"
    assert all(r["status"] == "ok" for r in rows.values())


def test_play_works(light):
    result = in_light(light, "trl-env", "play", "--env", "guess", "--no-system-prompt",
                      input="50\nquit\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "50 is too" in result.stdout and "stopped by you" in result.stdout


def test_new_makes_a_package(light, tmp_path):
    result = in_light(light, "trl-env", "new", "env", "maze", "--dir", str(tmp_path / "maze"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "maze" / "pyproject.toml").is_file()


def test_the_env_conformance_kit_runs(light):
    code = (
        "from trl_env.testing.envs import check_env\n"
        "from trl_env_guess import GuessEnv\n"
        "check_env(GuessEnv, episodes=5, examples=5)\n"
        "print('conformant')\n"
    )
    result = in_light(light, "python", "-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "conformant"


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--env", "guess", "--processor", "qwen3", "--max-steps", "1"],
        ["eval", "--env", "guess", "--processor", "qwen3", "--episodes", "1"],
        ["check", "--processor", "qwen3"],
    ],
)
def test_a_command_that_needs_the_training_stack_names_the_extra(light, args, tmp_path):
    result = in_light(light, "trl-env", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: `trl-env {args[0]}` needs the training stack")
    # torch first as a CPU build (pip would pick a CUDA one), as the README installs it
    from trl_env.cli.main import TORCH_CPU, TRAIN_EXTRA

    assert line.index(TORCH_CPU) < line.index(TRAIN_EXTRA)


def test_every_help_works(light):
    for args in (["--help"], *([c, "--help"] for c in ("list", "play", "new", "train", "eval"))):
        result = in_light(light, "trl-env", *args)
        assert result.returncode == 0 and "Usage:" in result.stdout, (args, result.stderr)


def test_view_and_compare_work_on_episode_records(light, tmp_path):
    from trl_env.episode import Episode

    records = tmp_path / "episodes.jsonl"
    rows = [Episode(seed=f"s{i}", reward=i / 4, turns=1).to_dict() for i in range(4)]
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    view = in_light(light, "trl-env", "view", str(records), "--out", str(tmp_path / "r.html"))
    assert view.returncode == 0, view.stderr
    assert (tmp_path / "r.html").stat().st_size > 1000
    compare = in_light(light, "trl-env", "compare", str(records), str(records))
    assert compare.returncode == 0, compare.stderr
    assert compare.stdout.strip()  # the table itself is test_compare's business


def test_a_processor_package_installs_on_the_light_core_too(light, dist):
    # It adds trl-env-qwen to the light venv, which changes nothing the other tests check.
    pip = run(
        sys.executable, "-m", "pip", "--python", light / "python", "install", "--quiet",
        "--disable-pip-version-check", "--no-index", "--find-links", dist, wheel(dist, PROCESSOR),
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    rows = json.loads(in_light(light, "trl-env", "list", "--json").stdout)
    declared = tomllib.loads((REPO / "trl_env_processors/qwen/pyproject.toml").read_text())
    names = set(declared["project"]["entry-points"]["trl_env.processors"])
    assert {r["name"] for r in rows if r["distribution"] == "trl-env-qwen"} == names
    code = "import sys, trl_env; trl_env.load_processor('qwen3'); print('torch' in sys.modules)"
    made = in_light(light, "python", "-c", code)
    assert made.returncode == 0 and made.stdout.strip() == "False", made.stderr[-2000:]
