"""The driver-quality figures of benchmark rows (mlts.bench.driver_quality) for the report and `mlts compare`.

Per driver row: the first execution against the steady median, latency with and without MeasureTiming,
the driver process's CPU time per execution (and cores kept busy), its resident memory after
preparation and at peak while executing. `mlts compare` shows how they changed; they are information,
not regressions (one run's first call or CPU share moves with the machine).
"""

from __future__ import annotations

from typing import Any

from mlts.records import BenchmarkRow, DriverQuality

DASH = "-"
COLUMNS = (
    "first execution ms",
    "steady median ms",
    "first / steady",
    "timing on ms",
    "timing off ms",
    "timing cost",
    "driver CPU ms / execution",
    "driver CPU cores",
    "driver RSS after prepare MB",
    "driver peak RSS executing MB",
)


def _f(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return DASH if value is None else f"{value:.{digits}f}{suffix}"


def _percent(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:+.1f}%"


def cells(q: DriverQuality) -> list[str]:
    """The COLUMNS of one row's figures, as text."""
    return [
        _f(q.first_execution_ms),
        _f(q.steady_median_ms),
        _f(q.first_vs_steady, 1, "x"),
        _f(q.timing_on_median_ms),
        _f(q.timing_off_median_ms),
        _percent(q.timing_overhead),
        _f(q.driver_cpu_ms_per_execution),
        _f(q.driver_cpu_share, 2),
        _f(q.driver_rss_after_prepare_mb, 1),
        _f(q.driver_rss_peak_execution_mb, 1),
    ]


def quality_view(rows: list[BenchmarkRow]) -> dict[str, Any]:
    """{"columns", "rows": [{"model", "backend", "cells"}], "methods"} of the ok rows that have figures."""
    items = []
    methods: list[str] = []
    for r in rows:
        q = r.driver_quality
        if not r.ok or q is None:
            continue
        items.append({"model": r.model, "backend": r.backend, "cells": cells(q)})
        if q.method and q.method not in methods:
            methods.append(q.method)
    return {"columns": COLUMNS, "rows": items, "methods": methods}


# --- mlts compare ------------------------------------------------------------------------------------

#: (label, what it reads, digits) of the figures `mlts compare` lists.
_COMPARED = (
    ("first execution ms", lambda q: q.first_execution_ms, 3),
    ("timing cost ms", lambda q: q.timing_overhead_ms, 3),
    ("driver CPU ms/execution", lambda q: q.driver_cpu_ms_per_execution, 3),
    ("driver RSS after prepare MB", lambda q: q.driver_rss_after_prepare_mb, 1),
    ("driver peak RSS executing MB", lambda q: q.driver_rss_peak_execution_mb, 1),
)


def quality_changes(old: BenchmarkRow, new: BenchmarkRow) -> dict[str, dict[str, float]]:
    """{label: {"old", "new", "change" (new/old - 1, or null)}} of the figures both rows have."""
    if old.driver_quality is None or new.driver_quality is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for label, read, _ in _COMPARED:
        a, b = read(old.driver_quality), read(new.driver_quality)
        if a is None or b is None:
            continue
        out[label] = {"old": a, "new": b, "change": (b / a - 1.0) if a > 0 else None}
    return out


def quality_lines(rows: list[dict]) -> list[str]:
    """The compare text: one line per row whose driver-quality figures both runs have."""
    digits = {label: d for label, _, d in _COMPARED}
    lines = []
    for r in rows:
        changes = r.get("driver_quality") or {}
        if not changes:
            continue
        parts = []
        for label, c in changes.items():
            d = digits.get(label, 3)
            change = "" if c["change"] is None else f" ({c['change'] * 100:+.0f}%)"
            parts.append(f"{label} {c['old']:.{d}f} -> {c['new']:.{d}f}{change}")
        lines.append(f"  {r['model']} on {r['backend']}: {'; '.join(parts)}")
    return ["", "driver quality (information, not a verdict):", *lines] if lines else []
