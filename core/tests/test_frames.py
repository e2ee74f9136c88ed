"""The windowed reading of a large worker reply gives what ``json.loads`` gives, and refuses what
it refuses: at small windows, so every string, escape and surrogate pair meets a window's end."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_env.hosts import frames

# Characters that stress the reader: quotes and backslashes (escaped), JSON's marks inside
# strings, an astral character (a surrogate pair when escaped), lone surrogates, controls.
CHARS = st.sampled_from([*'a"\\,:[]{} \né😀\u2028\x01', "\ud83d", "\ude00", "\udbff"])
TEXT = st.lists(CHARS, max_size=80).map("".join)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=30,
)


@pytest.fixture(params=[16, 29])
def windowed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every reply read window by window, with windows of a few characters (the same for every
    example hypothesis draws, so the fixture's scope is the test's)."""
    monkeypatch.setattr(frames, "SMALL_REPLY", 0)
    monkeypatch.setattr(frames, "WINDOW", request.param)
    return int(request.param)


def _same(got: object, want: object) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return json.dumps(got) == json.dumps(want) and type(got) is type(want)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=VALUES, ascii_only=st.booleans())
def test_a_reply_reads_as_json_loads_reads_it(windowed: int, value: object, ascii_only: bool):
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    want = json.loads(data.decode("utf-8", "surrogatepass"))
    got = frames.decode(data, frames.MAX_REPLY_VALUES)
    assert _same(got, want), (data, got)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=VALUES,
    edits=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(b'"\\,:[]{}u0ad ')), max_size=3
    ),
)
def test_a_broken_reply_is_refused_as_json_loads_refuses_it(windowed: int, value: object, edits):
    data = bytearray(json.dumps(value).encode("utf-8", "surrogatepass"))
    for where, byte in edits:
        data[where % len(data)] = byte
    try:
        want = json.loads(bytes(data).decode("utf-8", "surrogatepass"))
    except ValueError:
        with pytest.raises(frames.BadReply, match="not JSON"):
            frames.decode(data)
    else:
        assert _same(frames.decode(data), want)


def test_surrogate_pairs_are_never_cut_at_a_window(windowed: int) -> None:
    # at every offset a pair's two escapes straddle some window's end
    for lead in range(windowed):
        data = json.dumps(["x" * lead + "😀" * 12 + "\ud83d" + "é"]).encode()
        assert frames.decode(data) == json.loads(data)


def test_long_dict_keys_are_read_window_by_window(windowed: int) -> None:
    data = json.dumps({'k"\\' * 40 + "😀": ['v"' * 40]}).encode()
    assert frames.decode(data) == json.loads(data)


def test_values_are_counted_outside_strings() -> None:
    assert frames.value_count("[[],[],[]]") == 7  # 1 + 2 commas + 4 openings: at most
    assert frames.value_count('"a,b:[c{"') == 1  # one string, whatever it holds
    assert frames.value_count('{"k": "v,\\\\", "n": [1, 2]}') == 7
    # a string that never closes: its commas are not counted, nor anything after it
    assert frames.value_count('["\\"' + "," * 100) == 2


def test_a_reply_over_the_count_is_refused_before_it_is_decoded(windowed: int) -> None:
    data = json.dumps(["ok", [[]] * 50]).encode()
    with pytest.raises(frames.BadReply, match="JSON values, over the limit of 40"):
        frames.decode(data, 40)
    # marks inside strings are not values: the same count of them in text passes
    text = json.dumps(["ok", ",[" * 50]).encode()
    assert frames.decode(text, 40) == ["ok", ",[" * 50]
