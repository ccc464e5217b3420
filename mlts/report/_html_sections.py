"""The HTML report's other sections: header, lists, charts, compilation, driver timing, memory, stress, capabilities."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from mlts.records import BenchmarkRow, StressRecord
from mlts.report._html_format import (
    DASH,
    anchor_for,
    is_baseline,
    mapping_of,
    number_of,
    stat_text,
    text_of,
)
from mlts.report.svg import cdf_svg, histogram_svg

# --- header -----------------------------------------------------------------------------------------

ENVIRONMENT_LABELS = {
    "cpu": "CPU",
    "cpu_features": "CPU features",
    "onnxruntime_integer": "onnxruntime 8-bit products",
    "machine": "machine",
    "cores": "cores",
    "usable_cores": "usable cores",
    "os": "OS",
    "threads": "threads",
    "python": "Python",
    "numpy": "NumPy",
    "onnx": "ONNX",
    "onnxruntime": "onnxruntime",
    "mlts": "mlts",
}
CONFIG_LABELS = {
    "warmup_s": ("warm-up", " s"),
    "duration_s": ("duration", " s"),
    "min_iterations": ("min iterations", ""),
    "quick": ("quick", ""),
    "early_stop": ("early stop", ""),
    "images": ("images", ""),
    "sequences": ("sequences", ""),
    "threads": ("threads", ""),
    "compilation": ("compilation timings", ""),
    "seed": ("seed", ""),
    "drivers": ("drivers", ""),
    "models": ("models", ""),
}


def environment_items(env: Mapping) -> list[tuple[str, str]]:
    """Known fields under readable labels first, then any other field under its own name."""
    items = [
        (label, text_of(mapping_of(env[k]).get("summary", env[k]) if k == "onnxruntime_integer" else env[k]))
        for k, label in ENVIRONMENT_LABELS.items()
        if k in env
    ]
    known = {*ENVIRONMENT_LABELS, "time_utc", "load"}  # load: its own table (mlts.report._html_headline)
    return items + [(str(k), text_of(v)) for k, v in env.items() if k not in known]


def config_items(config: Mapping, rows: Sequence[BenchmarkRow] = ()) -> list[tuple[str, str]]:
    items = []
    for key, (label, unit) in CONFIG_LABELS.items():
        if key == "images" and key in config and config[key] is None:
            # Not chosen: say how many the image models actually ran on.
            sizes = sorted(
                {
                    str(r.dataset.size)
                    for r in rows
                    if r.latency_unit is None and r.dataset is not None and r.dataset.size is not None
                }
            )
            items.append((label, f"{', '.join(sizes)} (default)" if sizes else "default"))
            continue
        if key == "early_stop" and key in config:
            items.append((label, early_stop_text(bool(config[key]), rows)))
            continue
        if key in config:
            value = text_of(config[key])
            items.append((label, value + unit if number_of(config[key]) is not None else value))
    return items + [(str(k), text_of(v)) for k, v in config.items() if k not in CONFIG_LABELS]


def early_stop_text(on: bool, rows: Sequence[BenchmarkRow]) -> str:
    """The run's stopping rule in words and, when it was on, how many timed runs it ended early."""
    if not on:
        return "off (fixed durations)"
    runs = [r.run for r in rows if r.run is not None and r.run.stop_rule is not None]
    rule = runs[0].stop_rule if runs else {}
    within = number_of(rule.get("ci95_within_percent")) if isinstance(rule, Mapping) else None
    text = (
        f"on: each timed run ends once the median's 95% interval is within ±{within:g}% of it"
        if within is not None
        else "on: each timed run ends once its median is precise"
    )
    text += " (else at the duration), each warm-up once its calls are stable, each compilation timing once precise"
    if runs:
        precise = sum(1 for r in runs if r.stopped == "precise")
        text += f"; {precise} of {len(runs)} timed runs stopped precise, {len(runs) - precise} at the bound"
    return text


def devices_section(devices: Mapping) -> list[dict[str, Any]]:
    return [
        {"name": str(name), "items": [(str(k), text_of(v)) for k, v in mapping_of(info).items()]}
        for name, info in devices.items()
    ]


# --- lists: validation errors and latency warnings --------------------------------------------------


def validation_section(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    return [
        {"model": r.model, "backend": r.backend, "items": [e.message for e in r.violations]}
        for r in rows
        if r.violations
    ]


def inexact_reference_section(rows: list[BenchmarkRow]) -> list[dict[str, str]]:
    """One line per model whose onnxruntime results are not exact integer arithmetic on this CPU."""
    seen: dict[str, str] = {}
    for r in rows:
        if r.reference_inexact:
            seen.setdefault(r.model, r.reference_inexact)
    return [{"model": m, "note": n} for m, n in seen.items()]


def extensions_used_section(rows: list[BenchmarkRow]) -> list[dict[str, str]]:
    """One line per model that uses vendor extensions, naming them."""
    seen: dict[str, str] = {}
    for r in rows:
        if r.extensions:
            seen.setdefault(r.model, ", ".join(r.extensions))
    return [{"model": m, "names": n} for m, n in seen.items()]


def warnings_section(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    """One compact line per row with latency warnings: their short names, the full lines on expanding."""
    out = []
    for r in rows:
        lat = r.per_call_latency
        items = list(lat.warnings) if lat is not None else []
        if items:
            out.append(
                {
                    "model": r.model,
                    "backend": r.backend,
                    "items": items,
                    "short": ", ".join(re.split(r"[:;]", w, maxsplit=1)[0] for w in items),
                }
            )
    return out


# --- charts -----------------------------------------------------------------------------------------


def charts_section(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    """Per model with any successful run: a histogram and a CDF, one series per backend."""
    used: set[str] = set()
    out = []
    models: dict[str, list[BenchmarkRow]] = {}
    for row in rows:
        models.setdefault(row.model, []).append(row)
    for model, members in models.items():
        series = {
            r.backend: lat.to_json() for r in members if r.ok and (lat := r.per_call_latency) is not None
        }
        if not series:
            continue
        per_step = any(r.latency_unit == "step" for r in members)
        what = "per-step latency" if per_step else "latency"
        out.append(
            {
                "model": model,
                "anchor": anchor_for("charts", model, used),
                "histogram": Markup(histogram_svg(series, f"{model}: {what} histogram")),
                "cdf": Markup(cdf_svg(series, f"{model}: {what} CDF")),
            }
        )
    return out


# --- compilation, driver timing, memory -------------------------------------------------------------


def _driver_rows(rows: list[BenchmarkRow]) -> list[BenchmarkRow]:
    return [r for r in rows if r.ok and not is_baseline(r) and not r.backend.startswith("cpu:")]


def _size(value: Any) -> str:
    size = number_of(value)
    if size is None:
        return DASH
    return f"{int(size):,} B ({size / 2**20:.2f} MiB)"


def compilation_section(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    """Driver rows: median (95% CI) ms of compile without cache, save to cache, prepare from cache."""
    out = []
    for r in _driver_rows(rows):
        comp = r.compilation
        note = "compilation was not timed for this run" if comp is None else (comp.note or "")
        stats = (
            (None, None, None)
            if comp is None
            else (comp.without_cache, comp.save_to_cache, comp.prepare_from_cache)
        )
        out.append(
            {
                "model": r.model,
                "backend": r.backend,
                "cells": [stat_text(s) for s in stats],
                "size": _size(None if comp is None else comp.cache_size_bytes),
                "note": note,
            }
        )
    return out


def driver_timing_section(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    """Driver rows: median (95% CI) µs of the driver's own Timing, "not measured" when it gave none."""
    out = []
    for r in _driver_rows(rows):
        timing = r.driver_timing_us
        fields = (None, None) if timing is None else (timing.time_on_device, timing.time_in_driver)
        out.append({"model": r.model, "backend": r.backend, "cells": [stat_text(f) for f in fields]})
    return out


def memory_section(rows: list[BenchmarkRow]) -> dict[str, Any]:
    items = []
    methods: list[str] = []
    for r in rows:
        mem = r.memory_mb
        if not r.ok or mem is None:
            continue
        cells = [number_of(mem.client_peak_rss), number_of(mem.driver_peak_rss)]
        items.append(
            {
                "model": r.model,
                "backend": r.backend,
                "cells": [DASH if v is None else f"{v:.1f}" for v in cells],
            }
        )
        if mem.method and mem.method not in methods:
            methods.append(mem.method)
    return {"rows": items, "methods": methods}


# --- stress and capabilities ------------------------------------------------------------------------


def _outcome_class(record: StressRecord) -> str:
    """ "expected" when the outcome is the expected one (SUCCESS when none is given), else "unexpected"."""
    return "unexpected" if record.unexpected else "expected"


def _test_part(record: StressRecord) -> str:
    """What tells the record apart from the others of its mode and driver: the part of its test name
    after "mode/driver/" ("process-2" of a multi-process mode, a model), or "-"."""
    test = record.test or ""
    prefix = f"{record.mode}/{record.driver}"
    rest = test[len(prefix) :].lstrip("/") if test.startswith(prefix) else test
    return rest.replace("process-", "process ", 1) if rest.startswith("process-") else (rest or DASH)


def stress_section(records: list[StressRecord]) -> list[dict[str, Any]]:
    out = []
    for r in records:
        models = r.models if r.models is not None else (None if r.model is None else (r.model,))
        out.append(
            {
                "mode": r.mode,
                "test": _test_part(r),
                "driver": r.driver,
                "models": text_of(models),
                "outcome": r.outcome,
                "outcome_cls": _outcome_class(r),
                "expected": text_of(r.expected),
                "reason": text_of(r.reason),
                "duration": DASH if r.duration_s is None else f"{r.duration_s:.1f} s",
                "iterations": text_of(r.iterations),
                "signal": text_of(r.signal),
                "log_tail": "\n".join(r.log_tail or ()),
            }
        )
    return out


def capabilities_section(caps: Any) -> list[dict[str, Any]]:
    """Per driver: its scalar fields (nested keys joined by " / ") and one table per list or matrix."""
    if not isinstance(caps, Mapping):
        return []
    out = []
    for driver, info in caps.items():
        scalars: list[tuple[str, str]] = []
        tables: list[dict[str, Any]] = []
        _walk(info, "", scalars, tables)
        out.append({"driver": str(driver), "scalars": scalars, "tables": tables})
    return out


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _walk(value: Any, path: str, scalars: list[tuple[str, str]], tables: list[dict[str, Any]]) -> None:
    """Maps of records become a table (a row per key), lists of records a table, the rest name: value."""
    if isinstance(value, Mapping):
        if value and all(
            isinstance(v, Mapping) and v and all(map(_is_scalar, v.values())) for v in value.values()
        ):
            tables.append(_table(path, [{"": k, **v} for k, v in value.items()]))
            return
        for key, item in value.items():
            _walk(item, f"{path} / {key}" if path else str(key), scalars, tables)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        tables.append(_table(path, value))
    else:
        scalars.append((path or "value", text_of(value)))


def _table(title: str, records: list[Mapping]) -> dict[str, Any]:
    columns: list[str] = []
    for rec in records:
        columns += [str(k) for k in rec if str(k) not in columns]
    return {
        "title": title,
        "columns": columns,
        "rows": [[text_of(mapping_of(rec).get(c)) for c in columns] for rec in records],
    }
