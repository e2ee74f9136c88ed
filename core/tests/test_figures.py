"""The one definition of a set of episodes' figures: per-episode means, with the interval."""

from __future__ import annotations

import math
import statistics

import pytest

from trl_env.report.compare import held_out_change
from trl_env.report.stats import t_quantile
from trl_env.report.summary import FIGURES, by_env, evaluations, figures, windows


def _rec(reward: float, env: str = "guess", step: int = 0, **kw):
    base = {"reward": reward, "env": env, "step": step, "status": "done", "turns": 2}
    return {**base, "success": None, **kw}


def test_reward_is_the_per_episode_mean_with_its_t_interval():
    rewards = [0.0, 0.5, 1.0, 1.0]
    out = figures([_rec(r) for r in rewards])
    assert set(FIGURES) <= set(out)
    half = t_quantile(0.975, 3) * statistics.stdev(rewards) / 2
    assert out["reward"] == pytest.approx(0.625)
    assert (out["reward_low"], out["reward_high"]) == pytest.approx((0.625 - half, 0.625 + half))
    assert out["episodes"] == 4 and out["status"] == {"done": 4} and out["turns"] == 2


def test_an_env_with_few_episodes_in_a_batch_is_not_overweighted():
    # Two batches: guess has 1 episode in the first and 3 in the second. The mean of batch means
    # would be (1.0 + 0.0) / 2 = 0.5; over episodes it is 0.25.
    records = [_rec(1.0, step=0), _rec(0.0, step=1), _rec(0.0, step=1), _rec(0.0, step=1)]
    records += [_rec(0.5, env="wordle", step=s) for s in (0, 1)]
    envs = by_env(records)
    assert envs["guess"]["reward"] == pytest.approx(0.25)
    assert envs["wordle"]["reward"] == pytest.approx(0.5) and envs["wordle"]["episodes"] == 2


def test_success_counts_only_episodes_that_say():
    out = figures([_rec(1, success=True), _rec(0, success=False), _rec(0)])
    assert out["success"] == 0.5
    assert figures([_rec(1)])["success"] is None


def test_windows_find_the_best_stretch_that_the_last_hides():
    # Rises over steps 0-3, then falls back: the last window is low, the best one is not.
    curve = [0.0, 0.2, 0.8, 0.9, 0.3, 0.1]
    records = [_rec(r, step=s) for s, r in enumerate(curve) for _ in range(2)]
    spans = windows(records, 2)
    assert spans["first"]["steps"] == [1, 2] and spans["first"]["reward"] == pytest.approx(0.1)
    assert spans["best"]["steps"] == [3, 4] and spans["best"]["reward"] == pytest.approx(0.85)
    assert spans["last"]["steps"] == [5, 6] and spans["last"]["reward"] == pytest.approx(0.2)
    assert windows([], 3) == {}


def test_evaluations_are_the_first_and_last_held_out_steps():
    records = [_rec(0.1, step=2), _rec(0.3, step=2), _rec(0.9, step=4)]
    evals = evaluations(records)
    assert evals["first"]["step"] == 2 and evals["first"]["reward"] == pytest.approx(0.2)
    assert evals["last"]["step"] == 4 and evals["last"]["episodes"] == 1
    assert evals["last"]["reward_low"] is None  # one episode: no interval


def test_held_out_change_pairs_the_last_evaluation_with_the_first_by_seed():
    from trl_env.cli.train_cmd import _rows

    first = [_rec(r, step=0, seed=s) for s, r in (("a", 0.2), ("b", 0.5), ("c", 0.1), ("a", 0.4))]
    middle = [_rec(0.9, step=3, seed="a")]
    last = [_rec(r, step=6, seed=s) for s, r in (("a", 0.6), ("b", 0.5), ("c", 0.4), ("d", 1.0))]
    change = held_out_change(last + middle + first)  # in any order; d, played once, is left out
    diffs = [0.6 - statistics.fmean([0.2, 0.4]), 0.5 - 0.5, 0.4 - 0.1]  # a's two episodes: a mean
    half = t_quantile(0.975, 2) * statistics.stdev(diffs) / math.sqrt(3)
    mean = statistics.fmean(diffs)
    assert (change["from_step"], change["to_step"], change["n"]) == (0, 6, 3)
    assert change["mean"] == pytest.approx(mean)
    assert (change["low"], change["high"]) == pytest.approx((mean - half, mean + half))
    assert (change["higher"], change["equal"], change["lower"]) == (2, 1, 0)
    assert held_out_change(first) is None  # one evaluation: nothing to pair
    ((label, text),) = _rows({"held_out_change": change})
    assert label == "held-out change (after step 0 to 6)"
    assert text.startswith(f"{mean:+.3f} (") and text.endswith("seeds 2 higher, 1 equal, 0 lower")


def test_no_episodes_has_no_reward():
    out = figures([])
    assert out["episodes"] == 0 and out["reward"] is None and out["success"] is None
    assert not math.isnan(out["episodes"])


def test_the_closing_table_shows_each_window_once_with_its_interval():
    from trl_env.cli.train_cmd import _rows

    curve = [0.0, 0.8, 0.9, 0.3]
    records = [_rec(r, step=s) for s, r in enumerate(curve) for _ in range(2)]
    summary = {"train": windows(records, 2), "held_out": evaluations(records[-2:])}
    rows = dict(_rows(summary))
    assert list(rows) == [
        "reward, first (steps 1-2)",
        "reward, best (steps 2-3)",
        "reward, last (steps 3-4)",
        "held-out reward, first and last (after step 3)",
    ]
    assert rows["reward, best (steps 2-3)"].startswith("0.850 (")
    one = dict(_rows({"train": windows(records[:2], 2)}))
    assert list(one) == ["reward, first and best and last (step 1)"]


def test_the_closing_table_shows_each_envs_windows_with_their_steps_and_its_held_out():
    from trl_env.cli.train_cmd import _rows

    # wordle plays steps 0, 2 and 3 only: its windows name the steps it played
    records = [_rec(0.1 * s, env="guess", step=s) for s in range(4)]
    records += [_rec(0.2, env="wordle", step=s) for s in (0, 2, 3)]
    held = [_rec(0.5, env="wordle", step=4), _rec(0.7, env="wordle", step=4)]
    envs = {
        env: {
            "train": windows([r for r in records if r["env"] == env], 2),
            "held_out": evaluations([r for r in held if r["env"] == env]),
        }
        for env in ("guess", "wordle")
    }
    rows = dict(_rows({"envs": envs}))
    assert list(rows) == [
        "  guess, first window (steps 1-2)",
        "  guess, last window (steps 3-4)",
        "  wordle, first window (steps 1-3)",
        "  wordle, last window (steps 3-4)",
        "  wordle, held-out (after step 4)",
    ]
    assert rows["  guess, first window (steps 1-2)"].startswith("0.050 (")
    assert rows["  wordle, held-out (after step 4)"].startswith("0.600 (")
