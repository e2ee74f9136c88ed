"""`trl-env compare`: paired reward differences on shared seeds, checked by hand computation."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.episode import Episode, Status

T_975 = {9: 2.2622, 11: 2.2010, 21: 2.0796, 31: 2.0395}  # printed table, two-sided 95%


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
    # each side's own figures: every episode of the env, repeated and unshared seeds included
    for side, records in (("a", a), ("b", b)):
        for env in ("guess", "wordle"):
            mine = [r["reward"] for r in records if r["env"] == env]
            assert groups[env][side]["episodes"] == len(mine)
            assert groups[env][side]["reward"] == pytest.approx(statistics.fmean(mine))
        assert out["overall"][side]["episodes"] == len(records)
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


def staged(seed: str, reward: float, env: str, stage: int | None, success: bool | None) -> dict:
    """An eval record of a mixed run: its env label, curriculum stage and success verdict."""
    rec = record(seed, reward, env, "m")
    rec.update(stage=stage, success=success)
    if stage is not None:
        rec["stage_options"] = {"size": 5 + stage}
    return rec


def test_mixed_runs_pair_per_env_and_stage(tmp_path):
    """The same seed at two stages is two games: it pairs only with itself at its stage."""
    rng = random.Random(4)
    a, b = [], []
    plan = [("guess", None, 10), ("sokoban-large", 0, 12), ("sokoban-large", 1, 10)]
    for env, stage, n in plan:
        for i in range(n):
            for side, repeats in ((a, 1), (b, 1 + (i % 3 == 0))):
                for _ in range(repeats):  # B plays some seeds twice: averaged first
                    r = round(rng.random(), 3)
                    ok = None if env == "guess" else r > 0.4
                    side.append(staged(f"eval-{i}", r, env, stage, ok))
    a.append(staged("eval-3", 1.0, "sokoban-large", 2, True))  # a stage B never reached
    out = json.loads(
        run(write(tmp_path / "a.jsonl", a), write(tmp_path / "b.jsonl", b), "--json").output
    )

    def per_key(records, want):
        keys: dict[tuple, list[dict]] = {}
        for r in records:
            if want(r):
                keys.setdefault((r["env"], r.get("stage"), r["seed"]), []).append(r)
        return keys

    def check(group, want):
        ka, kb = per_key(a, want), per_key(b, want)
        shared = ka.keys() & kb.keys()
        diffs = [
            statistics.fmean(r["reward"] for r in kb[k])
            - statistics.fmean(r["reward"] for r in ka[k])
            for k in shared
        ]
        mean = statistics.fmean(diffs)
        half = T_975[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs))
        assert group["n"] == len(diffs)
        assert group["mean_diff"] == pytest.approx(mean, abs=1e-9)
        assert (group["low"], group["high"]) == (
            pytest.approx(mean - half, abs=2e-4),
            pytest.approx(mean + half, abs=2e-4),
        )
        for side, keys, name in ((ka, shared, "success_a"), (kb, shared, "success_b")):
            known = [r["success"] for k in keys for r in side[k] if r["success"] is not None]
            if not known:
                assert group[name] is None
            else:
                assert group[name] == {
                    "successes": sum(known),
                    "n": len(known),
                    "rate": pytest.approx(sum(known) / len(known)),
                }

    groups = {g["env"]: g for g in out["groups"]}
    assert sorted(groups) == ["guess", "sokoban-large"]
    check(groups["guess"], lambda r: r["env"] == "guess")
    check(groups["sokoban-large"], lambda r: r["env"] == "sokoban-large")
    assert [(g["env"], g["stage"]) for g in out["stages"]] == [
        ("sokoban-large", 0),
        ("sokoban-large", 1),
    ]
    for g in out["stages"]:
        check(g, lambda r, s=g["stage"]: r["env"] == "sokoban-large" and r.get("stage") == s)
    check(out["overall"], lambda r: True)
    assert out["overall"]["n"] == 32 and (out["only_a"], out["only_b"]) == (1, 0)

    html = tmp_path / "cmp.html"
    text = run(tmp_path / "a.jsonl", tmp_path / "b.jsonl", "--html", html).output
    page = html.read_text(encoding="utf-8")
    for stage in (0, 1):  # a table row under its env, and a row of the forest plot
        assert f'<tr class="sub"><td>sokoban-large · stage {stage}</td>' in page
        assert f"<title>sokoban-large · stage {stage}: " in page
    rows = [line.split() for line in text.splitlines()]
    assert ["sokoban-large", "·", "stage", "1", "10"] in [r[:5] for r in rows]
    assert any(
        line.strip().startswith("env ") and "success A" in line for line in text.splitlines()
    )


def test_held_out_episodes_of_two_training_runs(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "report_mixture", Path(__file__).with_name("test_report_mixture.py")
    )
    mixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mixture)
    path_a, _, held_a = mixture.mixed_run(tmp_path / "a", seed=1)
    path_b, _, held_b = mixture.mixed_run(tmp_path / "b", seed=2)
    out = json.loads(run(path_a, path_b, "--held-out", "--json").output)
    last = mixture.STEPS  # only the last evaluation pairs: it is the trained model's
    ra = {(r["env"], r["seed"]): r["reward"] for r in held_a if r["step"] == last}
    rb = {(r["env"], r["seed"]): r["reward"] for r in held_b if r["step"] == last}
    diffs = [rb[k] - ra[k] for k in sorted(ra)]
    assert out["overall"]["n"] == len(diffs) == 9
    assert out["overall"]["mean_diff"] == pytest.approx(statistics.fmean(diffs))
    # at the last step sokoban-large plays its last stage on both sides
    assert [(g["env"], g["stage"], g["n"]) for g in out["stages"]] == [("sokoban-large", 2, 3)]

    plain = tmp_path / "plain"
    (plain / "episodes").mkdir(parents=True)
    (plain / "episodes" / "rank0.jsonl").write_text(
        json.dumps({"step": 1, "seed": "heldout-0", "reward": 1.0, "env": "guess"}) + "\n"
    )
    result = run(path_a, plain, "--held-out")
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0
    assert "has no held-out episodes (train with --eval-every N" in result.output
