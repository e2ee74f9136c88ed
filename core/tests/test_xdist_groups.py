"""``xdist_group`` marks keep their tests on one worker under ``--dist loadgroup`` (make test)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from trl_env.testing.timeouts import scaled

CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"
TESTS = """
import pytest

GROUP = pytest.mark.xdist_group("one")


@GROUP
@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    pass


@pytest.mark.parametrize("n", range(6))
def test_free(n):
    pass
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")  # the suite's own hooks, in a folder apart
    (tmp_path / "test_groups.py").write_text(TESTS, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "test_groups.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=scaled(300), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"\[(gw\d)\] .*PASSED test_groups\.py::(test_\w+)\[", proc.stdout)
    grouped = {worker for worker, name in ran if name == "test_grouped"}
    assert len(ran) == 12 and len(grouped) == 1, proc.stdout
