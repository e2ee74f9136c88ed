"""The ``trl-env view`` page: summary, breakdowns, plots and every episode, in one HTML file."""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from html import escape
from typing import Any

from . import charts
from .assets import CSS, JS
from .charts import thin
from .load import Source
from .meta import describe, source_runs
from .scalars import scalar_plots
from .stats import MeanCI
from .summary import (
    Rate,
    group_by,
    has_stages,
    per_stage,
    per_step_by_env,
    rewards,
    run_key,
    run_label,
    stage_options,
    stage_per_step,
    status_shares,
    step_of,
    summarize,
)

FAILED = ("error", "timeout")


def num(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def interval(ci: MeanCI) -> str:
    if ci.low is None or ci.high is None:
        return "n/a (fewer than 2 rewards)"
    return f"[{num(ci.low)}, {num(ci.high)}]"


def table(
    head: list[str],
    rows: list[list[str]],
    numeric: set[int] | None = None,
    classes: list[str] | None = None,
) -> str:
    """An HTML table of already-escaped cells; columns in ``numeric`` align right, and row ``i``
    gets the class ``classes[i]`` when given (``sub``: a row indented under the one above)."""
    numeric = numeric or set()
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join(
        (f'<tr class="{classes[n]}">' if classes and classes[n] else "<tr>")
        + "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for n, row in enumerate(rows)
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _statuses(counts: dict[str, int], total: int) -> str:
    return ", ".join(f"{escape(s)} {n} ({100 * n / total:.0f}%)" for s, n in counts.items())


def cards(records: list[dict[str, Any]]) -> str:
    """The headline figures of all episodes."""
    s = summarize(records)
    ci: MeanCI = s["reward"]
    items = [
        (str(s["episodes"]), "episodes"),
        (num(ci.mean), f"mean reward, 95% interval {interval(ci)}"),
        (
            num(ci.stdev),
            f"reward sd; min {num(min(rewards(records), default=None))}, "
            f"max {num(max(rewards(records), default=None))}",
        ),
        (
            num(s["turns_mean"], 3),
            f"mean turns; median {num(s['turns_median'])}, max {num(s['turns_max'])}",
        ),
    ]
    if s["success"] is not None:
        rate: Rate = s["success"]
        items.append((f"{100 * rate.rate:.0f}%", f"success, {rate.successes} of {rate.n} episodes"))
    failed = sum(n for st, n in s["status"].items() if st in FAILED)
    items.append((f"{100 * failed / s['episodes']:.0f}%", "failed (error or timeout)"))
    totals = s["totals"]
    if "sampled_tokens" in totals and "inserted_tokens" in totals:
        items.append(
            (
                f"{totals['sampled_tokens']:.0f} / {totals['inserted_tokens']:.0f}",
                "model / env tokens",
            )
        )
    if "env_seconds" in totals:
        items.append((f"{totals['env_seconds']:.1f} s", "time in the env"))
    for key in ("sanitized_chars", "capped_chars", "bridge_mismatches", "noncanonical_turns"):
        if totals.get(key):
            items.append((f"{totals[key]:.0f}", key.replace("_", " ")))
    body = "".join(f'<div class="card"><b>{v}</b><span>{escape(t)}</span></div>' for v, t in items)
    status = _statuses(s["status"], s["episodes"])
    return f'<div class="cards">{body}</div><p>Statuses: {status}.</p>'


def success_text(rate: Rate | None) -> str:
    return "n/a" if rate is None else f"{100 * rate.rate:.0f}% ({rate.successes}/{rate.n})"


def breakdown(
    name: str, groups: dict[str, list[dict[str, Any]]], sub: Collection[str] = frozenset()
) -> str:
    """One row per group: episodes, mean reward with interval, statuses, mean turns, and the
    success rate and token totals when any group has them. Groups in ``sub`` are indented rows
    under the one before (an env's curriculum stages)."""
    summaries = {label: summarize(records) for label, records in groups.items()}
    success = any(s["success"] is not None for s in summaries.values())
    tokens = any("sampled_tokens" in s["totals"] for s in summaries.values())
    rows = []
    for label, s in summaries.items():
        row = [
            escape(label or "(unnamed)"),
            str(s["episodes"]),
            num(s["reward"].mean),
            interval(s["reward"]),
            _statuses(s["status"], s["episodes"]),
            num(s["turns_mean"], 3),
        ]
        if success:
            row.append(success_text(s["success"]))
        if tokens:
            row += [_total(s["totals"], "sampled_tokens"), _total(s["totals"], "inserted_tokens")]
        rows.append(row)
    head = [name, "episodes", "mean reward", "95% interval", "statuses", "mean turns"]
    head += ["success"] if success else []
    head += ["model tokens", "env tokens"] if tokens else []
    numeric = {1, 2, 5, *range(6, len(head))}
    return table(head, rows, numeric, ["sub" if label in sub else "" for label in summaries])


def _total(totals: dict[str, float], key: str) -> str:
    return f"{totals[key]:.0f}" if key in totals else "n/a"


def stage_label(env: str, stage: int | None, records: list[dict[str, Any]]) -> str:
    """``env · stage N (options)``: the row name of one curriculum stage of an env."""
    if stage is None:
        return f"{env or '(unnamed)'} · no stage"
    options = stage_options(records)
    return f"{env or '(unnamed)'} · stage {stage}" + (f" ({options})" if options else "")


def env_groups(records: list[dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    """Each env, followed by its curriculum stages when it had any (those labels are returned
    apart, to be shown as indented rows)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    sub: set[str] = set()
    stages = per_stage(records)
    for env, recs in group_by(records, lambda r: r["env"]).items():
        groups[env] = recs
        if has_stages(recs):
            for (stage_env, stage), stage_recs in stages.items():
                if stage_env == env:
                    label = stage_label(env, stage, stage_recs)
                    groups[label] = stage_recs
                    sub.add(label)
    return groups, sub


def held_out_section(held_out: list[dict[str, Any]]) -> str:
    """The held-out episodes of a training run at its last evaluation, per env and stage."""
    steps = sorted({r["step"] for r in held_out if r["step"] is not None})
    last = [r for r in held_out if r["step"] == steps[-1]] if steps else held_out
    groups, sub = env_groups(last)
    at = f"at step {steps[-1]} (the last of {len(steps)} evaluations)" if steps else ""
    seeds = len({(r["env"], r["seed"]) for r in last})
    return (
        f"<p>{len(held_out)} held-out episodes, played with --eval-every on a fixed set of "
        f"held-out seeds. The table is {escape(at or 'all of them')}, {seeds} seeds; the "
        "reward-per-step plot shows every evaluation (dashed).</p>" + breakdown("env", groups, sub)
    )


def run_info(source: Source) -> str:
    """Metadata of each run in the file, the training summary and the saved configuration."""
    parts = []
    found = source_runs(source)
    if found:
        described = [describe(run) for run, _ in found]
        names = list(dict.fromkeys(k for d in described for k in d))
        head = ["", *(f"run {i + 1} ({n} episodes)" for i, (_, n) in enumerate(found))]
        rows = [[escape(k), *(escape(d.get(k, "")) for d in described)] for k in names]
        parts.append(table(head, rows))
    if source.summary:
        rows = []
        for k, v in source.summary.items():
            if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
                # a mixed run's per-env figures: a row per env, not one long JSON cell
                for name, figures in v.items():
                    text = " ".join(f"{f}={_value(x)}" for f, x in figures.items())
                    rows.append([escape(f"{k} {name}"), escape(text)])
            else:
                rows.append([escape(str(k)), escape(_value(v))])
        parts.append("<h3>summary.json</h3>" + table(["key", "value"], rows))
    if source.config_text:
        parts.append(
            f"<details><summary>config.yaml</summary><pre>"
            f"{escape(source.config_text)}</pre></details>"
        )
    return "".join(parts) or '<p class="muted">No run metadata in this file (an older format).</p>'


def _value(v: Any) -> str:
    return num(v) if isinstance(v, float) else v if isinstance(v, str) else json.dumps(v)


def reward_series(
    records: list[dict[str, Any]], held_out: list[dict[str, Any]]
) -> list[charts.Series]:
    """Mean reward per step: one line per env (one env: with its interval band) and, dashed in
    the same colour, each env's held-out evaluations."""
    train = per_step_by_env(records)
    evals = per_step_by_env(held_out)
    envs = list(dict.fromkeys([*train, *evals]))
    single = len(envs) == 1
    out = []
    for i, env in enumerate(envs):
        color = charts.COLORS[i % len(charts.COLORS)]
        for steps, dashed in ((train.get(env), False), (evals.get(env), True)):
            if not steps:
                continue
            mean = [(float(k), ci.mean) for k, ci in steps]
            band = [
                (float(k), ci.low, ci.high)
                for k, ci in steps
                if ci.low is not None and ci.high is not None
            ]
            name = ("held-out" if dashed else "reward") if single else env or "(unnamed)"
            if dashed and not single:
                name += " (held-out)"
            # bands of several envs would hide each other: only a lone training line has one
            show_band = single and not dashed and bool(band)
            out.append(
                charts.Series(
                    name, thin(mean), thin(band) if show_band else None, color, dashed=dashed
                )
            )
    return out


def plots(source: Source) -> str:
    records = source.records
    out = []
    series = reward_series(records, source.held_out)
    if series:
        title = "mean reward per training step"
        if series[0].band:
            title += " (band: 95% interval)"
        if source.held_out:
            title += "; dashed: held-out"
        out.append(charts.line_chart(title, series, "training step", "reward", integer_x=True))
        stages = stage_per_step(records)
        if stages:
            out.append(
                charts.line_chart(
                    "curriculum stage per step (highest played)",
                    [
                        charts.Series(
                            env or "(unnamed)", thin([(float(x), float(y)) for x, y in v])
                        )
                        for env, v in stages.items()
                    ],
                    "training step",
                    "stage",
                    integer_x=True,
                    force_legend=True,
                    integer_y=True,
                )
            )
        shares = status_shares(records)
        if len(shares) > 1:
            out.append(
                charts.line_chart(
                    "episode status share per step",
                    [charts.Series(k, thin(v)) for k, v in shares.items()],
                    "training step",
                    "share",
                    integer_x=True,
                )
            )
    out.append(
        charts.distribution_chart("reward distribution", rewards(records), "reward", "episodes")
    )
    turns = [float(r["turns"]) for r in records if r["turns"] is not None]
    out.append(
        charts.distribution_chart("turns distribution", turns, "turns", "episodes", integer=True)
    )
    html = "".join(f'<p class="muted">{escape(note)}</p>' for note in source.notes)
    html += f'<div class="charts">{"".join(out)}</div>'
    return html + scalar_plots(source.scalars)


def episode_payload(rec: dict[str, Any]) -> dict[str, Any]:
    """What the page's script needs of one record: header fields and one form of its text."""
    item: dict[str, Any] = {
        "i": rec["index"],
        "seed": rec["seed"],
        "r": rec["reward"],
        "s": rec["status"],
        "t": rec["turns"],
        "e": rec["env"],
        "k": step_of(rec),
        "err": rec["error"],
        "g": rec["stage"],
        "ok": rec["success"],
        "sp": rec["split"],
    }
    segments = rec.get("segments")
    messages = rec.get("messages")
    if (
        isinstance(segments, list)
        and segments
        and all(
            isinstance(s, list | tuple) and len(s) == 2 and all(isinstance(x, str) for x in s)
            for s in segments
        )
    ):
        item["seg"] = [list(s) for s in segments]
    elif (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and "role" in m for m in messages)
    ):
        item["msg"] = [
            {"role": str(m["role"]), "content": str(m.get("content", ""))} for m in messages
        ]
    else:
        item["txt"] = str(rec.get("text") or "")
    sampled, inserted = rec.get("sampled_tokens"), rec.get("inserted_tokens")
    if isinstance(sampled, int) and isinstance(inserted, int):
        item["tok"] = [sampled, inserted]
    return item


def script_json(value: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>`` or ``<!--`` can end the element early."""
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


CONTROLS = """
<p class="key">Colours: <span class="seg-prompt">first prompt</span><span class="seg-env">env
(inserted, masked)</span><span class="seg-model">model (sampled)</span><span class="think">
reasoning, folded</span></p>
<div id="controls">
 <span id="status-filter">status:</span>
 <label>env <select id="env-filter"><option value="">all</option></select></label>
 <label>episodes <select id="split-filter"><option value="">all</option>
  <option value="train">training</option><option value="eval">held-out</option></select></label>
 <label>reward from <input id="min-reward" type="number" step="any"></label>
 <label>to <input id="max-reward" type="number" step="any"></label>
 <label>search <input id="search" type="search" placeholder="seed or text"></label>
 <label>order <select id="sort"><option value="file">as recorded</option>
  <option value="reward_desc">reward, highest first</option>
  <option value="reward_asc">reward, lowest first</option>
  <option value="turns_desc">turns, most first</option></select></label>
 <label>per page <select id="size"><option>10</option><option>25</option><option>100</option>
  </select></label>
 <button id="fold" type="button">fold / unfold all</button>
</div>
<div class="pager"><button class="prev" type="button">previous</button>
<button class="next" type="button">next</button><span class="pageinfo"></span></div>
<div id="episodes"></div>
<div class="pager"><button class="prev" type="button">previous</button>
<button class="next" type="button">next</button><span class="pageinfo"></span></div>
<noscript><p>The episode list needs JavaScript; the summary and plots above do not.</p></noscript>
"""


def render(source: Source) -> str:
    """The whole report as one self-contained HTML page."""
    records = source.records
    kind = "training run" if source.is_run else "eval file"
    sections = [
        f"<h1>trl-env report</h1><p class='muted'>{escape(str(source.path))} ({kind}, "
        f"{len(records)} episodes)</p>",
        "<h2>Summary</h2>",
        cards(records),
    ]
    envs = group_by(records, lambda r: r["env"])
    if any(envs) or has_stages(records):
        groups, sub = env_groups(records)
        title = "Per environment and curriculum stage" if sub else "Per environment"
        sections += [f"<h2>{title}</h2>", breakdown("env", groups, sub)]
    by_run = group_by([r for r in records if r["run"]], run_key)
    if len(by_run) > 1:
        # numbered, so two runs that read the same (same model and time) stay apart
        labelled = {f"{i}. {run_label(v[0]['run'])}": v for i, v in enumerate(by_run.values(), 1)}
        sections += ["<h2>Per run</h2>", breakdown("run", labelled)]
    if source.is_run and any(r["step"] is not None for r in records):
        last = max(step_of(r) or 0 for r in records if r["step"] is not None)
        final = [r for r in records if r["step"] is not None and step_of(r) == last]
        groups = {str(last): final}
        if len(envs) > 1:  # a mixed run: each env's share of the step too
            groups |= {
                f"{last} · {env}": v for env, v in group_by(final, lambda r: r["env"]).items()
            }
        sub = set(groups) - {str(last)}
        sections += [f"<h2>Last training step ({last})</h2>", breakdown("step", groups, sub)]
    if source.held_out:
        sections += ["<h2>Held-out evaluation</h2>", held_out_section(source.held_out)]
    sections += ["<h2>Run</h2>", run_info(source), "<h2>Plots</h2>", plots(source)]
    # the episode list holds the held-out episodes too, in file order, told apart by a filter
    listed = sorted(records + source.held_out, key=lambda r: r["index"])
    status_counts = summarize(listed)["status"]
    payload = {
        "episodes": [episode_payload(r) for r in listed],
        "statuses": list(status_counts),
        "status_counts": status_counts,
        "envs": [e for e in group_by(listed, lambda r: r["env"]) if e],
        "splits": sorted({r["split"] for r in listed}, reverse=True),  # train, then eval
    }
    sections += [f"<h2>Episodes ({len(listed)})</h2>", CONTROLS]
    title = escape(source.path.name)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>trl-env report: {title}</title><style>{CSS}</style></head><body><main>"
        + "".join(sections)
        + "<div id='js-errors' hidden></div>"
        + f"<script type='application/json' id='episodes-data'>{script_json(payload)}</script>"
        + f"<script>{JS}</script></main></body></html>"
    )
