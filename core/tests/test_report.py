"""`trl-env view`: the HTML report of an eval file or a training run directory.

Records are written the way `trl-env eval --out` writes them (``Episode(...).to_dict()`` plus
``run`` and ``env``); figures on the page are checked against ``statistics`` and a printed t
table, not against the report's own code.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.episode import Episode, Status

T_975 = {19: 2.0930, 29: 2.0452, 39: 2.0227}  # printed table, two-sided 95%

PROMPT = (
    "<|im_start|>system\nGuess the number from 1 to 100. Reply GUESS n.<|im_end|>\n"
    "<|im_start|>user\nA new game.<|im_end|>\n<|im_start|>assistant\n"
)
RUN = {
    "model": "tiny",
    "processor": "qwen3",
    "processor_args": {"thinking": True},
    "env_args": {"size": 7},
    "sampling": {"temperature": 0.7, "top_p": 0.95, "max_new_tokens": 64},
    "limits": {"max_turns": 6, "max_new_tokens": 64},
    "backend": "transformers",
    "seed": 0,
    "trl_env_version": "0.2.0",
    "time": "2026-11-24T17:00:00+00:00",
}


def episode(
    i: int,
    *,
    env: str = "guess",
    reward: float = 0.5,
    turns: int = 2,
    status: Status = Status.DONE,
    think: bool = True,
) -> dict:
    """One realistic eval record: a Qwen3 chat with reasoning, env replies and a run stamp."""
    segments = [(PROMPT, "prompt")]
    for t in range(turns):
        reasoning = f"<think>\nHalve the range, turn {t}.\n</think>\n\n" if think else ""
        segments.append((f"{reasoning}GUESS {50 + t}<|im_end|>", "model"))
        reply = f"Lower than {50 + t} & <b>not</b> </script> {env}-{i}"
        segments.append((f"\n<|im_start|>user\n{reply}<|im_end|>\n<|im_start|>assistant\n", "env"))
    ep = Episode(
        seed=f"eval-{i}",
        prompt_ids=list(range(40)),
        completion_ids=list(range(30 * turns)),
        env_mask=([1] * 18 + [0] * 12) * turns,
        logprobs=[-0.7] * 30 * turns,
        reward=reward,
        status=status,
        turns=turns,
        error="env raised ValueError" if status is Status.ERROR else "",
        text="".join(text for text, _ in segments),
        segments=segments,
        env_seconds=0.01 * turns,
    )
    return {**ep.to_dict(), "env": env, "run": {**RUN, "env": env}}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts, and the embedded episode data."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.data = ""
        self._cell: list[str] | None = None
        self._in_data = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "script" and ("id", "episodes-data") in attrs:
            self._in_data = True

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "script":
            self._in_data = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_data:
            self.data += data

    def table_with(self, header: str) -> dict[str, list[str]]:
        """The table whose first header cell is ``header``, keyed by first column."""
        for table in self.tables:
            if table and table[0] and table[0][0] == header:
                return {row[0]: row for row in table[1:]}
        raise AssertionError(f"no table headed {header!r}")


def view(path: Path, out: Path) -> Tables:
    result = CliRunner().invoke(cli, ["view", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output
    return Tables(out.read_text(encoding="utf-8"))


def interval(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    half = T_975[len(values) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def test_eval_report_summary_per_env_and_every_episode(tmp_path):
    rng = random.Random(7)
    records = [
        episode(
            i,
            env=env,
            reward=round(rng.random(), 3),
            turns=1 + i % 4,
            status=Status.ERROR if i % 7 == 3 else Status.DONE,
            think=i % 2 == 0,
        )
        for i, env in enumerate(["guess"] * 30 + ["wordle"] * 20)
    ]
    rng.shuffle(records)
    page = view(write_jsonl(tmp_path / "eval.jsonl", records), tmp_path / "r.html")

    per_env = page.table_with("env")
    for env, n in (("guess", 30), ("wordle", 20)):
        rewards = [r["reward"] for r in records if r["env"] == env]
        mean, low, high = interval(rewards)
        row = per_env[env]
        assert int(row[1]) == n
        assert float(row[2]) == pytest.approx(mean, rel=1e-3)
        shown_low, shown_high = (float(x) for x in row[3].strip("[]").split(","))
        assert shown_low == pytest.approx(low, rel=2e-3)
        assert shown_high == pytest.approx(high, rel=2e-3)
        errors = sum(r["status"] == "error" and r["env"] == env for r in records)
        assert f"error {errors} " in row[4]

    run = page.table_with("")
    assert run["model"][1] == "tiny" and "thinking=true" in run["processor"][1]
    assert "temperature=0.7" in run["sampling"][1] and "size=7" in run["env"][1]
    assert run["limits"][1] == "max_turns=6 max_new_tokens=64"
    assert run["backend"][1] == "transformers"

    data = json.loads(page.data)
    assert len(data["episodes"]) == len(records)  # every episode, not a sample
    for item, rec in zip(data["episodes"], records, strict=True):
        assert item["seed"] == rec["seed"] and item["r"] == rec["reward"]
        assert "".join(text for text, _ in item["seg"]) == rec["text"]
        assert {who for _, who in item["seg"]} == {"prompt", "model", "env"}
    assert sorted(data["statuses"]) == ["done", "error"]
    assert sorted(data["envs"]) == ["guess", "wordle"]


def test_page_is_self_contained_and_script_safe(tmp_path):
    out = tmp_path / "r.html"
    view(write_jsonl(tmp_path / "e.jsonl", [episode(i) for i in range(3)]), out)
    page = out.read_text(encoding="utf-8")
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "<link" not in page and "src=" not in page
    # env text with </script> cannot close the data element early
    data_block = page.split("id='episodes-data'>", 1)[1].split("</script>", 1)[0]
    assert "</script>" in json.loads(data_block)["episodes"][0]["seg"][2][0]


def test_old_format_records_still_render(tmp_path):
    old = [
        {"seed": "s0", "reward": 1.0, "status": "done", "turns": 2, "error": "", "text": "a"},
        {"seed": "s1", "reward": None, "status": "error", "error": "boom", "text": "b"},
        {"seed": "s2", "reward": float("nan"), "turns": "x", "text": "c"},
        {
            "seed": "s3",
            "reward": 0.0,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        },
    ]
    page = view(write_jsonl(tmp_path / "old.jsonl", old), tmp_path / "old.html")
    items = json.loads(page.data)["episodes"]
    assert [i.get("txt") for i in items[:3]] == ["a", "b", "c"]
    assert items[3]["msg"][1] == {"role": "assistant", "content": "yo"}
    assert [i["r"] for i in items] == [1.0, None, None, 0.0]  # NaN is no reward
    assert sorted(json.loads(page.data)["statuses"]) == ["done", "error", "unknown"]


def test_training_run_directory(tmp_path):
    """A run directory as `trl-env train` leaves it: rank files, summary, config, TensorBoard."""
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    rng = random.Random(3)
    steps = {
        step: [round(min(1, max(0, step / 10 + rng.gauss(0, 0.2))), 3) for _ in range(8)]
        for step in range(1, 7)
    }
    for rank in (0, 1):  # the training episode log keeps a subset of the eval fields
        rows = [
            {
                "step": s - 1,  # the steps done when step s played its episodes
                "seed": f"train-{s}-{k // 2}",
                "reward": r,
                "status": "done",
                "turns": 1 + k % 3,
                "error": "",
                "text": PROMPT + "GUESS 50<|im_end|>",
            }
            for s, rewards in steps.items()
            for k, r in enumerate(rewards)
            if k % 2 == rank
        ]
        write_jsonl(run / "episodes" / f"rank{rank}.jsonl", rows)
    (run / "summary.json").write_text(json.dumps({"env": "guess", "steps": 6, "reward_end": 0.6}))
    (run / "config.yaml").write_text(
        "env: guess\nprocessor: qwen3\nmodel: tiny\ntemperature: 1.0\n"
    )
    from torch.utils.tensorboard import SummaryWriter  # the writer TRL's trainer logs through

    writer = SummaryWriter(str(run / "runs" / "Nov24_17-00-00_host"))
    for step, rewards in steps.items():
        writer.add_scalar("train/reward", statistics.fmean(rewards), step)
        writer.add_scalar("train/kl", 1e-4 * step, step)
    writer.close()

    result = CliRunner().invoke(cli, ["view", str(run)])
    assert result.exit_code == 0, result.output
    html = (run / "report.html").read_text(encoding="utf-8")
    page = Tables(html)
    # one dot per step on the reward-per-step chart, at that step's mean over both ranks, at the
    # step TensorBoard logs it at (before: one step earlier, the episodes' logged step)
    chart = html.split("mean reward per training step", 1)[1].split("</svg>", 1)[0]
    dots = [t.split(": ", 1)[1] for t in _titles(chart) if t.startswith("reward: ")]
    assert [(int(x), float(y)) for x, y in (d.split(", ") for d in dots)] == [
        (s, pytest.approx(statistics.fmean(r), rel=1e-3)) for s, r in steps.items()
    ]
    assert "train/reward" in html and "train/kl" in html  # TensorBoard scalars are plotted
    assert page.table_with("key")["reward_end"][1] == "0.6"
    assert "temperature: 1.0" in html  # config.yaml is shown
    run_meta = page.table_with("")
    assert run_meta["model"][1] == "tiny" and run_meta["env"][1] == "guess"
    last = page.table_with("step")["6"]
    assert float(last[2]) == pytest.approx(statistics.fmean(steps[6]), rel=1e-3)
    assert len(json.loads(page.data)["episodes"]) == 6 * 8
    assert int(page.table_with("env")["guess"][1]) == 6 * 8  # the env named by summary.json


def _titles(svg: str) -> list[str]:
    return [part.split("</title>", 1)[0] for part in svg.split("<title>")[1:]]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p.write_text("{not json\n"), "eval.jsonl:1 is not a JSON record"),
        (lambda p: p.write_text('{"seed": 1}\n[1, 2]\n'), "eval.jsonl:2 is a JSON list"),
        (lambda p: p.write_text("\n\n"), "No episode records found"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00binary"), "not a UTF-8 text file"),
        (lambda p: p.mkdir(), "without episodes/rank*.jsonl"),
        (lambda p: None, "does not exist"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path, setup, message):
    path = tmp_path / "eval.jsonl"
    setup(path)
    result = CliRunner().invoke(cli, ["view", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and result.output.startswith("Error: ")
    assert message in result.output
    assert not (tmp_path / "eval.html").exists()


def test_view_imports_no_training_stack(tmp_path):
    src = write_jsonl(tmp_path / "e.jsonl", [episode(i) for i in range(4)])
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "trl_env", "view", str(src)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "trl_env" in modules
    assert not modules & {"torch", "transformers", "trl"}


def test_appended_runs_get_their_own_rows(tmp_path):
    first = [episode(i, reward=0.2) for i in range(4)]
    second = [
        {**episode(i, reward=0.8), "run": {**RUN, "env": "guess", "model": "tuned"}}
        for i in range(6)
    ]
    page = view(write_jsonl(tmp_path / "both.jsonl", first + second), tmp_path / "both.html")
    per_run = page.table_with("run")
    assert sorted((int(row[1]), float(row[2])) for row in per_run.values()) == [(4, 0.2), (6, 0.8)]
    assert page.table_with("")["model"][1:] == ["tiny", "tuned"]


def test_a_live_run_with_a_half_written_last_line(tmp_path):
    lines = [json.dumps(episode(i)) for i in range(3)]
    path = tmp_path / "live.jsonl"
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40], encoding="utf-8")
    page = view(path, tmp_path / "live.html")
    assert [e["seed"] for e in json.loads(page.data)["episodes"]] == ["eval-0", "eval-1"]
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40] + "\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["view", str(path)])  # a finished line that is broken
    assert result.exit_code == 2 and "live.jsonl:3 is not a JSON record" in result.output


def test_run_directory_without_tensorboard_installed(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    (run / "runs").mkdir()
    write_jsonl(run / "episodes" / "rank0.jsonl", [{**episode(0), "step": 1}])
    for name in [m for m in sys.modules if m.split(".")[0] == "tensorboard"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # what a light install sees
    result = CliRunner().invoke(cli, ["view", str(run)])
    assert result.exit_code == 0, result.output
    assert "tensorboard is not installed" in (run / "report.html").read_text(encoding="utf-8")
