"""`trl-env view`: the HTML report of a run directory or an eval file."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from trl_env.cli import cli


def _record(step, reward, status="done", text="<|im_start|>user\nhi & bye<|im_end|>"):
    return {
        "step": step,
        "seed": f"s{step}",
        "reward": reward,
        "status": status,
        "turns": 2,
        "error": "boom" if status == "error" else "",
        "text": text,
    }


def test_run_directory_report(tmp_path):
    (tmp_path / "episodes").mkdir()
    rows = [
        _record(s, s / 10 + i / 100, "error" if i == 0 else "done")
        for s in range(5)
        for i in range(4)
    ]
    half = len(rows) // 2
    for rank, chunk in enumerate((rows[:half], rows[half:])):
        lines = "\n".join(json.dumps(r) for r in chunk)
        (tmp_path / "episodes" / f"rank{rank}.jsonl").write_text(lines + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 5, "reward_end": 0.41}))
    result = CliRunner().invoke(cli, ["view", str(tmp_path)])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    polylines = re.findall(r'<polyline[^>]*points="([^"]*)"', page)
    assert len(polylines) == 1 + 1 + 2  # reward, turns, and the two statuses that occur
    assert all(len(p.split()) == 5 for p in polylines)  # one point per training step
    assert "hi &amp; bye" in page and "&lt;|im_start|&gt;" in page  # episode text escaped
    assert "reward_end" in page and "error: boom" in page


def test_eval_file_report_and_bad_input(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text("\n".join(json.dumps(_record(0, r / 3)) for r in range(3)) + "\n")
    out = tmp_path / "r.html"
    assert CliRunner().invoke(cli, ["view", str(path), "--out", str(out)]).exit_code == 0
    assert "episode" in out.read_text()
    path.write_text("{not json\n")
    bad = CliRunner().invoke(cli, ["view", str(path)])
    assert bad.exit_code == 2 and "is not a JSON record" in bad.output
