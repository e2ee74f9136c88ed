"""Options and text mappings, without a server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trl_env_openenv.errors import OpenEnvOptionError
from trl_env_openenv.mapping import (
    InvalidAction,
    action_payload,
    observation_text,
    reset_kwargs,
    seed_to_int,
)
from trl_env_openenv.options import Options, normalize_url


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("ws://localhost:8000/ws", "http://localhost:8000"),
        ("wss://env.example.org/team/ws/", "https://env.example.org/team"),
        ("https://env.example.org/api", "https://env.example.org/api"),
    ],
)
def test_urls_are_normalized(typed: str, expected: str) -> None:
    assert normalize_url(typed) == expected


def test_seed_to_int_is_stable_and_keeps_numbers() -> None:
    assert seed_to_int("42") == 42
    assert seed_to_int("train-0") == seed_to_int("train-0") == 1900557741
    assert seed_to_int("train-0") != seed_to_int("eval-0")


@given(st.text(max_size=40))
def test_seed_to_int_fits_openenv_seeds(seed: str) -> None:
    value = seed_to_int(seed)
    assert 0 <= value < 2**63 and value == seed_to_int(seed)


def test_reset_kwargs_follow_the_seed_options() -> None:
    base = {"url": "http://h:1", "reset_args": {"level": 2}}
    assert reset_kwargs("7", Options.parse(**base)) == {"level": 2, "seed": 7}
    named = Options.parse(**base, seed_mode="str", seed_key="episode_id")
    assert reset_kwargs("train-1", named) == {"level": 2, "episode_id": "train-1"}
    assert reset_kwargs("train-1", Options.parse(**base, seed_mode="none")) == {"level": 2}


def test_actions_from_text() -> None:
    field = Options.parse(url="http://h:1", action_field="code", action_defaults={"lang": "py"})
    assert action_payload("print(1)", field) == {"lang": "py", "code": "print(1)"}
    as_json = Options.parse(url="http://h:1", action_format="json")
    assert action_payload(' {"move": "up"} ', as_json) == {"move": "up"}
    with pytest.raises(InvalidAction, match="got a JSON list, not an object"):
        action_payload("[1, 2]", as_json)
    auto = Options.parse(url="http://h:1", action_format="auto")
    assert action_payload("{not json", auto) == {"message": "{not json"}


def test_observation_text() -> None:
    auto = Options.parse(url="http://h:1")
    assert observation_text({"echoed_message": "hi"}, auto) == "hi"
    assert observation_text({"b": 1, "a": "x"}, auto) == '{"a": "x", "b": 1}'
    nested = Options.parse(url="http://h:1", observation_field="board.rows")
    assert observation_text({"board": {"rows": ["ab", "cd"]}}, nested) == '["ab", "cd"]'


def test_success_field_is_optional_and_must_be_a_name() -> None:
    assert Options.parse(url="http://h:1").success_field is None
    assert Options.parse(url="http://h:1", success_field="").success_field is None
    assert Options.parse(url="http://h:1", success_field=" info.won ").success_field == "info.won"
    with pytest.raises(OpenEnvOptionError, match="Option success_field must be"):
        Options.parse(url="http://h:1", success_field=3)
