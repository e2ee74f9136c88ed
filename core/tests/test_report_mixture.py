"""`trl-env view` and `trl-env compare` on a mixed run: per env, per curriculum stage, held-out.

The run directory is built here the way `trl-env train` leaves one for a mixture of three envs
(records are ``Episode.to_dict()`` minus the token arrays, plus ``step``, ``env`` and ``split``);
every figure the page shows is recomputed below with ``statistics`` and a printed t table.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.episode import Episode, Status
from trl_env.report.load import load, normalize

# the page parser of the view tests, loaded by path (tests are not a package)
_spec = importlib.util.spec_from_file_location(
    "report_records", Path(__file__).with_name("test_report.py")
)
assert _spec is not None and _spec.loader is not None
report_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_tests)
Tables, view = report_tests.Tables, report_tests.view

T_975 = {23: 2.0687, 31: 2.0395, 39: 2.0227}  # printed table, two-sided 95%
GROUP = 4  # episodes per GRPO group: one env, one seed
# groups over the run: guess 8, sokoban-large 10, wordle 6 (3 a step for 8 steps)
GROUPS = {"guess": 8, "sokoban-large": 10, "wordle": 6}
STEPS = 8
SIZES = {0: 5, 1: 6, 2: 7}  # sokoban-large's curriculum: board size per stage
HEAVY = ("prompt_ids", "completion_ids", "logprobs", "env_mask")


def sokoban_stage(step: int) -> int:
    return 0 if step <= 3 else 1 if step <= 6 else 2


def play(env: str, seed: str, step: int, rng: random.Random) -> dict:
    """One episode record of ``env`` as the training episode log writes it."""
    stage = sokoban_stage(step) if env == "sokoban-large" else None
    turns = rng.randint(1, 5)
    sampled, inserted = rng.randint(5, 40), rng.randint(0, 30)
    reward = round(min(1.0, max(0.0, step / STEPS + rng.gauss(0, 0.3))), 3)
    status = rng.choice([Status.DONE, Status.DONE, Status.DONE, Status.MAX_TURNS, Status.ERROR])
    ep = Episode(
        seed=seed,
        env=env,
        stage=stage,
        stage_options={"size": SIZES[stage]} if stage is not None else {},
        completion_ids=list(range(sampled + inserted)),
        env_mask=[1] * sampled + [0] * inserted,
        reward=reward,
        # guess does not say whether an episode succeeded; the others do
        success=None if env == "guess" else reward >= 0.5,
        status=status,
        turns=turns,
        error="env raised ValueError" if status is Status.ERROR else "",
        text=f"<|im_start|>user\n{env} {seed}<|im_end|>\n<|im_start|>assistant\nmove<|im_end|>",
    )
    rec = {"step": step, **{k: v for k, v in ep.to_dict().items() if k not in HEAVY}}
    if stage is None:
        del rec["stage_options"]  # may be absent
    return rec


def mixed_run(folder: Path, seed: int = 5) -> tuple[Path, list[dict], list[dict]]:
    """A 3-env training run with a curriculum on one env and held-out evals at steps 4 and 8.

    Returns the directory, its training records and its held-out records.
    """
    rng = random.Random(seed)
    draws = [env for env, n in GROUPS.items() for _ in range(n)]
    rng.shuffle(draws)  # groups drawn by weight: envs interleave over the steps
    train, held_out = [], []
    for step in range(1, STEPS + 1):
        for g, env in enumerate(draws[(step - 1) * 3 : step * 3]):
            seed_text = f"train-{step}-{g}"
            train += [play(env, seed_text, step, rng) for _ in range(GROUP)]
        if step % 4 == 0:  # --eval-every 4: three fixed held-out seeds per env
            for env in GROUPS:
                for k in range(3):
                    rec = play(env, f"heldout-{k}", step, rng)
                    held_out.append({**rec, "split": "eval"})
    run = folder / "run"
    (run / "episodes").mkdir(parents=True)
    rows = train + held_out
    rows.sort(key=lambda r: r["step"])  # held-out episodes are logged after their step's
    for rank in (0, 1):
        mine = [dict(r) for i, r in enumerate(rows) if i % 2 == rank]
        for r in mine:  # rank 0 says split "train", rank 1 leaves it out (the default)
            if rank == 0 and "split" not in r:
                r["split"] = "train"
        (run / "episodes" / f"rank{rank}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in mine), encoding="utf-8"
        )
    per_env = {env: {"reward_end": 0.25 * i, "stage": None} for i, env in enumerate(GROUPS)}
    summary = {"env": "+".join(GROUPS), "steps": STEPS, "envs": per_env}
    (run / "summary.json").write_text(json.dumps(summary))
    envs = [
        {"env": "guess", "name": "", "weight": 8.0, "options": {}, "curriculum": None},
        {
            "env": "sokoban",
            "name": "sokoban-large",
            "weight": 10.0,
            "options": {"boxes": 2},
            "curriculum": {
                "stages": [{"size": size} for size in SIZES.values()],
                "by": "step",
                "steps": [4, 7],  # as sokoban_stage() plays them
            },
        },
        {"env": "wordle", "name": "", "weight": 6.0, "options": {}, "curriculum": None},
    ]
    config = {"model": "tiny", "env": "+".join(GROUPS), "envs": envs, "eval_every": 4}
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return run, train, held_out


def interval(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    half = T_975[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def table(html: str, heading: str) -> dict[str, list[str]]:
    """Rows (first cell -> cells) of the first table after the ``<h2>`` titled ``heading``."""
    part = html.split(f"<h2>{heading}</h2>", 1)[1]
    rows = Tables(part.split("</table>", 1)[0] + "</table>").tables[0]
    return {row[0]: row for row in rows}


def success(records: list[dict]) -> str:
    known = [r["success"] for r in records if r["success"] is not None]
    return f"{100 * sum(known) / len(known):.0f}% ({sum(known)}/{len(known)})"


@pytest.fixture
def run(tmp_path):
    return mixed_run(tmp_path)


def test_per_env_and_per_stage_tables(run):
    path, train, held_out = run
    result = CliRunner().invoke(cli, ["view", str(path)])
    assert result.exit_code == 0, result.output
    html = (path / "report.html").read_text(encoding="utf-8")
    rows = table(html, "Per environment and curriculum stage")
    head = rows["env"]
    assert head[6:] == ["success", "model tokens", "env tokens"]
    for env, groups in GROUPS.items():
        mine = [r for r in train if r["env"] == env]
        assert len(mine) == groups * GROUP
        row = rows[env]
        mean, low, high = interval([r["reward"] for r in mine])
        assert int(row[1]) == len(mine)
        assert float(row[2]) == pytest.approx(mean, rel=1e-3)
        shown = [float(x) for x in row[3].strip("[]").split(",")]
        assert shown == [pytest.approx(low, rel=2e-3), pytest.approx(high, rel=2e-3)]
        for status, n in Counter(r["status"] for r in mine).items():
            assert f"{status} {n} ({100 * n / len(mine):.0f}%)" in row[4]
        assert float(row[5]) == pytest.approx(statistics.fmean(r["turns"] for r in mine), 1e-3)
        assert row[6] == ("n/a" if env == "guess" else success(mine))
        assert int(row[7]) == sum(r["sampled_tokens"] for r in mine)
        assert int(row[8]) == sum(r["inserted_tokens"] for r in mine)
    # curriculum rows under sokoban-large only, one per stage with the options it set
    staged = [k for k in rows if " · " in k]
    assert staged == [f"sokoban-large · stage {s} (size={SIZES[s]})" for s in range(3)]
    assert list(rows).index(staged[0]) == list(rows).index("sokoban-large") + 1
    for s in range(3):
        mine = [r for r in train if r["env"] == "sokoban-large" and r["stage"] == s]
        row = rows[staged[s]]
        assert int(row[1]) == len(mine) > 0
        assert float(row[2]) == pytest.approx(statistics.fmean(r["reward"] for r in mine), 1e-3)
        assert row[6] == success(mine)
    assert html.count('<tr class="sub">') >= 3
    # held-out episodes never enter the training figures, and have their own table
    assert sum(int(rows[env][1]) for env in GROUPS) == len(train)
    held = table(html, "Held-out evaluation")
    for env in GROUPS:
        last = [r for r in held_out if r["env"] == env and r["step"] == STEPS]
        assert int(held[env][1]) == len(last) == 3
        mean = statistics.fmean(r["reward"] for r in last)
        assert float(held[env][2]) == pytest.approx(mean, rel=1e-3)
    assert f"at step {STEPS} (the last of 2 evaluations)" in html
    summary = report_tests.Tables(html).table_with("key")
    assert summary["envs wordle"][1] == "reward_end=0.5 stage=null"
    # the saved mixture: a metadata row per env with what it set
    meta = report_tests.Tables(html).table_with("")
    assert meta["env guess"][1] == "weight=8.0"
    soko = meta["env sokoban-large"][1]
    stages = json.dumps([{"size": size} for size in SIZES.values()])
    for part in ("env=sokoban", "weight=10.0", '{"boxes": 2}', f'"stages": {stages}'):
        assert part in soko


def _titles(svg: str) -> list[str]:
    return [part.split("</title>", 1)[0] for part in svg.split("<title>")[1:]]


def _chart(html: str, title: str) -> str:
    return html.split(f'aria-label="{title}"', 1)[1].split("</svg>", 1)[0]


def test_reward_per_step_has_a_line_per_env_and_held_out_dashed(run):
    path, train, held_out = run
    assert CliRunner().invoke(cli, ["view", str(path)]).exit_code == 0
    html = (path / "report.html").read_text(encoding="utf-8")
    chart = _chart(html, "mean reward per training step; dashed: held-out")
    legend = chart.split('<g class="legend-box">', 1)[1].split("</g>", 1)[0]
    names = [name for env in GROUPS for name in (env, f"{env} (held-out)")]
    assert [t.split(">")[-1] for t in legend.split("</text>")[:-1]] == names
    assert legend.count("stroke-dasharray") == 3  # the held-out entries
    dots = [t.rsplit(": ", 1) for t in _titles(chart) if ", " in t]
    for env in GROUPS:
        # a training episode is shown at the step it trained in (its logged step + 1), as the
        # CLI and TensorBoard count; a held-out one after the steps done before it
        for name, recs, shift in ((env, train, 1), (f"{env} (held-out)", held_out, 0)):
            steps = sorted({r["step"] for r in recs if r["env"] == env})
            want = [
                (
                    s + shift,
                    statistics.fmean(
                        r["reward"] for r in recs if r["env"] == env and r["step"] == s
                    ),
                )
                for s in steps
            ]
            got = [tuple(map(float, xy.split(", "))) for n, xy in dots if n == name]
            assert got == [(s, pytest.approx(m, rel=1e-3)) for s, m in want], name
    # each held-out line is dashed and coloured as its env's training line
    lines = {
        name: (stroke, bool(dash))
        for stroke, dash, name in re.findall(
            r'<polyline class="line" stroke="([^"]+)"( stroke-dasharray="[^"]+")? '
            r'points="[^"]*"><title>([^<]+)</title>',
            chart,
        )
    }
    assert len(lines) == 6
    for env in GROUPS:
        assert lines[f"{env} (held-out)"] == (lines[env][0], True) and not lines[env][1]
    stage = _chart(html, "curriculum stage per step (highest played)")
    got = [t.rsplit(": ", 1)[1] for t in _titles(stage) if t.startswith("sokoban-large: ")]
    staged = sorted({r["step"] for r in train if r["env"] == "sokoban-large"})
    assert got == [f"{s + 1:g}, {sokoban_stage(s)}" for s in staged]


def test_per_env_tensorboard_tags_are_one_chart_per_metric(run):
    path, _, _ = run
    from torch.utils.tensorboard import SummaryWriter  # the writer TRL's trainer logs through

    writer = SummaryWriter(str(path / "runs" / "Nov24_20-00-00_host"))
    metrics = ("status_done", "turns", "success", "env_reward", "stage")  # logged in this order
    for step in range(1, STEPS + 1):
        writer.add_scalar("train/kl", step / 1000, step)
        for split in ("train", "eval") if step % 4 == 0 else ("train",):
            writer.add_scalar(f"{split}/rollout/env_reward", step / STEPS, step)
            writer.add_scalar(f"{split}/rollout/status_done", 0.75, step)
            writer.add_scalar(f"{split}/rollout/status_error", 0.25, step)
            for i, env in enumerate(GROUPS):
                for metric in metrics if split == "train" else ("env_reward",):
                    value = i + step / (10 if split == "train" else 100)
                    writer.add_scalar(f"{split}/rollout/{env}/{metric}", value, step)
    writer.close()
    assert CliRunner().invoke(cli, ["view", str(path)]).exit_code == 0
    html = (path / "report.html").read_text(encoding="utf-8")
    # 3 envs x 5 metrics + 3 held-out rewards: a chart per metric, not one per tag
    assert "TensorBoard scalars per env (18 tags in 5 charts, a line per env)" in html
    # train/kl alone; train/ and eval/rollout/env_reward share one chart, the statuses one
    assert "TensorBoard scalars (7 tags in 3 charts)" in html
    statuses = _chart(html, "rollout/status_&lt;status&gt; (held-out dashed)")
    legend = statuses.split('<g class="legend-box">', 1)[1].split("</g>", 1)[0]
    assert re.findall(r">([^<>]+)</text>", legend) == [
        "done",
        "done (held-out)",
        "error",
        "error (held-out)",
    ]
    both = _chart(html, "rollout/env_reward (train, held-out dashed)")
    assert [t for t in _titles(both) if t.startswith("held-out: ")] == [
        f"held-out: {s}, {s / STEPS:.4g}" for s in (4, 8)
    ]
    chart = _chart(html, "rollout/&lt;env&gt;/env_reward (held-out dashed)")
    for i, env in enumerate(GROUPS):
        dots = [t for t in _titles(chart) if t.startswith(f"{env}: ")]
        assert dots == [f"{env}: {s}, {i + s / 10:.4g}" for s in range(1, STEPS + 1)]
        held = [t for t in _titles(chart) if t.startswith(f"{env} (held-out): ")]
        assert held == [f"{env} (held-out): {s}, {i + s / 100:.4g}" for s in (4, 8)]
    titles = re.findall(r'aria-label="rollout/&lt;env&gt;/(\w+)', html)
    assert titles == ["env_reward", "success", "turns", "stage", "status_done"]


def test_episode_list_holds_held_out_episodes_tagged(run):
    path, train, held_out = run
    source = load(path, scalars=False)
    assert len(source.records) == len(train) and len(source.held_out) == len(held_out)
    assert {r["split"] for r in source.records} == {"train"}
    page = view(path, path / "r.html")
    data = json.loads(page.data)
    assert len(data["episodes"]) == len(train) + len(held_out)
    assert data["splits"] == ["train", "eval"]
    items = [i for i in data["episodes"] if i["sp"] == "eval"]
    assert sorted((i["e"], i["seed"], i["k"]) for i in items) == sorted(
        (r["env"], r["seed"], r["step"]) for r in held_out
    )
    soko = [i for i in data["episodes"] if i["e"] == "sokoban-large" and i["sp"] == "train"]
    assert [i["g"] for i in soko] == [sokoban_stage(i["k"] - 1) for i in soko]
    assert {i["ok"] for i in data["episodes"] if i["e"] == "guess"} == {None}
    assert sorted(data["envs"]) == sorted(GROUPS)


@pytest.mark.parametrize(
    ("fields", "stage", "success", "split"),
    [
        ({}, None, None, "train"),  # a record written before mixtures
        ({"stage": 2, "success": True, "split": "eval"}, 2, True, "eval"),
        ({"stage": True, "success": 1, "split": "EVAL"}, None, None, "train"),
        ({"stage": -1, "success": "yes", "split": None}, None, None, "train"),
        ({"stage": 1.0, "success": False, "split": "train"}, None, False, "train"),
    ],
)
def test_normalize_defaults_and_odd_values(fields, stage, success, split):
    rec = normalize({"seed": "s", "reward": 0.5, **fields}, 0)
    assert (rec["stage"], rec["success"], rec["split"]) == (stage, success, split)
    assert rec["stage_options"] == {}


def test_old_run_without_new_fields_has_no_new_columns(tmp_path):
    run = tmp_path / "old"
    (run / "episodes").mkdir(parents=True)
    old = [
        {"step": s, "seed": f"t-{s}-{k}", "reward": k / 4, "status": "done", "turns": 2}
        for s in (1, 2)
        for k in range(4)
    ]
    (run / "episodes" / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    (run / "summary.json").write_text(json.dumps({"env": "guess"}))
    assert CliRunner().invoke(cli, ["view", str(run)]).exit_code == 0
    html = (run / "report.html").read_text(encoding="utf-8")
    rows = table(html, "Per environment")
    assert rows["env"] == [
        "env",
        "episodes",
        "mean reward",
        "95% interval",
        "statuses",
        "mean turns",
    ]
    assert int(rows["guess"][1]) == 8
    assert "Held-out evaluation" not in html and "curriculum stage" not in html
    assert "mean reward per training step (band: 95% interval)" in html


def test_only_held_out_episodes_is_one_sentence(tmp_path):
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    rec = {"step": 4, "seed": "h", "reward": 1.0, "split": "eval", "env": "guess"}
    (run / "episodes" / "rank0.jsonl").write_text(json.dumps(rec) + "\n")
    result = CliRunner().invoke(cli, ["view", str(run)])
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0
    assert "only held-out episodes" in result.output
