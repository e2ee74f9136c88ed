"""Records read as the model wrote: each piece decoded in context, the whole text decoded once."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_env.episode import decode_after, segment_texts
from trl_env.wire import decode

FAMILIES = ["qwen2.5", "qwen3", "llama3.1", "llama3.2", "gemma2", "gemma3", "phi3", "phi3.5"]


class EchoEnv:
    """Two turns; the reply quotes the action, so the env's view of it shows in the record."""

    def __init__(self) -> None:
        self.n, self.reward, self.alive = 0, 0.0, True
        self.actions: list[str] = []

    def reset(self, seed: str) -> str:
        return f"Say something, {seed}."

    def step(self, action: str) -> str:
        self.n += 1
        self.actions.append(action)
        self.alive = self.n < 2
        return f"You said {action!r}."


@pytest.mark.parametrize("family", FAMILIES)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_pieces_decoded_in_context_join_to_the_whole_text(stack_of, family, data):
    tokenizer = stack_of(family).tokenizer
    size = len(tokenizer)
    pieces = data.draw(
        st.lists(st.lists(st.integers(0, size - 1), min_size=1, max_size=6), max_size=6)
    )
    whole = [i for p in pieces for i in p]
    assert "".join(segment_texts(tokenizer, pieces)) == decode(tokenizer, whole)


@pytest.mark.parametrize("family", ["phi3", "phi3.5"])
def test_a_turn_keeps_its_leading_space(stack_of, family):
    """SentencePiece decoding drops the space of a sequence's first word ("▁Hello"); after the
    generation header it is there, as the model wrote it."""
    tokenizer = stack_of(family).tokenizer
    header = tokenizer("<|assistant|>\n", add_special_tokens=False)["input_ids"]
    word = tokenizer.convert_tokens_to_ids(
        next(
            t for t in tokenizer.get_vocab() if t.startswith("▁") and len(t) > 2 and t[1:].isalpha()
        )
    )
    alone = decode(tokenizer, [word])
    assert decode_after(tokenizer, header, [word]) == " " + alone
    assert decode(tokenizer, [*header, word]).endswith(" " + alone)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_episode_text_is_the_decoded_sequence_and_the_env_gets_the_turn_as_written(
    stack_of, family
):
    stack = stack_of(family)
    envs: list[EchoEnv] = []

    def make() -> EchoEnv:
        envs.append(EchoEnv())
        return envs[-1]

    episodes = stack.play(
        ["s0", "s1", "s2"],
        make,
        max_new_tokens=8,
        seed=3,
    )
    for ep in episodes:
        assert ep.text == decode(stack.tokenizer, ep.prompt_ids + ep.completion_ids)
        assert "".join(text for text, _ in ep.segments) == ep.text
        turns = [text for text, who in ep.segments if who == "model"]
        actions = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        parsed = [stack.processor.parse_agent_output(t)[1] for t in turns]
        assert parsed == actions, family
    received = sorted(a for env in envs for a in env.actions)
    assert received == sorted(
        a
        for ep in episodes
        for m in ep.messages
        if m["role"] == "assistant"
        for a in [m["content"]]
    )


@pytest.mark.parametrize("family", [*FAMILIES, "smollm2", "gpt-oss"])
def test_drift_counters_through_the_pipeline_are_the_wrapper_s(stack_of, family, monkeypatch):
    """Text, segments and both counters are the same whether the tokenizer's own pipeline or its
    transformers wrapper encodes and decodes (random pieces, inserted or sampled, specials in)."""
    from trl_env import episode, wire

    tokenizer = stack_of(family).tokenizer
    size = 1 + max(tokenizer.get_vocab().values())
    special = sorted(tokenizer.added_tokens_decoder)
    ids = st.lists(st.integers(0, size - 1) | st.sampled_from(special), min_size=1, max_size=8)
    conversation = st.lists(st.tuples(ids, st.booleans()), max_size=6)  # (ids, inserted?)

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(episodes=st.lists(conversation, min_size=1, max_size=3))
    def check(episodes):
        assert wire.fast_tokenizer(tokenizer, wire.control_tokens(tokenizer)) is not None
        fast = episode.drift_counters_many(tokenizer, episodes)
        with monkeypatch.context() as m:
            m.setattr(episode, "fast_tokenizer", lambda *a: None)
            m.setattr(wire, "fast_decoder", lambda *a: None)
            assert episode.drift_counters_many(tokenizer, episodes) == fast

    check()
