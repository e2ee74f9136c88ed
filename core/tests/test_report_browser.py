"""The report in a real browser: headless Chromium runs its script on the written page.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped, saying so, without it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from trl_env.episode import Status
from trl_env.report import write_report
from trl_env.report.assets import CSS
from trl_env.report.compare import compare
from trl_env.report.compare_page import render as render_compare
from trl_env.report.load import load

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install -y chromium)"
)

# the realistic record builder of the view tests, loaded by path (tests are not a package)
_spec = importlib.util.spec_from_file_location(
    "report_records", Path(__file__).with_name("test_report.py")
)
records_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(records_mod)
episode, write_jsonl = records_mod.episode, records_mod.write_jsonl


def chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def dump(tmp_path: Path, page: Path, fragment: str = "") -> str:
    """The DOM after the page's script ran; fails on any console message from the page."""
    proc = chromium(tmp_path, page.as_uri() + fragment, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    assert 'data-ready="1"' in proc.stdout or "<svg" in proc.stdout
    assert not re.search(r'id="js-errors"[^>]*>[^<]', proc.stdout)  # the error box stayed empty
    return proc.stdout


def cards(dom: str) -> list[tuple[str, str]]:
    """(status, seed) of every episode card on the shown page."""
    return re.findall(
        r'<details class="ep st-([\w-]+)"[^>]*><summary><b>#\d+</b><span>seed '
        r"([^<]+)</span>",
        dom,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("report")
    statuses = [Status.DONE, Status.MAX_TURNS, Status.ERROR]
    recs = [
        episode(
            i,
            env=("guess", "wordle")[i % 2],
            reward=round((i * 37 % 100) / 100, 2),
            turns=1 + i % 3,
            status=statuses[i % 3],
            think=i % 4 != 1,
        )
        for i in range(60)
    ]
    return write_report(write_jsonl(tmp / "eval.jsonl", recs)), recs


def test_episodes_render_as_conversations(tmp_path, report):
    page, recs = report
    dom = dump(tmp_path, page)
    shown = cards(dom)
    assert [seed for _, seed in shown] == [r["seed"] for r in recs[:25]]  # first page of 25
    assert "page 1 of 3: episodes 1-25 of 60 matching" in dom
    # env and model text are told apart, reasoning is folded, the env text is the recorded one
    assert dom.count('class="seg-env"') >= 25 and dom.count('class="seg-model"') >= 25
    assert re.search(
        r'<details class="think"><summary>reasoning \(\d+ chars\)</summary>'
        r'<span class="seg-model">&lt;think&gt;\nHalve the range',
        dom,
    )
    assert "Lower than 50 &amp; &lt;b&gt;not&lt;/b&gt; &lt;/script&gt; guess-0" in dom
    assert "env raised ValueError" in dom  # an error episode shows its error


def test_filters_and_pages_from_the_address(tmp_path, report):
    page, recs = report
    errors = [r["seed"] for r in recs if r["status"] == "error"]
    dom = dump(tmp_path, page, "#status=error&page=1")
    assert cards(dom) == [("error", s) for s in errors]
    wordle_high = sorted(
        (r for r in recs if r["env"] == "wordle" and r["reward"] >= 0.5),
        key=lambda r: (-r["reward"], int(r["seed"].split("-")[1])),
    )
    dom = dump(tmp_path, page, "#env=wordle&min=0.5&sort=reward_desc&size=10&page=2")
    assert [s for _, s in cards(dom)] == [r["seed"] for r in wordle_high[10:20]]
    dom = dump(tmp_path, page, "#q=GUESS%2051&size=100")  # search the conversation text
    assert {s for _, s in cards(dom)} == {r["seed"] for r in recs if r["turns"] >= 2}


@pytest.mark.slow
def test_ten_thousand_episodes_stay_paged(tmp_path):
    base = [episode(i, turns=1 + i % 4, think=i % 2 == 0) for i in range(8)]
    recs = [
        {**base[i % 8], "seed": f"eval-{i}", "reward": (i * 7919 % 1000) / 1000}
        for i in range(10_000)
    ]
    page = write_report(write_jsonl(tmp_path / "big.jsonl", recs))
    dom = dump(tmp_path, page, "#sort=reward_asc")
    assert len(cards(dom)) == 25  # only one page is in the document
    assert "of 10000 matching (10000 in all)" in dom
    ms = int(re.search(r'data-render-ms="(\d+)"', dom).group(1))
    assert ms < 5000, f"first page of 10,000 episodes took {ms} ms"


OVERLAPS = """<script>
document.body.dataset.overlaps = JSON.stringify(Array.from(document.querySelectorAll("svg"))
  .flatMap(function (svg) {
    var boxes = Array.from(svg.querySelectorAll("text.xtick, text.ytick"))
      .map(function (t) { return [t.textContent, t.getBoundingClientRect()]; });
    var bad = [];
    boxes.forEach(function (a, i) { boxes.slice(i + 1).forEach(function (b) {
      if (a[1].left < b[1].right && b[1].left < a[1].right &&
          a[1].top < b[1].bottom && b[1].top < a[1].bottom) bad.push(a[0] + "/" + b[0]);
    }); });
    return bad;
  }));
</script>"""


def test_axis_labels_do_not_overlap_in_the_browser(tmp_path):
    from trl_env.report import charts

    svgs = [
        charts.line_chart(
            "long steps",
            [charts.Series("r", [(s, s / 7e5) for s in range(0, 123_457, 997)])],
            "step",
            integer_x=True,
        ),
        charts.line_chart("one point", [charts.Series("r", [(3, 0.25)])], "step"),
        charts.line_chart(
            "tiny kl",
            [charts.Series("kl", [(s, 1e-6 * s) for s in range(50)])],
            "step",
            integer_x=True,
        ),
        charts.distribution_chart("many values", [i / 7 for i in range(300)], "reward", "n"),
        charts.distribution_chart("turns", [1, 39, 20], "turns", "n", integer=True),
    ]
    page = tmp_path / "axes.html"
    for style in ("", f"<style>{CSS}</style>"):  # alone, and as styled in the report
        page.write_text(
            f"<!doctype html><html><head>{style}</head><body style='width:700px'>"
            f"{''.join(svgs)}{OVERLAPS}</body></html>"
        )
        dom = dump(tmp_path, page)
        overlaps = json.loads(
            re.search(r'data-overlaps="([^"]*)"', dom).group(1).replace("&quot;", '"')
        )
        assert overlaps == [], style[:20]


def test_screenshot(tmp_path, report):
    page, _ = report
    png = tmp_path / "report.png"
    proc = chromium(tmp_path, page.as_uri(), f"--screenshot={png}", "--window-size=1280,2000")
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1280, 2000)
    assert png.stat().st_size > 50_000  # a rendered page, not a blank one


def test_compare_page_renders(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [episode(i, reward=i / 20) for i in range(20)])
    b = write_jsonl(tmp_path / "b.jsonl", [episode(i, reward=(i + 3) / 23) for i in range(20)])
    first, second = load(a), load(b)
    page = tmp_path / "compare.html"
    page.write_text(render_compare(first, second, compare(first, second)), encoding="utf-8")
    dom = dump(tmp_path, page)
    assert dom.count("<svg") == 3 and "B higher" in dom


# a mixed run as `trl-env train` leaves one, from the mixture tests
_mix_spec = importlib.util.spec_from_file_location(
    "report_mixture", Path(__file__).with_name("test_report_mixture.py")
)
mixture = importlib.util.module_from_spec(_mix_spec)
_mix_spec.loader.exec_module(mixture)

LEGENDS = """<script>
document.body.dataset.legends = JSON.stringify(Array.from(document.querySelectorAll("svg"))
  .map(function (svg) {
    var title = svg.querySelector("text.title").getBoundingClientRect();
    var items = Array.from(svg.querySelectorAll("text.legend")).map(function (t) {
      return [t.textContent, t.getBoundingClientRect()];
    });
    var bad = [];
    items.forEach(function (a, i) {
      if (a[1].width === 0 || a[1].top < title.bottom) bad.push(a[0]);
      items.slice(i + 1).forEach(function (b) {
        if (a[1].left < b[1].right && b[1].left < a[1].right &&
            a[1].top < b[1].bottom && b[1].top < a[1].bottom) bad.push(a[0] + "/" + b[0]);
      });
    });
    return [svg.getAttribute("aria-label"), items.map(function (i) { return i[0]; }), bad];
  }));
</script>"""


def test_mixed_run_tables_legends_and_split_filter(tmp_path):
    run, train, held_out = mixture.mixed_run(tmp_path)
    page = write_report(run)
    html = page.read_text(encoding="utf-8")
    checked = tmp_path / "legends.html"
    checked.write_text(html.replace("</main>", LEGENDS + "</main>"), encoding="utf-8")
    dom = dump(tmp_path, checked)
    per_env = dom.split("<h2>Per environment and curriculum stage</h2>", 1)[1].split("</table>")[0]
    rows = re.findall(r'<tr(?: class="(\w+)")?><td>([^<]+)</td>', per_env)
    assert rows == [
        ("", "guess"),
        ("", "sokoban-large"),
        *(("sub", f"sokoban-large · stage {s} (size={mixture.SIZES[s]})") for s in range(3)),
        ("", "wordle"),
    ]
    legends = {
        title: (names, bad)
        for title, names, bad in json.loads(
            re.search(r'data-legends="([^"]*)"', dom).group(1).replace("&quot;", '"')
        )
    }
    names, bad = legends["mean reward per training step; dashed: held-out"]
    envs = list(mixture.GROUPS)
    assert names == [n for env in envs for n in (env, f"{env} (held-out)")] and bad == []
    assert all(bad == [] for _, bad in legends.values()), legends
    # the split filter: held-out episodes alone, then one env's training episodes
    dom = dump(tmp_path, page, "#split=eval&size=100")
    shown = cards(dom)
    assert sorted(s for _, s in shown) == sorted(r["seed"] for r in held_out)
    assert dom.count('<span class="tag held">held-out</span>') == len(held_out)
    dom = dump(tmp_path, page, "#env=sokoban-large&split=train&size=100")
    soko = [r for r in train if r["env"] == "sokoban-large"]
    assert len(cards(dom)) == len(soko)
    assert dom.count('class="tag won"') == sum(r["success"] for r in soko)
    assert dom.count("<span>stage 2</span>") == sum(r["stage"] == 2 for r in soko)
