"""Secrets inside URLs never reach what a run writes or says: the user information and the
secret-named query values of every URL in a text are masked, and a config read back with a
masked secret asks for the URL again."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from trl_env.errors import UsageError
from trl_env.redact import masked_keys, redact, redact_text, redact_url
from trl_env.training.config import read_saved, resolve, save_config


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://alice:s3cret@host:8000/x", "http://***@host:8000/x"),
        ("https://ghp_TOKEN@github.com/a/b.git", "https://***@github.com/a/b.git"),
        ("http://h:1/p?token=abc&page=2", "http://h:1/p?token=***&page=2"),
        ("http://h/?X-Amz-Signature=a&X-Amz-Credential=b&v=1",
         "http://h/?X-Amz-Signature=***&X-Amz-Credential=***&v=1"),
        ("http://h/cb#access_token=abc&state=s", "http://h/cb#access_token=***&state=s"),
        ("ws://u:p@h:1/ws?api_key=k#x", "ws://***@h:1/ws?api_key=***#x"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://h/?monkey=1&keyboard=2", "http://h/?monkey=1&keyboard=2"),
    ],
)  # fmt: skip
def test_a_url_keeps_where_it_points_and_loses_its_secrets(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_text(f"at {url}, then") == f"at {shown}, then"


def test_values_are_redacted_all_the_way_down() -> None:
    value = {"env_args": {"url": "http://a:b@h:1"}, "urls": ("http://c:d@h:2",), "n": 3}
    assert redact(value) == {
        "env_args": {"url": "http://***@h:1"},
        "urls": ("http://***@h:2",),
        "n": 3,
    }
    assert sorted(masked_keys(redact(value))) == ["env_args.url", "urls"]
    assert list(masked_keys(value)) == []


def test_a_saved_config_masks_the_secret_and_the_same_flags_resume_it(tmp_path) -> None:
    url = "http://alice:s3cret@127.0.0.1:9"
    given = {"env": "guess", "processor": "qwen3", "rollout": {"env_servers": (url,)}}
    path = tmp_path / "config.yaml"
    save_config(resolve({**given, "env_args": {"password_url": "http://h/?token=t0k"}}), path)
    text = path.read_text()
    assert "s3cret" not in text and "t0k" not in text and "http://***@127.0.0.1:9" in text
    saved = read_saved(path)
    # the flags the run was started with (a tuple of URLs, its secret in them) are its own
    again = resolve(
        {"rollout": {"env_servers": (url,)}, "env_args": {"password_url": "http://h/?token=t0k"}},
        saved,
    )
    assert again.rollout_config().env_servers == (url,)
    with pytest.raises(UsageError, match=r"rollout\.env_servers holds a URL whose secret") as bare:
        resolve({}, saved)
    other = "http://bob:t0psecret@127.0.0.1:10"
    with pytest.raises(UsageError, match="here but") as changed:
        resolve({"rollout": {"env_servers": (other,)}}, saved)
    for refused in (bare, changed):
        assert "s3cret" not in str(refused.value) and "t0psecret" not in str(refused.value)


def test_an_error_the_cli_prints_shows_no_secret() -> None:
    from trl_env.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "--env",
            "guess",
            "--processor",
            "qwen3",
            "--env-server",
            "ftp://alice:s3cret@h:1",
        ],
    )
    assert result.exit_code == 2 and "ftp://***@h:1" in result.output
    assert "s3cret" not in result.output
