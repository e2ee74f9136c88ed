"""Engines are not trusted: ids out of the vocabulary and impossible logprobs end only their
episode with one sentence, and a vLLM server that answers slowly or at length is cut off.

The misbehaving server is the stand-in on 127.0.0.1 (trl_env.testing.vllm_server), switched
between faults through its ``POST /faults``; one process serves the whole test session
(conftest's ``stand_in_server``), set back to no fault after each test.
"""

from __future__ import annotations

import threading
import time

import pytest

from trl_env.backends import BackendContext, SamplingParams
from trl_env.backends.base import Sample, check_sample
from trl_env.backends.transformers import TransformersBackend
from trl_env.backends.vllm import make_backend
from trl_env.backends.vllm_server import ServerError, VLLMServerClient
from trl_env.testing.timeouts import scaled
from trl_env.testing.vllm_server import CORRUPTIONS

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("vllm_server")]


@pytest.fixture
def server(stand_in_server):
    return stand_in_server


@pytest.fixture
def faulty(server):
    yield server
    server.faults(corrupt="", drip=0.0, pad_bytes=0, no_length=False)


def rollout(stack, env, backend, seeds):
    from trl_env.rollout import batch_rollout

    return batch_rollout(
        seeds,
        env=lambda: env(turns=2),
        processor=stack.processor,
        tokenizer=stack.tokenizer,
        backend=backend,
        max_new_tokens=4,
        seed=0,
    )


EXPECTED = {
    "past-vocab": "outside the model's vocabulary of 1036 ids",
    "negative": "token id -1, outside the model's vocabulary",
    "inf-logprob": "the logprob inf for token id",
    "positive-logprob": "the logprob 0.5 for token id",
    "nan-logprob": "the logprob nan for token id",
}


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
def test_a_vllm_server_s_bad_tokens_end_the_episode_in_one_sentence(
    faulty, qwen3, scripted_env, corrupt
):
    """Nothing the server got wrong reaches an episode's tokens; each episode says why."""
    assert qwen3.model.config.vocab_size == 1036  # the bound the expected sentence names
    faulty.faults(corrupt=corrupt)
    context = BackendContext(
        tokenizer=qwen3.tokenizer, options={"vllm_server_base_url": faulty.url}
    )
    episodes = rollout(qwen3, scripted_env, make_backend(context), ["a", "b"])
    assert [e.status for e in episodes] == ["error", "error"]
    for e in episodes:
        assert EXPECTED[corrupt] in e.error and e.error.count(". ") == 0
        assert all(0 <= t < 1036 for t in e.completion_ids)
        assert all(lp <= 0.0 for lp in e.logprobs)


class _Corrupting:
    """The real transformers session, with row 0's first sampled id pushed past the vocabulary
    (a mock of an engine bug: the real model cannot sample such an id)."""

    def __init__(self, session) -> None:
        self.session = session
        self.vocab_size = session.vocab_size

    def generate(self, turns, stop_ids):
        samples = self.session.generate(turns, stop_ids)
        for turn, sample in zip(turns, samples, strict=True):
            if turn.row == 0 and sample.ids:
                sample.ids[0] = self.vocab_size
        return samples

    def release(self, rows):
        self.session.release(rows)

    def close(self):
        self.session.close()


class _CorruptingBackend:
    def __init__(self, model) -> None:
        self.inner = TransformersBackend(model)

    def session(self, params: SamplingParams):
        return _Corrupting(self.inner.session(params))


def test_a_bad_id_from_any_engine_ends_only_its_own_episode(qwen3, scripted_env):
    episodes = rollout(qwen3, scripted_env, _CorruptingBackend(qwen3.model), ["a", "b", "c"])
    assert episodes[0].status == "error"
    assert "token id 1036, outside the model's vocabulary of 1036 ids" in episodes[0].error
    assert [e.status for e in episodes[1:]] == ["done", "done"]
    assert all(e.turns == 2 for e in episodes[1:])


def test_check_sample_refuses_ids_and_logprobs_that_do_not_line_up():
    assert "2 token ids with 1 logprobs" in check_sample(Sample([1, 2], [-0.5]), 10).error
    assert check_sample(Sample([9], [0.0]), 10).error == ""  # a certain token: logprob 0


def _complete(client: VLLMServerClient, qwen3) -> None:
    client.complete(
        [1, 2, 3],
        model=qwen3.path,
        max_tokens=8,
        stop_ids=frozenset(),
        params=SamplingParams(seed=0),
    )


def _within(seconds: float, job) -> BaseException | None:
    """Run ``job`` in a thread; the exception it raised, failing if it is still running later."""
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            job()
            box.append(None)
        except BaseException as exc:
            box.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert box, f"the request still ran after {seconds:g} s"
    return box[0]


def test_a_server_that_drips_its_answer_is_cut_off_at_the_request_deadline(faulty, qwen3):
    """A byte every 0.2 s never trips a per-read timeout; the whole request has 1.5 s."""
    faulty.faults(drip=0.2)
    client = VLLMServerClient(faulty.url, timeout=1.5)
    start = time.monotonic()
    error = _within(scaled(15.0), lambda: _complete(client, qwen3))
    assert isinstance(error, ServerError)
    assert (
        str(error)
        == f"The vLLM server at {faulty.url} did not answer /v1/completions within 1.5 s."
    )
    assert time.monotonic() - start < 1.5 + scaled(5.0)


@pytest.mark.parametrize("no_length", [False, True])
def test_an_answer_over_the_size_cap_is_refused_unread(faulty, qwen3, no_length):
    """Declared (Content-Length) or not (read until the connection closes): refused once past
    the cap, without reading the rest."""
    faulty.faults(pad_bytes=2_000_000, no_length=no_length)
    client = VLLMServerClient(faulty.url, timeout=scaled(60.0), max_response_bytes=100_000)
    error = _within(scaled(60.0), lambda: _complete(client, qwen3))
    assert isinstance(error, ServerError)
    assert "more than 100000 bytes" in str(error)
    faulty.faults(pad_bytes=50_000)  # under the cap: trailing spaces are still valid JSON
    _complete(client, qwen3)


def test_closing_a_session_cuts_off_its_requests_at_once(faulty, qwen3):
    """A batch that ends (interrupted, or a worker stopping) does not wait out a dripping server."""
    from trl_env.backends.vllm_server import VLLMServerBackend
    from trl_env.testing.stacks import turns

    backend = VLLMServerBackend.connect(faulty.url, timeout=scaled(120.0))
    faulty.faults(drip=0.2)  # after connecting: its three small answers dripped took 45 s
    session = backend.session(SamplingParams(seed=0))
    box: list = []
    worker = threading.Thread(
        target=lambda: box.append(
            session.generate(turns([0, 1], [[1, 2], [3]], [8, 8]), frozenset())
        )
    )
    worker.start()
    time.sleep(scaled(1.0))  # both requests are being answered, a byte at a time
    start = time.monotonic()
    session.close()
    worker.join(scaled(10.0))
    assert not worker.is_alive() and time.monotonic() - start < scaled(5.0)
    assert [s.error for s in box[0]] == [
        f"The request to the vLLM server at {faulty.url} was cancelled."
    ] * 2


@pytest.mark.parametrize("corrupt", ["negative", "past-vocab"])
def test_eval_through_a_server_answering_bad_ids_keeps_every_record(faulty, tmp_path, corrupt):
    """``trl-env eval --backend vllm``: each episode is recorded as an error saying why, and the
    command ends normally (a negative id once ended it with status 1 and no record)."""
    import json

    from click.testing import CliRunner

    from trl_env.cli import cli

    faulty.faults(corrupt=corrupt)
    out = tmp_path / "eval.jsonl"
    args = ["eval", "--env", "guess", "--processor", "qwen3", "--max-new-tokens", "4"]
    args += ["--episodes", "3", "--backend", "vllm", "--vllm-server-base-url", faulty.url]
    result = CliRunner().invoke(cli, [*args, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3 and all(r["status"] == "error" for r in records)
    assert all(EXPECTED[corrupt] in r["error"] for r in records)
