"""bench/learn.py at tiny sizes: its --json shape, and the paired statistics it reports."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from trl_env.report.stats import t_quantile

BENCH = Path(__file__).resolve().parents[1] / "bench" / "learn.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("learn_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def t_interval(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    half = t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def test_paired_change_is_per_seed_differences_with_a_t_interval():
    bench = load_bench()
    before = {"a": 0.1, "b": 0.5, "c": 0.2, "d": 0.9, "lonely": 1.0}
    after = {"d": 1.0, "c": 0.35, "b": 0.55, "a": 0.4, "other": 0.0}
    stats = bench.paired(before, after)
    seeds = ["a", "b", "c", "d"]  # only seeds with both sides count
    assert stats["n"] == 4
    for key, values in (
        ("before", [before[s] for s in seeds]),
        ("after", [after[s] for s in seeds]),
        ("delta", [after[s] - before[s] for s in seeds]),
    ):
        mean, lo, hi = t_interval(values)
        assert stats[key]["mean"] == pytest.approx(mean)
        assert stats[key]["ci95"] == pytest.approx([lo, hi])
    # Pairing removes the spread between seeds: the change's interval is the narrower one.
    unpaired = stats["after"]["ci95"][1] - stats["after"]["ci95"][0]
    assert stats["delta"]["ci95"][1] - stats["delta"]["ci95"][0] < unpaired


def test_paired_constant_shift_has_a_zero_width_interval():
    bench = load_bench()
    before = {str(i): i / 10 for i in range(6)}
    after = {s: v + 0.25 for s, v in before.items()}
    delta = bench.paired(before, after)["delta"]
    assert delta["mean"] == pytest.approx(0.25)
    assert delta["ci95"] == pytest.approx([0.25, 0.25])


def test_per_seed_averages_the_samples_of_each_seed():
    bench = load_bench()
    assert bench.per_seed([("x", 1.0), ("y", 0.0), ("x", 0.5)]) == {"x": 0.75, "y": 0.0}


@pytest.mark.slow
def test_learn_json_reports_both_paths_paired_by_seed(tmp_path):
    args = [sys.executable, str(BENCH), "--model", "tiny", "--processor", "smollm2"]
    args += ["--env", "guess", "--warmup", "4"]
    args += ["--steps", "1", "--prompts", "1", "--group", "2", "--eval-seeds", "3"]
    args += ["--eval-samples", "1", "--turn-tokens", "4", "--episode-tokens", "48"]
    args += ["--json", "--out", str(tmp_path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)  # stdout holds the one JSON object and nothing else
    bench = load_bench()
    for name in ("trl_env", "trl_recipe"):
        res = report[name]
        for key in ("base", "sft", "after", "delta", "rl_delta"):
            assert set(res[key]) == {"mean", "ci95"}
            assert math.isfinite(res[key]["mean"]) and len(res[key]["ci95"]) == 2
        assert res["seconds"] > 0 and res["steps"] == 1
        assert res["warmup"]["episodes"] == 4 and res["warmup"]["trained_tokens"] > 0
        assert set(res["base_by_seed"]) == {"eval-0", "eval-1", "eval-2"}
        total = bench.paired(res["base_by_seed"], res["after_by_seed"])
        rl = bench.paired(res["before_by_seed"], res["after_by_seed"])
        assert res["delta"]["mean"] == pytest.approx(total["delta"]["mean"])
        assert res["rl_delta"]["mean"] == pytest.approx(rl["delta"]["mean"])
        assert res["sft"]["mean"] == pytest.approx(rl["before"]["mean"])
        for reward in [*res["base_by_seed"].values(), *res["after_by_seed"].values()]:
            assert 0.0 <= reward <= 1.0
    # both paths start RL from the same warm-up: the same SFT losses
    assert report["trl_env"]["warmup"]["loss"] == report["trl_recipe"]["warmup"]["loss"]
    counts = report["trl_recipe"]["recipe_counts"]
    assert 0 <= counts["retokenised_turns"] <= counts["model_turns"]
    assert (counts["unsampled_tokens"] > 0) == (counts["retokenised_turns"] > 0)
    assert report["setup"]["command"].startswith("python bench/learn.py")
    for plot in ("learning-reward.svg", "learning-heldout.svg"):
        assert (tmp_path / plot).read_text(encoding="utf-8").rstrip().endswith("</svg>")
    assert json.loads((tmp_path / "learn.json").read_text(encoding="utf-8")) == report


def test_recipe_counts_the_retokenised_tokens_of_a_turn():
    bench = load_bench()
    counter = bench.RecipeRollout.__new__(bench.RecipeRollout)
    counter.turns = counter.retokenised_turns = counter.unsampled_tokens = 0
    counter._count([5, 6, 7], [5, 6, 7])  # sampled and trained alike
    counter._count([5, 9, 7, 2], [5, 6, 7])  # one re-tokenised id, one closer not sampled
    assert (counter.turns, counter.retokenised_turns, counter.unsampled_tokens) == (2, 1, 2)


@pytest.mark.slow
def test_paths_side_by_side_name_the_path_that_failed(tmp_path):
    """Each path runs in its own process (--jobs 2): one that fails is named in the last line."""
    args = [sys.executable, str(BENCH), "--model", str(tmp_path / "no-such-model")]
    args += ["--env", "guess", "--jobs", "2", "--json", "--out", str(tmp_path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("bench/learn.py: ") and "trl_env (exit 1)" in last
    assert "trl_recipe (exit 1)" in last and "no-such-model" in done.stderr
