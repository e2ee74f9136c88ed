"""`trl-env compare`: paired reward differences on shared seeds, checked by hand computation."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.episode import Episode, Status

T_975 = {9: 2.2622, 11: 2.2010, 21: 2.0796}  # printed table, two-sided 95%


def record(seed: str, reward: float, env: str | None, model: str | None) -> dict:
    rec = Episode(
        seed=seed,
        reward=reward,
        status=Status.DONE,
        turns=2,
        text=f"<|im_start|>user\n{seed}<|im_end|>\n<|im_start|>assistant\nGUESS 4<|im_end|>",
        segments=[
            (f"<|im_start|>user\n{seed}<|im_end|>\n<|im_start|>assistant\n", "prompt"),
            ("GUESS 4<|im_end|>", "model"),
        ],
    ).to_dict()
    if env:
        rec["env"] = env
    if model:
        rec["run"] = {
            "model": model,
            "processor": "qwen3",
            "env": env,
            "sampling": {"temperature": 0.7 if model == "base" else 1.0},
        }
    return rec


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def run(*args: str):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


@pytest.fixture
def runs(tmp_path):
    """A and B on two envs; B repeats some seeds and both have seeds the other lacks."""
    rng = random.Random(11)
    a, b = [], []
    for env, n in (("guess", 10), ("wordle", 12)):
        for i in range(n):
            a.append(record(f"eval-{i}", round(rng.random(), 3), env, "base"))
            b.append(record(f"eval-{i}", round(rng.random(), 3), env, "tuned"))
            if i % 4 == 0:  # a second episode of the same seed: averaged before pairing
                b.append(record(f"eval-{i}", round(rng.random(), 3), env, "tuned"))
    a.append(record("eval-99", 1.0, "guess", "base"))
    b += [record("eval-98", 0.0, "guess", "tuned"), record("eval-97", 0.0, "wordle", "tuned")]
    return write(tmp_path / "a.jsonl", a), write(tmp_path / "b.jsonl", b), a, b


def expected(a: list[dict], b: list[dict], env: str | None) -> dict:
    """Mean paired difference and its interval, computed without the code under test."""

    def means(records):
        seeds: dict[tuple, list[float]] = {}
        for r in records:
            if env is None or r["env"] == env:
                seeds.setdefault((r.get("env"), r["seed"]), []).append(r["reward"])
        return {k: sum(v) / len(v) for k, v in seeds.items()}

    ma, mb = means(a), means(b)
    diffs = [mb[k] - ma[k] for k in sorted(ma.keys() & mb.keys())]
    mean = statistics.fmean(diffs)
    half = T_975[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return {"n": len(diffs), "mean_diff": mean, "low": mean - half, "high": mean + half}


def test_paired_difference_per_env_and_overall(runs):
    path_a, path_b, a, b = runs
    result = run(path_a, path_b, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    groups = {g["env"]: g for g in out["groups"]}
    for env, group in [
        ("guess", groups["guess"]),
        ("wordle", groups["wordle"]),
        (None, out["overall"]),
    ]:
        want = expected(a, b, env)
        assert group["n"] == want["n"]
        for key in ("mean_diff", "low", "high"):
            assert group[key] == pytest.approx(want[key], abs=2e-4), (env, key)
        assert group["b_higher"] + group["ties"] + group["a_higher"] == want["n"]
    assert (out["only_a"], out["only_b"]) == (1, 2)
    assert out["metadata"]["model"] == {"a": "base", "b": "tuned"}
    assert out["metadata"]["sampling"] == {"a": "temperature=0.7", "b": "temperature=1.0"}


def test_text_and_html_output(runs, tmp_path):
    path_a, path_b, a, b = runs
    html = tmp_path / "cmp.html"
    result = run(path_a, path_b, "--html", html)
    assert result.exit_code == 0, result.output
    overall = expected(a, b, None)
    assert "base" in result.output and "tuned" in result.output
    assert f"{overall['mean_diff']:+.3g}" in result.output
    for env in ("guess", "wordle", "all"):
        assert any(line.split()[:1] == [env] for line in result.output.splitlines())
    page = html.read_text(encoding="utf-8")
    assert page.count("<svg") == 3 and "https://" not in page and "<script" not in page
    assert str(path_a) in page and str(path_b) in page
    assert "<td><b>model</b></td>" in page and "<td>processor</td>" in page  # differs / same


def test_old_files_pair_on_seed_alone(tmp_path):
    rewards_a = [i / 12 for i in range(12)]
    rewards_b = [min(1.0, r + 0.1 * (i % 3)) for i, r in enumerate(rewards_a)]
    a = write(
        tmp_path / "a.jsonl", [record(f"s{i}", r, None, None) for i, r in enumerate(rewards_a)]
    )
    # B names its env, A does not: they still pair, by seed
    b = write(
        tmp_path / "b.jsonl", [record(f"s{i}", r, "guess", "m") for i, r in enumerate(rewards_b)]
    )
    out = json.loads(run(a, b, "--json").output)
    diffs = [rb - ra for ra, rb in zip(rewards_a, rewards_b, strict=True)]
    assert out["overall"]["n"] == 12
    assert out["overall"]["mean_diff"] == pytest.approx(statistics.fmean(diffs))
    half = T_975[11] * statistics.stdev(diffs) / math.sqrt(12)
    assert out["overall"]["high"] == pytest.approx(statistics.fmean(diffs) + half, abs=2e-4)


@pytest.mark.parametrize(
    ("b_content", "message"),
    [
        (None, "does not exist"),
        ("not json at all\n", "b.jsonl:1 is not a JSON record"),
        ("", "No episode records found"),
        (json.dumps(record("other-seed", 1.0, "guess", "m")) + "\n", "share no seeds"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path, b_content, message):
    a = write(tmp_path / "a.jsonl", [record("s1", 0.5, "guess", "m")])
    b = tmp_path / "b.jsonl"
    if b_content is not None:
        b.write_text(b_content)
    result = run(a, b)
    assert result.exit_code == 2
    assert result.output.startswith("Error: ") and result.output.strip().count("\n") == 0
    assert message in result.output
