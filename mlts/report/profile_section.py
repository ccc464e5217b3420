"""The report's per-operation profile section (rows of `mlts benchmark --profile`): plain values for
the template `profile.html.j2`.

Per model × backend that has a profile: the top operations by time, the time by operation type,
the profiling overhead, and on driver rows the per-layer pairs against onnxruntime with their
ratio, the layer where the driver loses the most time marked as the slowest kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlts.report._html_format import DASH, mapping_of, number_of, percent_of, text_of

#: Layer pairs shown per row (the largest excess of the driver first); results.json has them all.
MAX_LAYER_ROWS = 15


def _us(value: Any) -> str:
    number = number_of(value)
    if number is None:
        return DASH
    return f"{number:.1f}" if number < 1000 else f"{number:,.0f}"


def _ratio(value: Any) -> str:
    number = number_of(value)
    return DASH if number is None else f"{number:.2f}×"


def _overhead(value: Any) -> str:
    o = mapping_of(value)
    plain, prof, ratio = (
        number_of(o.get(k)) for k in ("unprofiled_median_ms", "profiled_median_ms", "ratio")
    )
    if plain is None or prof is None or ratio is None:
        return DASH
    return f"median {plain:.3f} ms unprofiled, {prof:.3f} ms profiled ({ratio:.2f}×)"


def _layers(value: Any) -> dict[str, Any] | None:
    layers = mapping_of(value)
    pairs = [p for p in layers.get("pairs") or [] if isinstance(p, Mapping)]
    if not pairs:
        return None
    slowest = layers.get("slowest")
    coverage = mapping_of(layers.get("coverage"))
    return {
        "rows": [
            {
                "layer": text_of(p.get("layer")),
                "driver": _us(p.get("driver_us")),
                "reference": _us(p.get("reference_us")),
                "ratio": _ratio(p.get("ratio")),
                "slowest": p.get("layer") == slowest,
            }
            for p in pairs[:MAX_LAYER_ROWS]
        ],
        "hidden": max(0, len(pairs) - MAX_LAYER_ROWS),
        "slowest": text_of(slowest) if slowest else None,
        "coverage": f"{percent_of(coverage.get('driver')) or DASH} of the driver's time, "
        f"{percent_of(coverage.get('reference')) or DASH} of onnxruntime's",
    }


def _entries(value: Any, text_keys: tuple[str, ...]) -> list[dict[str, str]]:
    """Table rows from a list of entries: `text_keys` as text, then `us` and `share`."""
    return [
        {
            **{k: text_of(t.get(k)) for k in text_keys},
            "us": _us(t.get("us")),
            "share": percent_of(t.get("share")) or DASH,
        }
        for t in value or []
        if isinstance(t, Mapping)
    ]


def profile_rows(rows: list[Mapping]) -> list[dict[str, Any]]:
    """One entry per row with a profile, in the rows' order."""
    out = []
    for r in rows:
        prof = r.get("profile")
        if not isinstance(prof, Mapping):
            continue
        entry: dict[str, Any] = {
            "model": text_of(r.get("model")),
            "backend": text_of(r.get("backend")),
            "available": bool(prof.get("available")),
            "reason": text_of(prof.get("reason")),
            "overhead": _overhead(prof.get("overhead")),
        }
        if entry["available"]:
            entry.update(
                source=text_of(prof.get("source")),
                executions=text_of(prof.get("executions")),
                total=_us(prof.get("total_us")),
                on_device=_us(prof.get("time_on_device_us")),
                top=_entries(prof.get("top"), ("name", "type", "layer")),
                by_type=_entries(prof.get("by_type"), ("type", "count")),
                layers=_layers(prof.get("layers")),
            )
        out.append(entry)
    return out
