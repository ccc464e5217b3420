"""Latency statistics over a list of per-iteration samples (seconds in, milliseconds out)."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
