"""Write the reward and curriculum charts of a training run as SVG files (docs/mixtures.md).

    python docs/examples/plot_run.py RUN_DIR OUT_PREFIX

writes OUT_PREFIX-reward.svg (mean reward per step, one line per env, held-out dashed) and, when
a curriculum ran, OUT_PREFIX-stage.svg, with the same charts `trl-env view RUN_DIR` draws.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trl_env.report import charts
from trl_env.report.load import load
from trl_env.report.page import reward_series
from trl_env.report.summary import stage_per_step


def main(run: str, prefix: str) -> None:
    source = load(Path(run), scalars=False)
    reward = charts.line_chart(
        "mean reward per training step (dashed: held-out)",
        reward_series(source.records, source.held_out),
        "training step",
        "reward",
        integer_x=True,
    )
    Path(f"{prefix}-reward.svg").write_text(charts.standalone(reward), encoding="utf-8")
    stages = stage_per_step(source.records)
    if stages:
        lines = [
            charts.Series(env, [(float(x), float(y)) for x, y in points])
            for env, points in stages.items()
        ]
        chart = charts.line_chart(
            "curriculum stage per step",
            lines,
            "training step",
            "stage",
            integer_x=True,
            force_legend=True,
            integer_y=True,
        )
        Path(f"{prefix}-stage.svg").write_text(charts.standalone(chart), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:3])
