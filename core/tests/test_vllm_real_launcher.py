"""The real-vLLM launcher's failure paths, without vLLM: a Python that has no vllm."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from trl_env.testing import vllm_real


@pytest.fixture(autouse=True)
def temp_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary files of the test in its own folder, so what is left there is its own."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def test_a_server_that_exits_while_starting_is_reported_with_its_log(
    tmp_path: Path, temp_here: Path
) -> None:
    with pytest.raises(RuntimeError, match=r"exited with status 1 while starting") as info:
        # This environment has no vllm: the server's own Python error ends up in the message.
        vllm_real.start(str(tmp_path), python=sys.executable, start_timeout=300)
    assert "No module named" in str(info.value) and "vllm" in str(info.value)
    assert not list(temp_here.iterdir())  # its temporary log is gone


def test_a_missing_python_leaves_nothing_behind(tmp_path: Path, temp_here: Path) -> None:
    with pytest.raises(FileNotFoundError):
        vllm_real.start(str(tmp_path), python=str(tmp_path / "no-python"))
    assert not list(temp_here.iterdir())


def test_the_python_named_in_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(vllm_real.ENV_VAR, "/opt/elsewhere/bin/python")
    assert vllm_real.vllm_python() == "/opt/elsewhere/bin/python"
