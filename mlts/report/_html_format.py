"""Value formatting for the HTML report: JSON values as short text, latency statistics, anchors.

Every missing optional field resolves to "-" and every absent or sentinel measurement (the
HAL's UINT64_MAX-style "no measurement") to "not measured".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from mlts.records import Stats
from mlts.report.svg import SENTINEL_MIN

BASELINE = "cpu:onnxruntime"
NOT_MEASURED = "not measured"


def is_baseline(row: Any) -> bool:
    """Whether a row is its model's CPU reference: cpu:onnxruntime, or cpu:litert for a .tflite model.

    With `--reference both` a model has two reference rows; the baseline is the one the driver rows
    were compared with (the row's `reference`; rows without it are onnxruntime's).
    """
    return row.backend == f"cpu:{getattr(row, 'reference', None) or 'onnxruntime'}"


DASH = "-"


def mapping_of(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def number_of(value: Any) -> float | None:
    """A finite real number that is not the HAL's UINT64_MAX-style "no measurement"; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or abs(value) >= SENTINEL_MIN:
        return None
    return float(value)


def text_of(value: Any) -> str:
    """Any JSON value as short text: numbers with up to 4 significant digits, lists joined, maps as k v."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        number = number_of(value)
        if number is None:
            return NOT_MEASURED
        # Integers as they are: a pid, a seed or a count is not "22,050" (sizes are formatted by _size).
        return str(value) if isinstance(value, int) else f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {text_of(v)}" for k, v in value.items()) or DASH
    if isinstance(value, (list, tuple)):
        return ", ".join(text_of(v) for v in value) or "none"
    return str(value)


def _ms(value: float) -> str:
    """Milliseconds with about three significant digits, never in exponent form above 0.001."""
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}" if value >= 0.001 else f"{value:.2e}"


def percent_of(value: Any, decimals: int = 1) -> str | None:
    number = number_of(value)
    return None if number is None else f"{100.0 * number:.{decimals}f}%"


def stat_of(stats: Any) -> dict[str, str] | None:
    """{median, ci, p90, note} of a statistics record, or None when it holds no real median."""
    if isinstance(stats, Stats):
        stats = {
            "median": stats.median,
            "median_ci95": stats.median_ci95,
            "p90": stats.p90,
            "median_ci95_note": stats.median_ci95_note,
        }
    if not isinstance(stats, Mapping) or number_of(stats.get("median")) is None:
        return None
    ci = stats.get("median_ci95")
    lo, hi = (
        (number_of(ci[0]), number_of(ci[1]))
        if isinstance(ci, (list, tuple)) and len(ci) == 2
        else (None, None)
    )
    p90 = number_of(stats.get("p90"))
    return {
        "median": _ms(float(stats["median"])),
        "ci": DASH if lo is None or hi is None else f"{_ms(lo)} – {_ms(hi)}",
        "p90": DASH if p90 is None else _ms(p90),
        "note": str(stats.get("median_ci95_note") or ""),
    }


def stat_text(stats: Any) -> str:
    """ "median [lo – hi]" or "not measured" (a string, None, UINT64_MAX or no median)."""
    s = stat_of(stats)
    if s is None:
        return NOT_MEASURED
    return s["median"] if s["ci"] == DASH else f"{s['median']} [{s['ci']}]"


def _latency(row: Mapping) -> Mapping | None:
    """The row's latency statistics: per step for whole-sequence recurrent runs, else per call."""
    if row.get("mode") == "whole-sequence" and isinstance(row.get("step_latency_ms"), Mapping):
        return row["step_latency_ms"]
    lat = row.get("latency_ms")
    return lat if isinstance(lat, Mapping) else None


def _ok(row: Mapping) -> bool:
    return row.get("status", "ok") == "ok"


def anchor_for(prefix: str, name: str, used: set[str]) -> str:
    base = f"{prefix}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "x")
    anchor, i = base, 1
    while anchor in used:
        i += 1
        anchor = f"{base}-{i}"
    used.add(anchor)
    return anchor


def _in_order(rows: list[Mapping], key: str) -> dict[str, list[Mapping]]:
    """Rows grouped by `key`, groups in the order they first appear."""
    groups: dict[str, list[Mapping]] = {}
    for row in rows:
        groups.setdefault(str(row.get(key) or row.get("model") or "other"), []).append(row)
    return groups
