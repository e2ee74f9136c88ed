"""The report's numbers and axes: t intervals against printed tables, ticks that read well."""

from __future__ import annotations

import itertools
import math
import statistics
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_env.report import charts
from trl_env.report.axes import CHAR_PX, fitting_ticks, ticks
from trl_env.report.stats import mean_ci, t_quantile

# Two-sided 95% critical values of Student's t, from a printed table (df -> t_0.975).
T_TABLE = {
    1: 12.7062,
    2: 4.3027,
    3: 3.1824,
    4: 2.7764,
    5: 2.5706,
    9: 2.2622,
    19: 2.0930,
    29: 2.0452,
    39: 2.0227,
    60: 2.0003,
    120: 1.9799,
}


@pytest.mark.parametrize(("df", "expected"), sorted(T_TABLE.items()))
def test_t_quantile_matches_the_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=6e-5)


def test_t_quantile_other_levels_and_large_df():
    assert t_quantile(0.95, 10) == pytest.approx(1.8125, abs=6e-5)  # one-sided 95%, df 10
    assert t_quantile(0.995, 5) == pytest.approx(4.0321, abs=6e-5)
    # far out it is the normal quantile
    assert t_quantile(0.975, 100_000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), 1e-4)
    with pytest.raises(ValueError):
        t_quantile(0.3, 4)


@given(st.integers(1, 400))
@settings(max_examples=40, deadline=None)
def test_t_quantile_shrinks_towards_the_normal(df):
    z = statistics.NormalDist().inv_cdf(0.975)
    assert z < t_quantile(0.975, df + 1) < t_quantile(0.975, df)


def test_mean_ci_is_the_t_interval():
    values = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75, 1.0, 0.5, 0.0]  # n = 10, df = 9
    ci = mean_ci(values)
    half = T_TABLE[9] * statistics.stdev(values) / math.sqrt(len(values))
    assert ci.n == 10 and ci.mean == pytest.approx(statistics.fmean(values))
    assert ci.low == pytest.approx(ci.mean - half, abs=1e-4)
    assert ci.high == pytest.approx(ci.mean + half, abs=1e-4)


def test_mean_ci_small_samples():
    assert mean_ci([]).n == 0 and math.isnan(mean_ci([]).mean)
    one = mean_ci([0.3])
    assert (one.mean, one.low, one.high) == (0.3, None, None)
    flat = mean_ci([0.5, 0.5, 0.5])
    assert flat.low == flat.high == 0.5


finite = st.floats(-1e5, 1e5, allow_nan=False, allow_infinity=False)


@given(finite, finite, st.integers(120, 900), st.booleans())
@settings(max_examples=200, deadline=None)
def test_ticks_are_round_cover_the_data_and_fit(a, b, length, integer):
    if integer:
        a, b = round(a), round(b)
    lo, hi = min(a, b), max(a, b)
    values, texts = fitting_ticks(lo, hi, length, integer)
    slack = 1e-8 * (values[-1] - values[0])  # float noise: less than a pixel's billionth
    assert values[0] <= lo + slack and values[-1] >= hi - slack
    steps = [y - x for x, y in itertools.pairwise(values)]
    step = steps[0]
    assert all(s == pytest.approx(step, rel=1e-6) for s in steps)  # evenly spaced
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(mantissa == pytest.approx(m) for m in (1, 2, 2.5, 5))
    if integer:
        assert step >= 1 and all(v == int(v) for v in values)
    assert len(set(texts)) == len(texts)  # no two ticks share a label
    assert not any(t in ("-0", "-0.0", "nan") for t in texts)
    widest = max(map(len, texts)) * CHAR_PX
    assert len(values) <= 2 or (len(values) - 1) * widest < length  # labels do not touch


def test_single_value_gets_a_padded_axis():
    assert ticks(0.33, 0.33, 5)[0] < 0.33 < ticks(0.33, 0.33, 5)[-1]
    assert ticks(7, 7, 5, integer=True) == [6, 7, 8]


def _svg(markup: str) -> ET.Element:
    return ET.fromstring(markup)  # well-formed XML, or this raises


def test_line_chart_cases():
    one = _svg(charts.line_chart("one", [charts.Series("r", [(3, 0.5)])], "step"))
    assert len(one.findall(".//{*}circle")) == 1 and not one.findall(".//{*}polyline")
    nan = charts.line_chart("gap", [charts.Series("r", [(1, math.nan), (2, 0.5), (3, 1.0)])], "x")
    assert "nan" not in nan.lower()
    assert len(_svg(nan).findall(".//{*}circle")) == 2
    assert "no data" in charts.line_chart("empty", [charts.Series("r", [])], "x")
    two = _svg(
        charts.line_chart(
            "two", [charts.Series("a", [(0, 1), (1, 2)]), charts.Series("b", [(0, 2), (1, 3)])], "x"
        )
    )
    assert [t.text for t in two.findall(".//{*}text[@class='legend']")] == ["a", "b"]


def test_distribution_chart_counts():
    discrete = _svg(charts.distribution_chart("d", [0, 1, 1, 0.5, 1], "reward", "episodes"))
    bars = {r.find("{*}title").text for r in discrete.findall(".//{*}rect[@class='bar']")}
    assert bars == {"0.0: 1", "0.5: 1", "1.0: 3"}
    values = [i / 97 for i in range(97)]
    binned = _svg(charts.distribution_chart("c", values, "reward", "episodes"))
    counts = [int(r.find("{*}title").text.rsplit(": ", 1)[1]) for r in binned.findall(".//{*}rect")]
    assert sum(counts) == len(values) and len(counts) > 5
    turns = _svg(charts.distribution_chart("t", [1, 1, 4], "turns", "episodes", integer=True))
    assert len(turns.findall(".//{*}rect[@class='bar']")) == 4  # 1, 2, 3, 4 (2 and 3 empty)


def test_values_that_need_many_decimals_are_binned_with_round_labels():
    values = [i / 33 for i in range(5)] + [0.5, -0.703030303]  # rewards like 1/33: 0.030303...
    svg = _svg(charts.distribution_chart("rewards", values, "reward", "episodes"))
    ticks = [t.text or "" for t in svg.iter("text") if t.get("class") == "xtick"]
    assert ticks and max(map(len, ticks)) <= 5  # round edges: -0.8, -0.6, ..., not -0.703030303
    bars = svg.findall(".//{*}rect[@class='bar']")
    assert len({b.get("width") for b in bars}) == 1  # every bin one width
    assert sum(int(b.find("{*}title").text.rsplit(": ", 1)[1]) for b in bars) == len(values)
