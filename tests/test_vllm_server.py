"""The vllm backend in server mode, over real HTTP on 127.0.0.1.

The server is ``python -m trl_env.testing.vllm_server`` in a real subprocess: it speaks the
vLLM OpenAI-compatible protocol ``trl vllm-serve`` runs, backed by the tiny qwen3 model (vLLM
itself needs a GPU; ``test_vllm_real.py`` drives a real one where there is one). Everything on
the client side is the real code: ``make_backend``, the HTTP client, the session.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from trl_env.backends.base import BackendContext, SamplingParams
from trl_env.backends.sampling import processed_logprobs
from trl_env.backends.vllm import make_backend
from trl_env.backends.vllm_server import VLLMServerClient, completion_request
from trl_env.errors import UsageError
from trl_env.testing.stacks import turns
from trl_env.testing.timeouts import scaled
from trl_env.testing.vllm_server import running

# One xdist worker runs the module (make test: --dist loadgroup), so one stand-in server
# loads the model, not one per worker.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("vllm_server")]

PARAMS = SamplingParams(temperature=0.7, top_k=20, min_p=0.02, repetition_penalty=1.2, seed=3)


@pytest.fixture
def server(stand_in_server):
    return stand_in_server


def backend(url: str, **options):
    return make_backend(BackendContext(options={"vllm_server_base_url": url, **options}))


def words(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def recompute(model, ids: list[int], sampled: list[bool], params: SamplingParams) -> list[float]:
    """The processed logprob of every sampled id, from one forward pass over the whole row."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    out = []
    for pos in [p for p, s in enumerate(sampled) if s]:
        seen = torch.zeros(1, logits.shape[-1], dtype=torch.bool)
        seen[0, ids[:pos]] = True  # the repetition penalty covers everything before the token
        out.append(float(processed_logprobs(logits[pos - 1 : pos], params, seen)[0, ids[pos]]))
    return out


def test_ids_and_logprobs_round_trip_exactly(server, qwen3):
    """Three rows, two turns: every sampled logprob equals a whole-row recomputation."""
    tok = qwen3.tokenizer
    session = backend(server.url).session(PARAMS)
    rows = [0, 1, 2]
    seqs: dict[int, list[int]] = {r: [] for r in rows}
    sampled: dict[int, list[bool]] = {r: [] for r in rows}
    logprobs: dict[int, list[float]] = {r: [] for r in rows}
    inserts = [[words(tok, f"Row {r} starts with some words.") for r in rows]]
    inserts.append([words(tok, f"The env answers row {r}.") for r in rows])
    for new in inserts:
        samples = session.generate(turns(rows, new, [6, 6, 6]), frozenset())
        for r, ids, s in zip(rows, new, samples, strict=True):
            assert not s.error and len(s.ids) == 6 and not s.stopped
            seqs[r] += ids + s.ids
            sampled[r] += [False] * len(ids) + [True] * len(s.ids)
            logprobs[r] += s.logprobs
    session.close()
    for r in rows:
        expected = recompute(qwen3.model, seqs[r], sampled[r], PARAMS)
        # The stand-in server scores rows batched in one forward pass; its fp32 sums differ from a
        # one-row recomputation by a few 1e-4 on a loaded machine (not a convention error: ~1 nat).
        assert logprobs[r] == pytest.approx(expected, abs=1e-3)


def test_the_request_is_trl_s_and_its_answer_parses_as_trl_parses_it(server, qwen3):
    """The body has every field TRL's VLLMClient.generate sends, and TRL reads the same answer."""
    from trl.generation.vllm_client import parse_logprobs

    client = VLLMServerClient(server.url)
    body = completion_request([5, 6, 7], client.models()[0], 4, frozenset({9}), PARAMS, 11)
    trl_fields = {"model", "prompt", "n", "repetition_penalty", "temperature", "top_p", "top_k"}
    trl_fields |= {"min_p", "max_tokens", "logprobs", "return_token_ids"}
    assert trl_fields | {"return_tokens_as_token_ids", "seed", "stop_token_ids"} <= body.keys()
    raw = client._json("POST", "/v1/completions", body)
    done = client.complete(
        [5, 6, 7],
        model=body["model"],
        max_tokens=4,
        stop_ids=frozenset({9}),
        params=PARAMS,
        seed=11,
    )
    theirs, their_ids = parse_logprobs([raw["choices"][0]["logprobs"]])
    assert done.ids == raw["choices"][0]["token_ids"] == [ids[0] for ids in their_ids[0]]
    assert done.logprobs == [lps[0] for lps in theirs[0]]


def test_seeded_runs_repeat_and_rows_with_one_prompt_differ(server, qwen3):
    prompt = words(qwen3.tokenizer, "The same prompt for a whole GRPO group.")

    def run() -> list[list[int]]:
        session = backend(server.url).session(SamplingParams(seed=7))
        samples = session.generate(turns([0, 1, 2, 3], [prompt] * 4, [8] * 4), frozenset())
        return [s.ids for s in samples]

    first = run()
    assert run() == first
    assert len({tuple(ids) for ids in first}) > 1


def test_a_turn_ends_at_the_first_stop_id_and_at_the_limit(server, qwen3):
    vocab = qwen3.model.config.vocab_size
    stops = frozenset(range(0, vocab, 3))  # a third of the vocabulary: a stop comes early
    session = backend(server.url).session(SamplingParams(seed=1))
    prompts = [words(qwen3.tokenizer, f"Stop soon, row {r}.") for r in range(6)]
    samples = session.generate(turns(list(range(6)), prompts, [40] * 5 + [1]), stops)
    for s in samples[:5]:
        assert s.stopped and s.ids[-1] in stops and not stops & set(s.ids[:-1])
        assert len(s.logprobs) == len(s.ids) <= 40
    assert len(samples[5].ids) == 1  # the limit


def test_rows_come_and_go_and_keep_their_history_until_released(server, qwen3):
    tok = qwen3.tokenizer
    session = backend(server.url).session(SamplingParams(seed=2))
    a, b = words(tok, "First row."), words(tok, "Second row.")
    first = session.generate(turns([0, 1], [a, b], [3, 3]), frozenset())
    session.generate(turns([1], [words(tok, " more")], [3]), frozenset())  # row 0 waits
    assert session.history[0] == a + first[0].ids
    late = session.generate(turns([0, 5], [words(tok, " back"), a], [3, 3]), frozenset())  # 5 joins
    assert session.history[0] == a + first[0].ids + words(tok, " back") + late[0].ids
    session.release([0])
    assert 0 not in session.history and session.history[5] == a + late[1].ids
    (again,) = session.generate(turns([0], [a], [3]), frozenset())  # a row id used again: new seeds
    assert session.history[0] == a + again.ids and again.ids != first[0].ids
    session.close()


def test_a_session_s_turns_reuse_its_connections(server, qwen3):
    """Each row's next turn goes out on a kept connection, not a new one per request."""
    session = backend(server.url).session(SamplingParams(seed=4))
    before = server.stats()
    prompts = [words(qwen3.tokenizer, f"Row {r}.") for r in range(4)]
    session.generate(turns(list(range(4)), prompts, [2] * 4), frozenset())
    for _ in range(3):
        session.generate(turns(list(range(4)), [[11]] * 4, [2] * 4), frozenset())
    session.close()
    after = server.stats()
    assert after["completions"] - before["completions"] == 16
    assert after["connections"] - before["connections"] <= 4 + 1  # the rows at once (+ /stats)


def test_a_kept_connection_the_server_closed_is_replaced(server, qwen3):
    """A server that closes idle connections (vLLM's closes one idle for 5 s): the request sent
    on a connection it just closed goes out again on a new one, and nothing is lost."""
    session = backend(server.url).session(SamplingParams(seed=5))
    server.faults(idle_close=0.1)
    try:
        prompt = words(qwen3.tokenizer, "Row.")
        (first,) = session.generate(turns([0], [prompt], [2]), frozenset())
        time.sleep(0.5)  # the server closes the kept connection meanwhile
        (second,) = session.generate(turns([0], [[11]], [2]), frozenset())
    finally:
        server.faults(idle_close=0.0)
        session.close()
    assert not first.error and not second.error and len(second.ids) == 2
    assert session.history == {}  # closed; the row's history had both turns until then


@pytest.mark.slow
def test_all_rows_are_in_flight_at_once_on_a_slow_server(qwen3):
    """A server that holds each request a while: all 8 rows' requests are held at once.

    The hold is scaled by load: on a busy machine sending 8 requests once took longer than a
    fixed 1 s hold, and the server saw only 7 at a time.
    """
    with running(qwen3.path, "--delay", f"{scaled(2.0):.2f}") as srv:
        session = backend(srv.url).session(SamplingParams(seed=0))
        prompts = [words(qwen3.tokenizer, f"Row {r}.") for r in range(8)]
        samples = session.generate(turns(list(range(8)), prompts, [2] * 8), frozenset())
        assert all(not s.error and len(s.ids) == 2 for s in samples)
        assert srv.stats()["peak"] == 8
        # Past the client's timeout, each row says so and nothing raises.
        hasty = backend(srv.url, vllm_server_timeout=0.3).session(SamplingParams())
        late = hasty.generate(turns([0, 1], prompts[:2], [2, 2]), frozenset())
        assert all(s.error.endswith("within 0.3 s.") and not s.ids for s in late)


@pytest.mark.slow
def test_a_server_that_goes_away_ends_only_the_rows_it_was_serving(qwen3):
    tok = qwen3.tokenizer
    with running(qwen3.path, "--die-after", "3", "--delay", "0.2") as srv:
        session = backend(srv.url).session(SamplingParams(seed=0))
        prompts = [words(tok, f"Row {r}.") for r in range(3)]
        ok = session.generate(turns([0, 1, 2], prompts, [3] * 3), frozenset())
        assert all(not s.error and len(s.ids) == 3 for s in ok)
        # The 4th request kills the server while the other two are in flight or on their way.
        gone = session.generate(turns([0, 1, 2], [words(tok, " go on")] * 3, [3] * 3), frozenset())
        assert srv.process.wait(10) == 3
    for s in gone:
        assert s.error and not s.ids and srv.url in s.error
        assert s.error.count(". ") == 0 and s.error.endswith(".")  # one sentence
    # A later call on the dead server: every row is refused, one sentence each.
    again = session.generate(turns([0], [words(tok, " again")], [3]), frozenset())
    assert again[0].error == f"Nothing accepts connections at {srv.url}."
    sent = prompts[0] + ok[0].ids + words(tok, " go on") + words(tok, " again")
    assert session.history[0] == sent  # a failed row keeps what it was sent until released


@pytest.mark.slow
def test_malformed_json_and_http_errors_fail_their_row_only(qwen3):
    with running(qwen3.path, "--malformed-every", "2", "--max-model-len", "24") as srv:
        session = backend(srv.url).session(SamplingParams(seed=0))
        # request 1: too long for the server, which answers HTTP 400 with its reason
        (refused,) = session.generate(turns([9], [list(range(5, 25))], [8]), frozenset())
        # requests 2 to 5: every second one is answered with broken JSON
        prompts = [words(qwen3.tokenizer, f"Row {r}.") for r in range(4)]
        samples = session.generate(turns(list(range(4)), prompts, [2] * 4), frozenset())
    assert "HTTP 400" in refused.error and "maximum context length is 24" in refused.error
    bad = [s for s in samples if s.error]
    assert len(bad) == 2 and all("malformed JSON" in s.error and not s.ids for s in bad)
    assert all(len(s.ids) == 2 and len(s.logprobs) == 2 for s in samples if not s.error)


def test_make_backend_refuses_a_server_that_is_not_there():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(UsageError) as err:
        backend(url)
    assert str(err.value) == (
        f"Nothing accepts connections at {url}; start a server there with `trl vllm-serve "
        "--model MODEL` (or `vllm serve`), or point --vllm-server-base-url at one."
    )
    with pytest.raises(UsageError, match="is not an http:// or https:// URL"):
        backend("127.0.0.1:8000")
    with pytest.raises(UsageError, match="needs a server"):
        make_backend(BackendContext())


def test_the_client_imports_no_torch():
    code = (
        "import sys, trl_env.backends.vllm, trl_env.backends.vllm_server\n"
        "heavy = [m for m in ('torch', 'transformers', 'trl') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_trainer_in_server_mode_is_served_over_http_by_each_process(server):
    """With ``vllm_mode="server"`` requests go to the trainer's server directly, not through
    ``VLLMGeneration.generate`` (whose cross-process gather would need every rank in step)."""
    from types import SimpleNamespace

    from trl_env.backends.vllm_server import VLLMServerBackend

    host, port = server.url.removeprefix("http://").split(":")
    generation = SimpleNamespace(
        mode="server", server_base_url=None, server_host=host, server_port=int(port)
    )
    trainer = SimpleNamespace(vllm_generation=generation)
    built = make_backend(BackendContext(trainer=trainer))
    assert isinstance(built, VLLMServerBackend) and built.client.base_url == server.url
    (s,) = built.session(SamplingParams(seed=1)).generate(turns([0], [[5, 6]], [2]), frozenset())
    assert not s.error and len(s.ids) == 2


@pytest.mark.slow
def test_a_rollout_through_a_failing_server_ends_those_episodes_in_error_and_loses_none(
    qwen3, scripted_env
):
    """Through the engine: the episode whose answer is broken ends with status ``error`` and
    its record; the others finish; then the server dies and every episode still gets a record."""
    from trl_env.rollout import batch_rollout

    def play(url: str, seeds: list[str]) -> tuple[list, list]:
        recorded: list = []
        episodes = batch_rollout(
            seeds,
            env=lambda: scripted_env(turns=3),
            processor=qwen3.processor,
            tokenizer=qwen3.tokenizer,
            backend=backend(url),
            max_new_tokens=4,
            seed=0,
            on_episode=recorded.append,
        )
        return episodes, recorded

    # Every 5th answer is broken, and the 17th request kills the server: the first rollout
    # (at most 12 requests) meets broken answers only; the second meets both.
    with running(qwen3.path, "--malformed-every", "5", "--die-after", "16") as srv:
        episodes, recorded = play(srv.url, [f"m{i}" for i in range(4)])
        assert sorted(e.seed for e in recorded) == sorted(e.seed for e in episodes)
        failed = [e for e in episodes if e.status == "error"]
        assert 1 <= len(failed) <= 2 and all("malformed JSON" in e.error for e in failed)
        assert all(e.status == "done" and e.turns == 3 for e in episodes if e not in failed)
        # The server dies during the second turn: no episode can finish, none is lost.
        episodes, recorded = play(srv.url, [f"d{i}" for i in range(4)])
        assert srv.process.wait(10) == 3
    assert len(recorded) == 4 and all(e.status == "error" for e in episodes)
    assert all(srv.url in e.error for e in episodes)


@pytest.mark.slow
def test_a_server_reporting_raw_logprobs_is_refused(qwen3):
    """A plain ``vllm serve`` reports the model's own logprobs, not the ones sampled from."""
    with running(qwen3.path, "--logprobs-mode", "raw_logprobs") as srv:
        with pytest.raises(UsageError) as err:
            backend(srv.url)
        assert VLLMServerClient(srv.url).logprobs_mode() == "raw_logprobs"
    assert str(err.value).startswith(f"The vLLM server at {srv.url} reports raw_logprobs")
    assert "--logprobs-mode processed_logprobs" in str(err.value)


def test_the_stand_in_server_says_in_one_line_why_it_cannot_start(tmp_path):
    failed = r"did not start: Error: Could not load a tokenizer"
    with pytest.raises(RuntimeError, match=failed), running(str(tmp_path / "no-model-here")):
        pass
