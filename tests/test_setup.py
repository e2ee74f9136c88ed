"""The set-up's choice of torch: a CPU build wherever no GPU answers, on every Python; a CUDA
build where one does; the user's choice over both (the Makefile's `torch-spec`)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trl_env.testing.timeouts import scaled

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def torch_spec(tmp_path: Path, gpu: bool | None, *assignments: str) -> tuple[str, str]:
    """What `make venv` would install: (build, pip arguments). ``gpu``: an nvidia-smi that
    lists a GPU (True) or fails as on a machine without one (False) is put first on PATH;
    None leaves this machine's own."""
    env = dict(os.environ)
    if gpu is not None:  # the one thing that cannot exist here: a GPU to answer
        stand_in = tmp_path / "bin"
        stand_in.mkdir(exist_ok=True)
        said = 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"' if gpu else "exit 9"
        (stand_in / "nvidia-smi").write_text(f"#!/bin/sh\n{said}\n")
        (stand_in / "nvidia-smi").chmod(0o755)
        env["PATH"] = f"{stand_in}{os.pathsep}{env['PATH']}"
    ran = subprocess.run(
        ["make", "-s", "torch-spec", *assignments],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    build, spec = ran.stdout.strip().split(" ", 1)
    return build, spec


def test_no_gpu_gets_a_cpu_torch_and_a_gpu_the_cuda_one(tmp_path):
    build, spec = torch_spec(tmp_path, gpu=False)
    assert build == "cpu"
    if (platform.system(), platform.machine()) == ("Linux", "x86_64"):
        # The package index's torch is the CUDA build here (2.7 GB of NVIDIA libraries on
        # Python 3.12, which the unpinned `torch==2.13.0` installed): only +cpu is the CPU one.
        assert spec == ("torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu")
    else:  # macOS, Linux aarch64: the package index's torch is the CPU build
        assert spec == "torch==2.13.0"
    assert torch_spec(tmp_path, gpu=True) == ("cuda", "torch==2.13.0")


def test_the_user_chooses_over_the_machine(tmp_path):
    assert torch_spec(tmp_path, True, "TORCH=cpu")[0] == "cpu"
    assert torch_spec(tmp_path, False, "TORCH=cuda") == ("cuda", "torch==2.13.0")
    mine = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    assert torch_spec(tmp_path, False, f"TORCH_SPEC={mine}")[1] == mine


@pytest.mark.skipif(
    not (Path(sys.prefix) / ".installed").is_file(), reason="a virtualenv make did not build"
)
def test_the_virtualenv_make_built_holds_the_torch_it_chose(tmp_path):
    """The suite's own .venv, made by `make venv` on this machine: CPU torch where no GPU."""
    import torch

    build, spec = torch_spec(tmp_path, gpu=None)
    assert torch.__version__.split("+")[0] == spec.split()[0].split("==")[1].split("+")[0]
    assert (torch.version.cuda is None) == (build == "cpu"), (torch.__version__, build)
