"""batch_rollout on the qwen3 processor and its tiny model: exact ids, masks and logprobs."""

from __future__ import annotations

import math
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_env import extras
from trl_env.backends.transformers import TransformersBackend
from trl_env.rollout import RolloutConfig, batch_rollout


def reference_logprobs(model, ep, temperature: float, top_k: int, top_p: float) -> list[float]:
    """Logprob of each completion token from one full forward pass, filtered independently."""
    ids = torch.tensor([ep.prompt_ids + ep.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0].float() / temperature
    out = []
    start = len(ep.prompt_ids)
    for j, token in enumerate(ep.completion_ids):
        row = logits[start + j - 1]
        order = torch.argsort(row, descending=True)
        keep = order if not top_k else order[:top_k]
        probs = torch.softmax(row[keep], -1)
        if top_p < 1.0:  # the fewest most likely ids whose mass reaches top_p
            mass = torch.cumsum(probs.double(), -1)
            keep = keep[: int(torch.searchsorted(mass, top_p)) + 1]
        logz = torch.logsumexp(row[keep], -1)
        out.append((row[token] - logz).item() if token in keep.tolist() else -math.inf)
    return out


# The rollout's tests that depend on how generation is batched run on both transformers engines.
ENGINES = ["transformers", "transformers-continuous"]


def runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each maximal run in a 0/1 mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 20, 1.0), (1.3, 0, 0.9)]
)
def test_logprobs_are_those_of_the_sampling_distribution(
    qwen3, scripted_env, temperature, top_k, top_p, engine
):
    episodes = qwen3.play(
        [f"lp-{i}" for i in range(5)],
        lambda: scripted_env(turns=4),
        backend=engine,
        max_new_tokens=10,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=1,
    )
    for ep in episodes:
        ref = reference_logprobs(qwen3.model, ep, temperature, top_k, top_p)
        for got, want, m in zip(ep.logprobs, ref, ep.env_mask, strict=True):
            if m:
                assert got == pytest.approx(want, abs=2e-4)
            else:
                assert got == 0.0


def test_inserted_segments_are_their_text_tokenized_alone(qwen3, scripted_env):
    tok, proc = qwen3.tokenizer, qwen3.processor
    wire_close = tok(extras.turn_close(proc, tok), add_special_tokens=False)["input_ids"]
    stop_ids = {tok.convert_tokens_to_ids(t) for t in extras.stop_tokens(proc, tok)}
    episodes = batch_rollout(
        [f"seg-{i}" for i in range(4)],
        env=lambda: scripted_env(turns=3),
        processor=proc,
        tokenizer=tok,
        model=qwen3.model,
        max_new_tokens=6,
        seed=2,
    )
    for ep in episodes:
        system, first = ep.messages[0]["content"], ep.messages[1]["content"]
        prompt_text = extras.first_prompt(proc, system, first)
        assert ep.prompt_ids == tok(prompt_text, add_special_tokens=False)["input_ids"]
        replies = [m["content"] for m in ep.messages[2:] if m["role"] == "user"]
        sampled = [(s, e) for v, s, e in runs(ep.env_mask) if v == 1]
        inserted = [(s, e) for v, s, e in runs(ep.env_mask) if v == 0]
        assert len(sampled) == ep.turns
        for k, (s, e) in enumerate(inserted):
            prev_sample = ep.completion_ids[sampled[k][0] : sampled[k][1]]
            expected = [] if prev_sample[-1] in stop_ids else list(wire_close)
            if k < ep.turns - 1:  # a reply follows every turn but the last
                text = extras.turn_separator(proc) + proc.append_user_input(replies[k])
                expected += tok(text, add_special_tokens=False)["input_ids"]
            assert ep.completion_ids[s:e] == expected
        assert ep.text == tok.decode(ep.prompt_ids + ep.completion_ids, skip_special_tokens=False)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    batch=st.integers(1, 4),
    turns=st.integers(1, 5),
    max_turns=st.integers(1, 6),
    max_new=st.integers(1, 20),
    extra_budget=st.integers(0, 160),
)
@pytest.mark.parametrize("engine", ENGINES)
def test_random_turn_structures_keep_every_invariant(
    qwen3, scripted_env, engine, data, batch, turns, max_turns, max_new, extra_budget
):
    tok, proc = qwen3.tokenizer, qwen3.processor
    seeds = data.draw(st.lists(st.text(min_size=1, max_size=12), min_size=batch, max_size=batch))
    prompt_len = max(
        len(
            tok(
                extras.first_prompt(proc, extras.DEFAULT_SYSTEM_PROMPT, scripted_env().reset(s)),
                add_special_tokens=False,
            )["input_ids"]
        )
        for s in seeds
    )
    budget = prompt_len + extra_budget
    stop_ids = {tok.convert_tokens_to_ids(t) for t in extras.stop_tokens(proc, tok)}
    episodes = batch_rollout(
        seeds,
        env=lambda: scripted_env(turns=turns),
        processor=proc,
        tokenizer=tok,
        model=qwen3.model,
        backend=engine,
        max_new_tokens=max_new,
        max_turns=max_turns,
        max_episode_tokens=budget,
        seed=3,
    )
    assert [ep.seed for ep in episodes] == seeds
    for ep in episodes:
        n = len(ep.completion_ids)
        assert len(ep.env_mask) == n == len(ep.logprobs)
        assert len(ep.prompt_ids) + n <= budget
        assert ep.turns <= max_turns
        assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.env_mask, strict=True) if not m)
        assert all(lp <= 0.0 for lp, m in zip(ep.logprobs, ep.env_mask, strict=True) if m)
        assert ep.status in {"done", "max_turns", "budget"}, ep.error
        assert ep.sampled_tokens <= ep.turns * max_new
        if ep.status == "done":
            assert ep.turns == turns
        if ep.status == "max_turns":
            assert ep.turns == max_turns < turns
        if n:  # every assistant turn is closed, by the model or by an inserted closer
            assert ep.completion_ids[-1] in stop_ids


@pytest.mark.parametrize("engine", ENGINES)
def test_faulty_envs_end_only_their_own_episode(qwen3, scripted_env, engine):
    envs = [
        scripted_env(turns=2),
        scripted_env(fault="raise", fault_turn=1),
        scripted_env(fault="garbage", fault_turn=2, turns=3),
        scripted_env(fault="hang", fault_turn=1),
        scripted_env(fault="reset-raise"),
        scripted_env(fault="bad-reward", fault_turn=2, turns=2),
        scripted_env(turns=2),
    ]
    episodes = qwen3.play(
        [f"fault-{i}" for i in range(len(envs))],
        envs,
        backend=engine,
        max_new_tokens=4,
        step_timeout=0.5,
        error_reward=-1.0,
    )
    status = [ep.status for ep in episodes]
    assert status == ["done", "error", "error", "timeout", "error", "error", "done"]
    assert "ValueError: step exploded" in episodes[1].error
    assert "ScriptedEnv returned int, not str" in episodes[2].error
    assert "step timeout" in episodes[3].error
    assert "reset exploded" in episodes[4].error and episodes[4].completion_ids == []
    assert "not a finite number" in episodes[5].error
    assert [ep.reward for ep in episodes] == [1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0]
    assert all(env.closed for i, env in enumerate(envs) if i != 3)


class ExplodingParser:
    """The qwen3 processor with a parser that fails on every output."""

    def __init__(self, inner):
        self.inner = inner
        self.stop_tokens, self.turn_close = inner.stop_tokens, inner.turn_close
        self.turn_separator = inner.turn_separator

    def init_system_input(self, prompt):
        return self.inner.init_system_input(prompt)

    def append_user_input(self, prompt):
        return self.inner.append_user_input(prompt)

    def parse_agent_output(self, completion):
        raise RuntimeError("cannot parse")


def test_a_failing_parser_is_that_episodes_error(qwen3, scripted_env):
    (ep,) = batch_rollout(
        ["p"],
        env=scripted_env,
        processor=ExplodingParser(qwen3.processor),
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=3,
    )
    assert ep.status == "error" and "cannot parse" in ep.error and ep.turns == 1


class RecordingBackend(TransformersBackend):
    """The transformers backend, noting which rows each turn generates for."""

    def __init__(self, model, pad):
        super().__init__(model, pad)
        self.calls: list[list[int]] = []

    def session(self, params):
        session = super().session(params)
        inner = session.generate

        def generate(turns, stop_ids):
            self.calls.append([t.row for t in turns])
            return inner(turns, stop_ids)

        session.generate = generate
        return session


def test_finished_episodes_leave_the_batch(qwen3, scripted_env):
    lengths = [1, 3, 2]
    backend = RecordingBackend(qwen3.model, qwen3.tokenizer.pad_token_id)
    envs = [scripted_env(turns=n) for n in lengths]
    episodes = batch_rollout(
        ["a", "b", "c"],
        env=envs,
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        backend=backend,
        max_new_tokens=3,
    )
    assert [ep.turns for ep in episodes] == lengths
    assert [len(rows) for rows in backend.calls] == [3, 2, 1]


def test_env_steps_run_concurrently(qwen3, scripted_env):
    busy = scripted_env.in_flight  # a hung env from another test may still be sleeping
    scripted_env.peak = busy
    qwen3.play(
        [str(i) for i in range(8)],
        lambda: scripted_env(turns=2, delay=0.05),
        max_new_tokens=2,
    )
    assert scripted_env.peak - busy == 8


@pytest.mark.parametrize("engine", ENGINES)
def test_same_seed_same_episodes(qwen3, scripted_env, engine):
    def play():
        return qwen3.play(
            ["x", "y"],
            scripted_env,
            backend=engine,
            max_new_tokens=5,
            seed=7,
        )

    assert [e.completion_ids for e in play()] == [e.completion_ids for e in play()]


def test_budget_smaller_than_prompt_is_reported(qwen3, scripted_env):
    (ep,) = qwen3.play(
        ["b"],
        scripted_env,
        max_episode_tokens=10,
    )
    assert ep.status == "budget" and "first prompt" in ep.error and ep.completion_ids == []


@pytest.mark.parametrize("bad", [{"max_new_tokens": 0}, {"top_p": 0}, {"temperature": -1}])
def test_bad_options_are_one_sentence(bad):
    from trl_env.errors import UsageError

    with pytest.raises(UsageError, match="Invalid rollout option"):
        RolloutConfig(**bad).validate()


class RowServer:
    """A stand-in for a server that batches by itself: each row's request answers on its own
    thread after ``delay(row)`` seconds (the engine's path for a session with ``submit``)."""

    def __init__(self, ids, delay, fail_row=None):
        from concurrent.futures import ThreadPoolExecutor

        self.ids, self.delay, self.fail_row = ids, delay, fail_row
        self.pool = ThreadPoolExecutor(16)
        self.batch_calls = 0

    def session(self, params):
        return self

    def sample(self, turn, stop_ids):
        from trl_env.backends import Sample

        time.sleep(self.delay(turn.row))
        if turn.row == self.fail_row:
            raise ConnectionError("the server dropped the connection")
        ids = [*self.ids, min(stop_ids)][: turn.max_new_tokens]
        return Sample(ids=ids, logprobs=[-0.5] * len(ids), stopped=ids[-1] in stop_ids)

    def submit(self, turn, stop_ids):
        return self.pool.submit(self.sample, turn, stop_ids)

    def generate(self, turns, stop_ids):  # not used when submit is there
        self.batch_calls += 1
        return [self.sample(t, stop_ids) for t in turns]

    def release(self, rows):
        pass

    def close(self):
        pass


def test_a_row_whose_request_returns_goes_on_without_waiting_for_the_others(qwen3, scripted_env):
    slow = 1.5
    server = RowServer(
        qwen3.tokenizer.encode("5", add_special_tokens=False), lambda row: slow * (row == 0)
    )
    ended = {}
    start = time.monotonic()
    episodes = qwen3.play(
        [f"r{i}" for i in range(4)],
        lambda: scripted_env(turns=3),
        backend=server,
        max_new_tokens=4,
        on_episode=lambda ep: ended.setdefault(ep.seed, time.monotonic() - start),
    )
    assert server.batch_calls == 0
    assert [ep.status.value for ep in episodes] == ["done"] * 4
    # three turns each: the fast episodes are over before the slow row's first answer is back
    assert max(ended[f"r{i}"] for i in (1, 2, 3)) < slow <= 3 * slow <= ended["r0"]
    for ep in episodes:
        assert ep.turns == 3
        kept = [lp for lp, m in zip(ep.logprobs, ep.env_mask, strict=True) if m]
        assert kept and all(lp == -0.5 for lp in kept)


def test_a_row_whose_request_fails_ends_alone(qwen3, scripted_env):
    server = RowServer(qwen3.tokenizer.encode("5", add_special_tokens=False), lambda row: 0.0, 2)
    episodes = qwen3.play(
        [f"f{i}" for i in range(4)], lambda: scripted_env(turns=2), backend=server, max_new_tokens=4
    )
    statuses = [ep.status.value for ep in episodes]
    assert statuses[:2] + statuses[3:] == ["done"] * 3
    assert episodes[2].status.failed and "dropped the connection" in episodes[2].error


def test_an_episode_whose_env_is_slow_is_not_waited_for():
    """The call-based engine gathers ready episodes while env calls run, for the grace; an
    episode whose recent env calls took far longer than a typical episode's holds no batch
    back, while envs that are all slow alike are still gathered."""
    from collections import deque

    from trl_env.rollout import _Scheduler

    scheduler = object.__new__(_Scheduler)
    scheduler.submit, scheduler.waits = None, None
    scheduler.env_seconds = deque([0.001] * 10)  # typical calls: a millisecond
    scheduler.row_seconds = {0: deque([0.001, 1.0])}  # row 0's env took a second
    scheduler.row_seconds.update({row: deque([0.001, 0.002]) for row in range(1, 8)})
    now = time.monotonic()
    scheduler.on_env = {0: now}  # only the slow env's episode is out: go on
    assert scheduler._ready_to_generate()
    scheduler.on_env = {0: now, 1: now}  # a typical one too: wait for it, the grace at most
    assert not scheduler._ready_to_generate()
    assert scheduler._grace_end() == pytest.approx(now + _Scheduler.MIN_GRACE)
    scheduler.on_env = {0: now, 9: now}  # an episode with no call yet counts as typical
    assert not scheduler._ready_to_generate()
    # every env takes 60 ms a step (its alive check a millisecond): none is slow, all gathered
    scheduler.row_seconds = {row: deque([0.06, 0.001]) for row in range(8)}
    scheduler.env_seconds = deque([0.06, 0.001] * 8)
    scheduler.waits = None  # as when an env call returns
    scheduler.on_env = {0: now}
    assert not scheduler._ready_to_generate()
