"""Means with a Student t 95% interval, without scipy (view and compare stay light)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class MeanCI:
    """A sample mean with its two-sided 95% t interval (``None`` bounds below two values)."""

    n: int
    mean: float
    low: float | None
    high: float | None
    stdev: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "n": self.n,
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "stdev": self.stdev,
        }


def _two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` degrees of freedom (exact finite series).

    The closed forms for integer ``df`` (Abramowitz and Stegun 26.7.3-4) need only atan and a
    sum of ``df / 2`` terms, so no special-function library is needed.
    """
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:
        term, total = 1.0, 0.0
        if df > 1:
            total = 1.0
            for k in range(3, df - 1, 2):  # 2/3 c2, (2*4)/(3*5) c2^2, ...
                term *= (k - 1) / k * c2
                total += term
            total *= math.sin(theta) * math.cos(theta)
        return 2 / math.pi * (theta + total)
    term = total = 1.0
    for k in range(2, df - 1, 2):  # 1/2 c2, (1*3)/(2*4) c2^2, ...
        term *= (k - 1) / k * c2
        total += term
    return math.sin(theta) * total


def _density(t: float, df: int) -> float:
    log = (
        math.lgamma((df + 1) / 2)
        - math.lgamma(df / 2)
        - 0.5 * math.log(df * math.pi)
        - (df + 1) / 2 * math.log1p(t * t / df)
    )
    return math.exp(log)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t (``p`` in [0.5, 1)), by Newton steps on the exact CDF.

    Starting at the normal quantile, below the t quantile, on a concave CDF, every step stays
    below the root, so the iteration climbs to it without overshooting.
    """
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df >= 1, got p={p}, df={df}")
    target = 2 * p - 1
    x = statistics.NormalDist().inv_cdf(p)
    for _ in range(200):
        step = (target - _two_sided(x, df)) / (2 * _density(x, df))
        x += step
        if abs(step) < 1e-12 * max(1.0, x):
            break
    return x


def mean_ci(values: list[float], level: float = 0.95) -> MeanCI:
    """Mean of ``values`` with its t interval; an empty list has a NaN mean and no interval."""
    n = len(values)
    if n == 0:
        return MeanCI(0, math.nan, None, None, None)
    mean = statistics.fmean(values)
    if n == 1:
        return MeanCI(1, mean, None, None, None)
    sd = statistics.stdev(values)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return MeanCI(n, mean, mean - half, mean + half, sd)
