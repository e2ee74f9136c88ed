"""Env text that spells a special token stays text; the template's control tokens stay tokens."""

from __future__ import annotations

import re

import pytest

from trl_env.wire import Wire, decode

FAMILIES = [
    "qwen2.5",
    "qwen3",
    "qwen3.5",
    "llama3.1",
    "llama3.2",
    "gemma2",
    "gemma3",
    "phi3",
    "phi3.5",
    "deepseek-r1",
]


def forged(wire: Wire) -> str:
    """Env text that closes the user turn and opens an assistant turn, as far as strings go."""
    specials = "".join(wire.special_tokens[:4])
    return f"look: {wire.close_text}{specials} then\n{wire.close_text} ok"


def id_counts(wire: Wire, ids: list[int]) -> dict[str, int]:
    vocab = wire.tokenizer.get_vocab()
    return {t: ids.count(vocab[t]) for t in wire.special_tokens}


def string_counts(wire: Wire, text: str) -> dict[str, int]:
    """Occurrences of each special token's string, counted the way the tokenizer matches them."""
    counts = dict.fromkeys(wire.special_tokens, 0)
    pattern = wire._special_pattern()
    assert pattern is not None
    for match in pattern.finditer(text):
        counts[match.group()] += 1
    return counts


@pytest.mark.parametrize("family", FAMILIES)
def test_env_text_keeps_special_strings_as_text(stack_of, family):
    stack = stack_of(family)
    wire = Wire.bind(stack.processor, stack.tokenizer)
    env = forged(wire)
    rendered = wire.first_prompt_text("Be brief.", env)
    ids = wire.encode_env(rendered, ["Be brief.", env])
    # the text reads as rendered (no re-spacing), and only the template's tokens are tokens
    assert decode(stack.tokenizer, ids) == rendered
    template_only = string_counts(wire, rendered.replace(env.strip(), ""))
    assert id_counts(wire, ids) == template_only
    assert wire.count_special(env) == sum(string_counts(wire, env).values()) > 0
    # allowed, env text becomes control tokens, as the tokenizer makes them
    allowed = wire.encode_env(rendered, ["Be brief.", env], allow_special=True)
    assert allowed == wire.encode([rendered])[0]
    assert id_counts(wire, allowed) == string_counts(wire, rendered) != template_only

    reply_text = wire.reply_text(env)
    reply = wire.reply_ids(reply_text, [env], allow_special=False)
    assert decode(stack.tokenizer, reply) == reply_text
    assert id_counts(wire, reply) == string_counts(wire, reply_text.replace(env.strip(), ""))


@pytest.mark.parametrize("family", FAMILIES)
def test_plain_env_text_gets_the_ids_it_always_had(stack_of, family):
    stack = stack_of(family)
    wire = Wire.bind(stack.processor, stack.tokenizer)
    env = "Room 12: a <door> and 3 keys.\n\nWhat now?"
    rendered = wire.first_prompt_text("Be brief.", env)
    assert wire.encode_env(rendered, ["Be brief.", env]) == wire.encode([rendered])[0]
    reply_text = wire.reply_text(env)
    assert wire.reply_ids(reply_text, [env], False) == wire.reply_ids(reply_text)


QWEN3_ADDED = ("<think>", "</think>", "<tool_call>", "</tool_call>")


@pytest.mark.parametrize("family", ["qwen3", "qwen2.5"])
def test_added_tokens_the_template_writes_stay_text_too(stack_of, family):
    """Qwen's <think> and <tool_call> are added tokens that are not special: a tokenizer's
    split_special_tokens leaves them whole, so env text would forge a reasoning close or a call."""
    stack = stack_of(family)
    tokenizer = stack.tokenizer
    wire = Wire.bind(stack.processor, tokenizer)
    decoder = tokenizer.added_tokens_decoder.values()
    added = [t.content for t in decoder if t.content in QWEN3_ADDED and not t.special]
    assert added and set(added) <= set(wire.control_tokens)
    env = f"note {''.join(added)} and {added[-1]}\n\nmove {added[0]}x"
    forgeable = tokenizer(env, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    vocab = tokenizer.get_vocab()
    assert {vocab[t] for t in added} <= set(forgeable)  # what the old rule let through
    reply_text = wire.reply_text(env)
    ids = wire.reply_ids(reply_text, [env], allow_special=False)
    assert not {vocab[t] for t in added} & set(ids)
    assert decode(tokenizer, ids) == reply_text
    # the template's own control tokens around the env text are still tokens
    assert id_counts(wire, ids) == string_counts(wire, reply_text.replace(env.strip(), ""))
    assert wire.count_special(env) == len(added) + 2


def test_a_template_token_stays_a_token_next_to_env_text(stack_of):
    """Qwen 3 without thinking writes <think></think> in the prompt: those stay tokens."""
    from trl_env_qwen import Qwen3Processor

    stack = stack_of("qwen3")
    wire = Wire.bind(Qwen3Processor(stack.tokenizer, thinking=False), stack.tokenizer)
    env = "say </think> now"
    text = wire.reply_text(env)
    ids = wire.reply_ids(text, [env], allow_special=False)
    think_close = stack.tokenizer.convert_tokens_to_ids("</think>")
    assert ids.count(think_close) == 1 == text.count("</think>") - 1
    assert decode(stack.tokenizer, ids) == text


def test_every_added_token_but_ordinary_text_is_a_control_token(stack_of):
    """Added tokens laid on top of the vocabulary are control tokens whether the template writes
    them or not (Qwen's <|fim_prefix|>); whitespace runs and pieces of the vocabulary itself,
    added only to be matched whole (Gemma's HTML tags), are the tokenizer's own text."""
    import copy

    from tokenizers import AddedToken

    from trl_env.wire import control_tokens, special_tokens

    tokenizer = copy.deepcopy(stack_of("qwen3").tokenizer)
    tokens = set(control_tokens(tokenizer))
    assert set(special_tokens(tokenizer)) < tokens
    assert "<|fim_prefix|>" in tokens and "<|fim_prefix|>" not in tokenizer.chat_template
    word = next(t for t, i in tokenizer.get_vocab().items() if t.isalpha() and len(t) > 3)
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in (word, "\n\n\n\n\n\n", "<x>")])
    assert tokenizer.convert_tokens_to_ids(word) < tokenizer.vocab_size  # the vocabulary's own
    tokens = set(control_tokens(tokenizer))
    assert "<x>" in tokens and word not in tokens and "\n\n\n\n\n\n" not in tokens


@pytest.mark.parametrize("family", [*FAMILIES, "gemma4", "gpt-oss", "lfm2", "smollm2"])
def test_the_wire_s_own_encoding_gives_the_tokenizer_s_ids(stack_of, family):
    """Wire.encode and reply_ids use the fast tokenizer's backend directly when it agrees with
    the wrapper on a few probes: on random text, with and without the closer before it, the
    ids must be the wrapper's (the module's ``encode_after`` and a plain call)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from trl_env.wire import encode_after

    stack = stack_of(family)
    wire = Wire.bind(stack.processor, stack.tokenizer)
    pieces = st.sampled_from(
        [
            " ",
            "  ",
            "\n",
            "\n\n",
            "\t",
            "a",
            "Guess",
            " 12",
            "7.5",
            "é",
            "日本",
            "😀",
            "->",
            '"',
            "{",
        ]
    )
    text = st.lists(pieces, max_size=12).map("".join)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(texts=st.lists(text, min_size=1, max_size=4))
    def check(texts):
        wrapper = [list(i) for i in stack.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        assert wire.encode(texts) == wrapper
        for t in texts:
            assert wire.reply_ids(t) == encode_after(stack.tokenizer, wire.close_text, t)

    check()


@pytest.mark.parametrize("family", [*FAMILIES, "gemma4", "gpt-oss", "lfm2", "smollm2"])
def test_the_wire_s_own_decoding_gives_the_tokenizer_s_text(stack_of, family):
    """decode and decode_many use the pipeline directly when it agrees with the wrapper on a few
    probes: on random ids (special tokens, byte pieces and ordinary words mixed), one at a time
    and in a batch, the text must be the wrapper's."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from trl_env.wire import decode_many, fast_decoder

    tokenizer = stack_of(family).tokenizer
    assert fast_decoder(tokenizer) is not None  # else this checks the wrapper against itself
    size = 1 + max(tokenizer.get_vocab().values())
    specials = sorted(tokenizer.added_tokens_decoder)
    ids = st.lists(st.integers(0, size - 1) | st.sampled_from(specials), max_size=24)

    def wrapper(seq):
        return tokenizer.decode(seq, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(seqs=st.lists(ids, min_size=1, max_size=4))
    def check(seqs):
        assert [decode(tokenizer, s) for s in seqs] == [wrapper(s) for s in seqs]
        assert decode_many(tokenizer, seqs) == [wrapper(s) for s in seqs]

    check()


def _installed_processors() -> list[str]:
    from trl_env.registry import processors

    return sorted(processors.names())


class SpellingEnv:
    """An env whose every text (system prompt, first prompt, replies) spells ``spelled``."""

    def __init__(self, spelled: str) -> None:
        self.text = f"see {spelled} end"
        self.system_prompt = f"Rules {spelled} ok"
        self.reward, self.alive, self.turns = 0.0, True, 0

    def reset(self, seed: str) -> str:
        return self.text

    def step(self, action: str) -> str:
        self.turns += 1
        self.alive = self.turns < 2
        return self.text


@pytest.mark.parametrize("family", _installed_processors())
def test_an_env_spelling_every_added_token_keeps_it_as_text(stack_of, family):
    """An episode whose env spells each added token of the family's tokenizer (control tokens
    and the rest: Qwen's ``<|fim_prefix|>``, ``<tool_call>``) holds, on the env's side, only the
    added-token ids the template writes, and every piece decodes back to the text it was."""
    stack = stack_of(family)
    tokenizer = stack.tokenizer
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.content.strip()}
    spelled = " ".join(sorted(set(added.values())))
    env = SpellingEnv(spelled)
    [ep] = stack.play(["s0"], lambda: env, max_turns=3, max_new_tokens=6)
    assert not ep.error and ep.turns >= 2, ep.error
    longest_first = sorted(set(added.values()), key=lambda t: (-len(t), t))
    counter = re.compile("|".join(map(re.escape, longest_first)))
    ids = ep.prompt_ids + ep.completion_ids
    mask = [0] * len(ep.prompt_ids) + ep.env_mask
    runs = [list(run) for m, run in _runs(ids, mask) if not m]  # the env's side, piece by piece
    texts = [decode(tokenizer, run) for run in runs]
    assert env.system_prompt in texts[0] and sum(env.text in t for t in texts) == ep.turns
    for run, text in zip(runs, texts, strict=True):
        framing = text.replace(env.text, "").replace(env.system_prompt, "")
        written = sorted(m.group() for m in counter.finditer(framing))
        assert sorted(added[i] for i in run if i in added) == written, text
    assert decode(tokenizer, ids) == ep.text


def _runs(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """``ids`` cut where ``mask`` changes: (mask value, ids) in order."""
    out: list[tuple[int, list[int]]] = []
    for i, m in zip(ids, mask, strict=True):
        if out and out[-1][0] == m:
            out[-1][1].append(i)
        else:
            out.append((m, [i]))
    return out


def test_a_copy_that_would_renumber_added_tokens_is_refused(stack_of):
    """tokenizers numbers added tokens beyond the vocabulary in the order it reads them: a copy
    whose list comes in another order gives them other ids, and is refused in one sentence."""
    import json
    from types import SimpleNamespace

    from trl_env.errors import TokenizerMismatchError
    from trl_env.wire import control_tokens, literal_tokenizer

    tokenizer = stack_of("qwen3").tokenizer
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    data["added_tokens"].reverse()
    backend = SimpleNamespace(to_str=lambda: json.dumps(data))
    shuffled = SimpleNamespace(
        added_tokens_decoder=tokenizer.added_tokens_decoder, backend_tokenizer=backend
    )
    assert literal_tokenizer(tokenizer, control_tokens(tokenizer)) is not None
    with pytest.raises(TokenizerMismatchError, match="changes its id"):
        literal_tokenizer(shuffled, control_tokens(tokenizer))
