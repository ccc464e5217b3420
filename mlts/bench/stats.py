"""Latency statistics over a list of per-iteration samples (seconds in, milliseconds out).

summarize_ms is the short summary; describe is the full set the scoring benchmark reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

PERCENTILE_ESTIMATOR = "nearest-rank"


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The smallest value with at least q% of the samples at or below it (q in (0, 100])."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def median(sorted_values: Sequence[float]) -> float:
    n = len(sorted_values)
    mid = n // 2
    return sorted_values[mid] if n % 2 else (sorted_values[mid - 1] + sorted_values[mid]) / 2.0


def summarize_ms(samples_s: Sequence[float]) -> dict[str, float]:
    """mean, sample std, median, p90, p99 (nearest rank), min, max in milliseconds."""
    if not samples_s:
        raise ValueError("no samples to summarise")
    ms = sorted(s * 1000.0 for s in samples_s)
    n = len(ms)
    mean = math.fsum(ms) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in ms) / (n - 1)) if n > 1 else 0.0
    return {
        "mean": mean,
        "std": std,
        "median": median(ms),
        "p90": nearest_rank(ms, 90),
        "p99": nearest_rank(ms, 99),
        "min": ms[0],
        "max": ms[-1],
    }


HISTOGRAM_BUCKETS = 32
CI_Z95 = 1.96
EXACT_CI_MAX_N = 50
STD_WARN_PERCENT = 10.0
OUTLIER_WARN_RATIO = 1.5
P99_MIN_SAMPLES = 100


def describe(samples_s: Sequence[float], *, p99_wanted: bool = True) -> dict[str, Any]:
    """Full latency statistics of per-call samples (seconds in, milliseconds out, JSON-ready).

    Keys: n, mean, std (sample, n-1; 0 for n == 1), median, mad (median of |x - median|, unscaled:
    not multiplied by 1.4826), p50/p90/p95/p99 (nearest rank), min, max, percentile_estimator,
    median_ci95 [lo, hi] with median_ci95_ranks and median_ci95_note (None unless the sample is too
    small to reach 95%), histogram {edges, counts} and warnings (one line each, with a fix).
    """
    seconds = _checked_seconds(samples_s)
    base = summarize_ms(seconds.tolist())
    ms = np.sort(seconds * 1000.0)
    values: list[float] = ms.tolist()
    lo_rank, hi_rank, note = median_ci95_ranks(len(values))
    stats: dict[str, Any] = {
        "n": len(values),
        "mean": base["mean"],
        "std": base["std"],
        "median": base["median"],
        "mad": median_absolute_deviation(ms),
        **{f"p{q}": nearest_rank(values, q) for q in (50, 90, 95, 99)},
        "min": values[0],
        "max": values[-1],
        "percentile_estimator": PERCENTILE_ESTIMATOR,
        "median_ci95": [values[lo_rank - 1], values[hi_rank - 1]],
        "median_ci95_ranks": [lo_rank, hi_rank],
        "median_ci95_note": note,
        "histogram": histogram(ms),
    }
    stats["warnings"] = latency_warnings(stats, p99_wanted=p99_wanted)
    return stats


def _checked_seconds(samples_s: Sequence[float]) -> np.ndarray:
    """The samples as a 1-D float64 array; ValueError on none, non-finite or negative ones."""
    s = np.asarray(samples_s, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"latency samples must be a flat list of seconds, got shape {s.shape}")
    if s.size == 0:
        raise ValueError("no latency samples to describe")
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        raise ValueError(f"latency samples must be finite: sample {bad[0]} is {s[bad[0]]}")
    bad = np.flatnonzero(s < 0)
    if bad.size:
        raise ValueError(f"latency samples must be >= 0 s: sample {bad[0]} is {s[bad[0]]}")
    return s


def median_absolute_deviation(ms: np.ndarray) -> float:
    """median(|x - median(x)|), unscaled (multiply by 1.4826 for a normal-consistent sigma)."""
    return float(np.median(np.abs(ms - np.median(ms))))


def _median_ci_coverage(n: int, j: int) -> float:
    """P(X(j) <= true median <= X(n+1-j)) = 1 - 2 * P(Binomial(n, 1/2) <= j - 1), exactly."""
    return 1.0 - 2.0 * math.fsum(math.comb(n, i) for i in range(j)) / 2.0**n


def median_ci95_ranks(n: int) -> tuple[int, int, str | None]:
    """1-based order-statistic ranks (j, n+1-j) bracketing the median with >= 95% coverage.

    n <= 50: the largest j whose exact binomial coverage is >= 0.95. n > 50: the normal approximation
    j = floor(n/2 - 1.96*sqrt(n)/2), k = ceil(1 + n/2 + 1.96*sqrt(n)/2) = n + 1 - j (rounded outward;
    the +1 centres the interval on the median's rank (n+1)/2). n < 6 cannot reach 95%: (1, n) and a
    note with the coverage achieved.
    """
    if n < 1:
        raise ValueError("no samples for a confidence interval of the median")
    if n > EXACT_CI_MAX_N:
        j = max(1, math.floor(n / 2 - CI_Z95 * math.sqrt(n) / 2))
        return j, n + 1 - j, None
    if _median_ci_coverage(n, 1) < 0.95:
        coverage = 100.0 * max(0.0, _median_ci_coverage(n, 1))
        return 1, n, f"n={n}: [min, max] covers the median with {coverage:.1f}%"
    j = 1
    while _median_ci_coverage(n, j + 1) >= 0.95:  # at most 25 steps: n <= 50
        j += 1
    return j, n + 1 - j, None


def histogram(sorted_ms: np.ndarray) -> dict[str, list[Any]]:
    """32 equal buckets over [min, max]: 33 edges, counts summing to n, the max in the last bucket.

    Zero range (all samples equal, n == 1 included): all 33 edges equal that value and the first
    bucket holds every sample, so nothing divides by the zero width.
    """
    lo, hi = float(sorted_ms[0]), float(sorted_ms[-1])
    if hi == lo:
        counts = [0] * HISTOGRAM_BUCKETS
        counts[0] = int(sorted_ms.size)
        return {"edges": [lo] * (HISTOGRAM_BUCKETS + 1), "counts": counts}
    counts_arr, edges = np.histogram(sorted_ms, bins=HISTOGRAM_BUCKETS, range=(lo, hi))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts_arr]}


def latency_warnings(stats: dict[str, Any], *, p99_wanted: bool) -> list[str]:
    """One-line warnings, each with a fix: std >= 10% of mean, max >= 1.5x median, p99 from n < 100."""
    out: list[str] = []
    mean, std, med, top, n = stats["mean"], stats["std"], stats["median"], stats["max"], stats["n"]
    if mean > 0 and 100.0 * std >= STD_WARN_PERCENT * mean:
        out.append(
            f"latency varies: std is {100.0 * std / mean:.0f}% of the mean; close other programs, "
            "pin the CPU frequency or time more iterations"
        )
    if med > 0 and top >= OUTLIER_WARN_RATIO * med:
        out.append(
            f"outliers: max is {top / med:.1f}x the median; close other programs or look at the median "
            "and p90 rather than the mean and max"
        )
    if p99_wanted and n < P99_MIN_SAMPLES:
        out.append(
            f"p99 needs >= {P99_MIN_SAMPLES} samples for its own rank; have {n}: time more iterations (or sequences)"
        )
    return out
