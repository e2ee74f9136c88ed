"""`trl-env view` and `compare` on hostile records: lone surrogates in error messages and seeds,
records nested deeply, and output paths that are their own inputs. Run as the user runs them
(a subprocess, its output piped), so an encoding error on stdout would show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)


def trl_env(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trl_env", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="strict",  # what the command wrote must be valid UTF-8
        timeout=90,
    )


def record(seed: str, reward: float, **kw: Any) -> dict[str, Any]:
    rec = {
        "seed": seed,
        "reward": reward,
        "status": "done",
        "error": "",
        "turns": 1,
        "text": f"the game of {seed}",
        "messages": [
            {"role": "system", "content": "play"},
            {"role": "user", "content": f"start {seed}"},
            {"role": "assistant", "content": "go", "reasoning": ""},
        ],
        "run": {"model": "tiny", "processor": "qwen3", "env": "guess"},
    }
    rec.update(kw)
    return rec


def write(path: Path, records: list[Any]) -> Path:
    # json.dumps writes a lone surrogate as a "\ud800" escape, as trl-env's own records do
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def surrogate_records(offset: float = 0.0) -> list[dict[str, Any]]:
    return [
        record("s0", 1.0 + offset),
        record(
            "s1\udc80",
            0.0,
            status="error",
            error="stepping the environment raised OSError: broken \ud800 pipe",
        ),
        record("s2", 0.5, text="a reply with \udfff in it"),
    ]


def one_sentence(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_view_repairs_lone_surrogates_in_error_messages(tmp_path):
    records = write(tmp_path / "eval.jsonl", surrogate_records())
    result = trl_env("view", str(records), "-o", str(tmp_path / "page.html"))
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "broken \ufffd pipe" in page and "s1\ufffd" in page


def test_compare_prints_runs_whose_records_hold_lone_surrogates(tmp_path):
    a = write(tmp_path / "a.jsonl", surrogate_records())
    b = write(tmp_path / "b.jsonl", surrogate_records(offset=0.5))
    html = tmp_path / "cmp.html"
    result = trl_env("compare", str(a), str(b), "--html", str(html))
    assert result.returncode == 0, result.stderr
    assert "Paired reward difference" in result.stdout and html.is_file()
    as_json = trl_env("compare", str(a), str(b), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["overall"]["n"] == 3


@pytest.mark.parametrize("depth", [200, 200_000])
def test_a_deeply_nested_record_is_refused_in_one_sentence(tmp_path, depth):
    deep = "[" * depth + "]" * depth
    path = tmp_path / "eval.jsonl"
    write(path, [record("s0", 1.0)])
    with path.open("a", encoding="utf-8") as f:
        f.write('{"seed": "s1", "reward": 0.0, "messages": ' + deep + "}\n")
    line = one_sentence(trl_env("view", str(path), "-o", str(tmp_path / "page.html")))
    assert "eval.jsonl:2" in line and "nested" in line
    assert not (tmp_path / "page.html").exists()
    line = one_sentence(trl_env("compare", str(path), str(path)))
    assert "eval.jsonl:2" in line and "nested" in line


def test_a_deeply_nested_summary_is_refused_in_one_sentence(tmp_path):
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    write(run / "episodes" / "rank0.jsonl", [record("s0", 1.0, step=0, split="train")])
    (run / "summary.json").write_text('{"env": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = one_sentence(trl_env("view", str(run)))
    assert "summary.json" in line and "nested" in line


def test_view_refuses_to_write_over_its_input(tmp_path):
    records = write(tmp_path / "eval.jsonl", surrogate_records())
    before = records.read_bytes()
    line = one_sentence(trl_env("view", str(records), "--out", str(records)))
    assert "eval.jsonl" in line and "reads" in line
    # an eval file named .html: its default report would be itself
    named = write(tmp_path / "eval.html", surrogate_records())
    line = one_sentence(trl_env("view", str(named)))
    assert "eval.html" in line
    assert records.read_bytes() == before and named.read_bytes() == before


def test_view_refuses_to_write_over_a_runs_records(tmp_path):
    run = tmp_path / "run"
    (run / "episodes").mkdir(parents=True)
    rank0 = write(run / "episodes" / "rank0.jsonl", [record("s0", 1.0, step=0, split="train")])
    before = rank0.read_bytes()
    one_sentence(trl_env("view", str(run), "-o", str(rank0)))
    # the same file by another name
    alias = tmp_path / "alias.html"
    alias.symlink_to(rank0)
    one_sentence(trl_env("view", str(run), "-o", str(alias)))
    assert rank0.read_bytes() == before


def test_compare_refuses_to_write_its_page_over_an_input(tmp_path):
    a = write(tmp_path / "a.jsonl", surrogate_records())
    b = write(tmp_path / "b.jsonl", surrogate_records())
    before = b.read_bytes()
    line = one_sentence(trl_env("compare", str(a), str(b), "--html", str(b)))
    assert "b.jsonl" in line
    assert b.read_bytes() == before
