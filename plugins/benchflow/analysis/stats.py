"""How sure a figure is, and whether two figures differ: the statistics behind summaries, ``bench compare``
and the regression check.

* A case's summary: mean, median, standard deviation and a 95 % confidence interval of the mean from
  Student's t. With the 3–5 repeats a phase gets, a bootstrap interval is too narrow (it cannot see beyond
  the few values it resamples), while t accounts for the small sample. Throughputs and latencies are positive
  and their spread grows with their size, so for positive values the interval is taken on the logs (the mean
  times ``exp(± t·s_log/√n)``, as the comparisons are): it never reaches below zero, however few and noisy
  the repeats; a metric with a value of zero or below gets the linear interval.
* A comparison of two cases (two configs, two runs, two nights): the ratio of their means with a 95 %
  interval, from Welch's t on the logarithms (a ratio is a difference of logs; Welch does not assume equal
  spreads), and the test's p-value. A difference is reported only when the interval excludes 1.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    std: float
    ci_low: float
    ci_high: float

    def text(self, unit: str = "") -> str:
        spread = f" (95 % CI {self.ci_low:.4g}–{self.ci_high:.4g})" if self.n > 1 else " (one value: no interval)"
        return f"{self.mean:.4g}{unit}{spread}, n={self.n}"


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, df))


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    data = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not data:
        raise ValueError("no finite values to summarise")
    n, mean, median = len(data), statistics.fmean(data), statistics.median(data)
    if n == 1:
        return Summary(1, mean, median, 0.0, mean, mean)
    std = statistics.stdev(data)
    t = t_quantile(n - 1, confidence)
    if min(data) > 0:
        factor = math.exp(t * statistics.stdev(math.log(v) for v in data) / math.sqrt(n))
        return Summary(n, mean, median, std, mean / factor, mean * factor)
    half = t * std / math.sqrt(n)
    return Summary(n, mean, median, std, mean - half, mean + half)


@dataclass(frozen=True)
class Comparison:
    """``b`` against ``a``: ratio of means (b / a) with its interval, Welch's p, and what it means."""

    a: Summary
    b: Summary
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float
    better: Literal["higher", "lower"]
    test: str = "Welch t on log values"

    @property
    def significant(self) -> bool:
        return not (self.ratio_low <= 1.0 <= self.ratio_high)

    def verdict(self, what: str = "b") -> str:
        """ "b is faster by 12 % (95 % CI 8–16 %)" or "no detectable difference"."""
        if not self.significant:
            return (
                f"no detectable difference (ratio {self.ratio:.3f}, 95 % CI {self.ratio_low:.3f}–"
                f"{self.ratio_high:.3f}, p={self.p_value:.2g})"
            )
        improved = (self.ratio > 1) == (self.better == "higher")
        change = abs(self.ratio - 1) * 100
        low, high = sorted((abs(self.ratio_low - 1) * 100, abs(self.ratio_high - 1) * 100))
        word = "better" if improved else "worse"
        return f"{what} is {word} by {change:.1f} % (95 % CI {low:.1f}–{high:.1f} %, p={self.p_value:.2g})"


def compare(
    a: Sequence[float], b: Sequence[float], better: Literal["higher", "lower"], confidence: float = CONFIDENCE
) -> Comparison:
    """Compare repeated values of one metric; needs two values on each side for an interval."""
    from scipy import stats

    logs_a = [math.log(v) for v in a if v is not None and v > 0]
    logs_b = [math.log(v) for v in b if v is not None and v > 0]
    if len(logs_a) < 2 or len(logs_b) < 2:
        raise ValueError(f"need at least 2 positive values on each side, got {len(logs_a)} and {len(logs_b)}")
    var_a, var_b = statistics.variance(logs_a) / len(logs_a), statistics.variance(logs_b) / len(logs_b)
    diff = statistics.fmean(logs_b) - statistics.fmean(logs_a)
    se = math.sqrt(var_a + var_b)
    if se == 0:
        p, half = (1.0 if diff == 0 else 0.0), 0.0
    else:
        df = (var_a + var_b) ** 2 / (var_a**2 / (len(logs_a) - 1) + var_b**2 / (len(logs_b) - 1))
        half = t_quantile(df, confidence) * se
        p = float(stats.ttest_ind(logs_b, logs_a, equal_var=False).pvalue)
    return Comparison(
        summarize(a), summarize(b), math.exp(diff), math.exp(diff - half), math.exp(diff + half), p, better
    )
