"""`trl-env train` on a mixture and with a curriculum, counted from the run's own files.

Group sizes and weights are counted from the episode records of a run that plays exactly one
pass over its dataset, so the counts must equal the weights' shares; a curriculum must move when
its threshold is crossed and keep its stage across ``--resume``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.report.load import read_scalars
from trl_env.testing.modules import load_path
from trl_env.testing.timeouts import scaled

pytestmark = pytest.mark.slow

REPORT_TESTS = Path(__file__).parents[1] / "core" / "tests" / "test_report.py"
QUICK = ["--processor", "qwen3", "--max-new-tokens", "4", "--batch-size", "8"]


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "episodes" / "rank0.jsonl").open()]


def test_a_mixed_run_keeps_groups_weights_and_each_env_in_its_logs(tmp_path):
    config = tmp_path / "mix.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "envs": [
                    {"env": "guess", "weight": 1, "options": {"high": 20}, "max_turns": 2},
                    {"env": "wordle", "weight": 2, "max_turns": 2},
                    {
                        "env": "sokoban",
                        "name": "sokoban-small",
                        "weight": 1,
                        "options": {"width": 5, "height": 5, "boxes": 1},
                        "max_turns": 3,
                    },
                ],
                "train_seeds": 16,
            }
        )
    )
    out = tmp_path / "run"
    # 16 rows (4 guess, 8 wordle, 4 sokoban-small) of 2 groups per step: 8 steps are one pass.
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--config",
            str(config),
            *QUICK,
            "--max-steps",
            "8",
            "--eval-every",
            "8",
            "--eval-seeds",
            "2",
            "--output-dir",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    train = [r for r in records(out) if r["split"] == "train"]
    assert len(train) == 8 * 8
    groups = [train[i : i + 4] for i in range(0, len(train), 4)]
    for group in groups:
        assert len({(r["step"], r["env"], r["seed"]) for r in group}) == 1, group
    assert Counter(g[0]["env"] for g in groups) == {"guess": 4, "wordle": 8, "sokoban-small": 4}
    assert len({(g[0]["env"], g[0]["seed"]) for g in groups}) == 16  # every row once
    for r in train:
        assert r["status"] != "error", r["error"]
        assert r["turns"] <= {"guess": 2, "wordle": 2, "sokoban-small": 3}[r["env"]]
        assert isinstance(r["success"], bool)
    assert all(
        "between 1 and 20" in r["messages"][1]["content"] for r in train if r["env"] == "guess"
    )

    # every env has its own curves in TensorBoard, and the step lines name them
    tags = read_scalars(out / "runs")
    for label in ("guess", "wordle", "sokoban-small"):
        for name in ("env_reward", "success", "turns", "status_done", "sampled_tokens"):
            assert f"train/rollout/{label}/{name}" in tags, (label, name, sorted(tags))
        steps = {int(s) for s, _ in tags[f"train/rollout/{label}/env_reward"]}
        played = {r["step"] + 1 for r in train if r["env"] == label}  # logged after the step
        assert steps == played
        for step, value in tags[f"train/rollout/{label}/env_reward"]:
            mine = [r["reward"] for r in train if r["env"] == label and r["step"] + 1 == step]
            assert value == pytest.approx(sum(mine) / len(mine), rel=1e-5)
    lines = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    held = [line for line in lines if "held-out reward" in line]
    assert len(held) == 1 and held[0].startswith("step 8/8")  # --eval-every 8
    assert len(lines) == 8 + 1 and any("wordle " in line for line in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == "guess+wordle+sokoban-small"
    assert set(summary["envs"]) == {"guess", "wordle", "sokoban-small"}
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert [e["weight"] for e in saved["envs"]] == [1, 2, 1]
    # one evaluation (--eval-every 8 of 8 steps): no change to pair it with
    assert summary["held_out"]["first"]["step"] == 8 and summary["held_out_change"] is None
    same_figures_in_compare_view_and_summary(out, tmp_path / "view.html", summary)


def same_figures_in_compare_view_and_summary(out: Path, html: Path, summary: dict) -> None:
    """compare's own figures of each env are view's and summary.json's, to the printed digit."""
    compared = {}
    for held_out in (False, True):
        result = CliRunner().invoke(
            cli, ["compare", str(out), str(out), "--json", *(["--held-out"] * held_out)]
        )
        assert result.exit_code == 0, result.output
        compared[held_out] = {g["env"]: g for g in json.loads(result.output)["groups"]}
    result = CliRunner().invoke(cli, ["view", str(out), "-o", str(html)])
    assert result.exit_code == 0, result.output
    page = load_path(REPORT_TESTS, "trl_env_mixture_report_tables").Tables(html.read_text())
    train_table, held_table = [
        {row[0]: row for row in t[1:]} for t in page.tables if t and t[0] and t[0][0] == "env"
    ][:2]
    for label in ("guess", "wordle", "sokoban-small"):
        for held_out, table in ((False, train_table), (True, held_table)):
            group = compared[held_out][label]
            assert group["a"] == group["b"]  # a run compared with itself
            fig = group["a"]
            # view's row: env, episodes, mean reward, 95% interval, ...
            assert table[label][1:4] == [
                str(fig["episodes"]),
                f"{fig['reward']:.4g}",
                f"[{fig['reward_low']:.4g}, {fig['reward_high']:.4g}]",
            ], (label, held_out)
        last = summary["envs"][label]["held_out"]["last"]
        assert last["step"] == 8
        fig = compared[True][label]["a"]
        for key in ("episodes", "reward", "reward_low", "reward_high", "success", "turns"):
            assert last[key] == pytest.approx(fig[key], rel=1e-12), (label, key)


def guess_curriculum(path: Path, window: int, train_seeds: int, **curriculum: Any) -> Path:
    """A config file of guess alone (one turn a game) over three ranges with threshold 0: the
    window's mean always reaches it, so a stage ends as soon as its window is full."""
    stages = [{"high": 10}, {"high": 20}, {"high": 30}]
    entry = {
        "env": "guess",
        "options": {"max_turns": 1},
        "curriculum": {"stages": stages, **curriculum, "threshold": 0.0, "window": window},
    }
    path.write_text(yaml.safe_dump({"envs": [entry], "train_seeds": train_seeds}))
    return path


def test_a_curriculum_moves_at_its_threshold_and_resumes_where_it_was(tmp_path):
    # each env moves as soon as 16 episodes of its stage have been played (two steps)
    config = guess_curriculum(tmp_path / "curriculum.yaml", 16, 64, by="reward")
    out = tmp_path / "run"
    runner = CliRunner()
    args = ["train", "--config", str(config), *QUICK, "--save-steps", "2", "--output-dir", str(out)]
    first = runner.invoke(cli, [*args, "--max-steps", "3"])
    assert first.exit_code == 0, first.output
    # a by-reward curriculum cannot be replayed from the step: it has to come from the checkpoint
    resumed = runner.invoke(
        cli, ["train", "--output-dir", str(out), "--resume", "--max-steps", "6", "--json"]
    )
    assert resumed.exit_code == 0, resumed.output
    # the first run ended at step 3 with a saved checkpoint: stage 1, with 8 rewards in its window
    assert json.loads(resumed.stdout)["resumed_from"].endswith("checkpoint-3")
    train = [r for r in records(out) if r["split"] == "train"]
    # steps 0-2 of the first run, then 3-5 from checkpoint-3
    by_step = {}
    for r in train:
        by_step.setdefault(r["step"], set()).add(r["stage"])
    assert by_step[0] == {0} and by_step[1] == {0}
    assert by_step[2] == {1} and by_step[3] == {1}  # the resumed run went on at stage 1...
    # ...and with its window: 8 more rewards filled it, so stage 2 began at step 4, not 5
    assert by_step[4] == {2} and by_step[5] == {2}
    for r in train:
        high = (10, 20, 30)[r["stage"]]
        assert r["stage_options"] == {"high": high}
        assert f"between 1 and {high}" in r["messages"][1]["content"]
    stages = read_scalars(out / "runs")["train/rollout/guess/stage"]
    assert [v for _, v in sorted(stages)][-1] == 2.0
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    saved = state["stateful_callbacks"]["CurriculumState"]["attributes"]["saved"]
    assert saved["stages"] == {"guess": 2}
    assert [(h["step"], h["stage"]) for h in saved["history"]] == [(1, 1), (3, 2)]


@pytest.mark.parametrize(
    ("args", "config", "words"),
    [
        (["--env", "guess", "--env", "guess"], None, "has 'guess' twice"),
        (["--env", "guess", "--env", "wordle:x"], None, "NAME or NAME:WEIGHT"),
        (["--env", "guess", "--env", "wordle", "--env-arg", "high=5"], None, "LABEL.KEY=VALUE"),
        (["--env", "guess", "--env", "wordle", "--env-arg", "sokoban.x=5"], None, "guess, wordle"),
        ([], {"envs": [{"env": "guess", "wieght": 2}]}, "Did you mean 'weight'"),
        ([], {"envs": [{"env": "guess", "weight": 0}]}, "must be a positive"),
        ([], {"envs": "guess"}, "must be a list of envs"),
        (
            [],
            {"envs": [{"env": "guess", "curriculum": {"stages": [{"high": 5}], "by": "step"}}]},
            "at least two stages",
        ),
        (
            [],
            {"envs": [{"env": "guess", "curriculum": {"stages": [{"high": 5}, {}], "by": "x"}}]},
            "choose 'step' or 'reward'",
        ),
        ([], {"env": "wordle", "envs": ["guess", "sokoban"]}, "give one of them"),
        (["--env", "guess", "--eval-every", "-1"], None, "eval_every is -1"),
    ],
)
def test_bad_mixtures_get_one_sentence(tmp_path, args, config, words):
    if config is not None:
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(config))
        args = [*args, "--config", str(path)]
    result = CliRunner().invoke(
        cli, ["train", *args, "--processor", "qwen3", "--output-dir", str(tmp_path / "out")]
    )
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output


def test_eval_of_a_mixture_summarises_each_env_and_weights_the_mean(tmp_path):
    out = tmp_path / "eval.jsonl"
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            *("--env", "guess", "--env", "wordle:3", "--env-arg", "guess.high=20"),
            *("--processor", "qwen3", "--episodes", "3", "--max-new-tokens", "4"),
            *("--out", str(out), "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rows = [json.loads(line) for line in out.open()]
    assert Counter(r["env"] for r in rows) == {"guess": 3, "wordle": 3}
    assert all(
        "between 1 and 20" in r["messages"][1]["content"] for r in rows if r["env"] == "guess"
    )
    means = {}
    for label in ("guess", "wordle"):
        mine = [r for r in rows if r["env"] == label]
        means[label] = sum(r["reward"] for r in mine) / len(mine)
        env = summary["envs"][label]
        assert env["episodes"] == 3 and env["reward"] == pytest.approx(means[label])
        assert env["success"] == sum(r["success"] for r in mine) / 3
    assert summary["weighted_reward"] == pytest.approx((means["guess"] + 3 * means["wordle"]) / 4)
    assert rows[0]["run"]["envs"] == [
        {"env": "guess", "weight": 1.0, "options": {"high": 20}},
        {"env": "wordle", "weight": 3.0, "options": {}},
    ]


def test_two_processes_move_a_curriculum_together_on_all_their_rewards(tmp_path):
    import os
    import subprocess
    import sys

    # each rank plays 4 episodes a step: the window of 8 fills after the first step only if
    # the ranks pool their rewards
    config = guess_curriculum(tmp_path / "ddp.yaml", 8, 32)
    out = tmp_path / "ddp"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            *("--multi_gpu", "--num_processes", "2", "--num_machines", "1"),
            *("--mixed_precision", "no", "--dynamo_backend", "no"),
            *("-m", "trl_env", "train", "--config", str(config)),
            *("--processor", "qwen3", "--max-new-tokens", "4", "--batch-size", "4"),
            *("--num-generations", "2", "--max-steps", "3", "--no-check"),
            *("--output-dir", str(out), "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=scaled(600),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        played = [json.loads(line) for line in (out / "episodes" / f"rank{rank}.jsonl").open()]
        assert len(played) == 12
        assert {(r["step"], r["stage"]) for r in played} == {(0, 0), (1, 1), (2, 2)}
    assert json.loads(result.stdout)["envs"]["guess"]["stage"] == 2  # printed once, by rank 0


def test_a_curriculum_stage_whose_first_prompt_cannot_fit_is_refused_before_training(tmp_path):
    config = tmp_path / "big.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "envs": [
                    {
                        "env": "sokoban",
                        "curriculum": {
                            "stages": [
                                {"width": 5, "height": 5, "boxes": 1},
                                {"width": 20, "height": 20, "boxes": 10},
                            ],
                            "by": "step",
                            "steps": [10],
                        },
                    }
                ],
                "rollout": {"max_episode_tokens": 500},  # stage 0 takes ~410, stage 1 ~580
            }
        )
    )
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--config",
            str(config),
            "--processor",
            "qwen3",
            "--output-dir",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "The first prompt of sokoban at curriculum stage 1 (" in result.output
    assert "'boxes': 10" in result.output and "max_episode_tokens) is 500" in result.output
    assert not (tmp_path / "o" / "episodes").exists()


def test_eval_takes_a_training_config_and_plays_each_curriculum_stage(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "envs": [
                    {
                        "env": "guess",
                        "options": {"max_turns": 2},
                        "curriculum": {
                            "stages": [{"high": 10}, {"high": 30}],
                            "by": "step",
                            "steps": [5],
                        },
                    },
                    {
                        "env": "wordle",
                        "weight": 2,
                        "max_turns": 1,
                        "processor_args": {"thinking": False},
                    },
                ],
                "processor": "qwen3",
                "rollout": {"max_new_tokens": 4},
            }
        )
    )
    out = tmp_path / "eval.jsonl"
    args = ["eval", "--config", str(config), "--episodes", "2", "--out", str(out), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rows = [json.loads(line) for line in out.open()]
    assert Counter((r["env"], r["stage"]) for r in rows) == {
        ("guess", 0): 2,
        ("guess", 1): 2,
        ("wordle", None): 2,
    }
    for r in rows:
        assert r["sampled_tokens"] <= r["turns"] * 4  # the config's max_new_tokens
        if r["env"] == "guess":
            high = (10, 30)[r["stage"]]
            assert r["stage_options"] == {"high": high}
            assert f"between 1 and {high}" in r["messages"][1]["content"]
        else:
            assert r["turns"] == 1  # wordle's own max_turns
            assert r["text"].count("<think>\n\n</think>") == 1  # its own processor options
    guess = summary["envs"]["guess"]
    for stage in ("0", "1"):
        mine = [r["reward"] for r in rows if r["env"] == "guess" and r["stage"] == int(stage)]
        assert guess["stages"][stage]["reward"] == pytest.approx(sum(mine) / len(mine))
    assert summary["envs"]["wordle"]["weight"] == 2
