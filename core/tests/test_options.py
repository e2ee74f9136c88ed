"""``key=value`` options for plugins: YAML scalars in, one-sentence errors out."""

from __future__ import annotations

import pytest

from trl_env.cli.options import parse_kv
from trl_env.errors import UsageError


def test_values_are_yaml_scalars_and_lists():
    got = parse_kv(
        ["size=7", "shaped=false", "rate=0.5", "name=qwen", "mods=[q_proj, v_proj]", "e="]
    )
    assert got == {
        "size": 7,
        "shaped": False,
        "rate": 0.5,
        "name": "qwen",
        "mods": ["q_proj", "v_proj"],
        "e": "",
    }


def test_text_that_is_not_yaml_is_kept_as_text():
    assert parse_kv(["prompt=a: [b"]) == {"prompt": "a: [b"}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["size"], "key=value"),
        (["=3"], "key=value"),
        (["not a name=3"], "key=value"),
        (["a=1", "a=2"], "given twice"),
        (["a=b: c"], "mapping"),
    ],
)
def test_bad_pairs_are_refused(pairs, message):
    with pytest.raises(UsageError, match=message):
        parse_kv(pairs, "--env-arg")
