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


def test_rollout_flags_are_generated_from_the_declaration():
    import dataclasses

    import click
    from click.testing import CliRunner

    from trl_env.cli.options import rollout_options
    from trl_env.config import RolloutConfig

    seen: dict = {}

    @click.command()
    @rollout_options()
    def cmd(**opts):
        seen.update(opts)

    names = [f.name for f in dataclasses.fields(RolloutConfig)]
    result = CliRunner().invoke(cmd, ["--max-new-tokens", "7", "--env-isolation", "process"])
    assert result.exit_code == 0, result.output
    assert set(seen) == set(names)
    assert seen["max_new_tokens"] == 7 and seen["env_isolation"] == "process"
    # Not given stays None, so a command can layer config files and its own defaults below.
    assert all(seen[n] is None for n in names if n not in ("max_new_tokens", "env_isolation"))
    help_text = " ".join(CliRunner().invoke(cmd, ["--help"]).output.split())
    for f in dataclasses.fields(RolloutConfig):
        if f.metadata.get("multiple"):  # repeatable (--env-server URL): checked below
            assert f.metadata.get("flag", "--" + f.name.replace("_", "-")) in help_text
            continue
        if f.default is not None:
            shown = getattr(f.default, "value", f.default)
            assert f"[default: {shown}]" in help_text.split("--" + f.name.replace("_", "-"))[1]
    urls = ["--env-server", "http://a:1", "--env-server", "http://b:2"]
    assert CliRunner().invoke(cmd, urls).exit_code == 0
    assert seen["env_servers"] == ("http://a:1", "http://b:2")
    # one name, repeated or as a comma list: it used to be refused as "expected a list"
    names = ["--env-pass-env", "HF_TOKEN", "--env-pass-env", "A,B"]
    assert CliRunner().invoke(cmd, names).exit_code == 0
    assert RolloutConfig(env_pass_env=seen["env_pass_env"]).env_pass_env == ("HF_TOKEN", "A", "B")
    from trl_env.training.values import coerce_all

    hints = {"env_pass_env": tuple[str, ...]}  # as a config file's rollout section is read
    rollout = coerce_all("rollout.", {"env_pass_env": "HF_TOKEN, A"}, hints)
    assert RolloutConfig(**rollout).env_pass_env == ("HF_TOKEN", "A")
