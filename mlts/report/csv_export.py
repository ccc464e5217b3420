"""results.csv: one flat row per model × backend of a results document, units in the column names.

The columns and their order are fixed (COLUMNS, documented in docs/results-schema.md);
a value the record does not have is an empty cell. Stress documents get STRESS_COLUMNS.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd

from mlts.hal.atomic import write_atomic
from mlts.records.benchmark import COMPILE_TIMINGS, TOPK, violation_message
from mlts.report.schema import validate_results

LATENCY_KEYS = ("n", "mean", "std", "median", "mad", "p50", "p90", "p95", "p99", "min", "max")

COLUMNS: tuple[str, ...] = (
    "model",
    "family",
    "backend",
    "status",
    "error",
    "threads",
    "warmup_iterations",
    "warmup_s",
    "iterations",
    "run_s",
    "dataset",
    "dataset_size",
    "labels",
    *(f"latency_ms_{k}" for k in LATENCY_KEYS),
    "latency_ms_ci95_lo",
    "latency_ms_ci95_hi",
    "driver_time_on_device_us_median",
    "driver_time_in_driver_us_median",
    "client_peak_rss_mb",
    "driver_peak_rss_mb",
    *TOPK,
    "golden_mse",
    "golden_max_abs_error",
    "reference_max_abs_error",
    "cts_pass",
    "cts_ratio",
    "reference_exact",
    "phone_error_rate",
    "mel_cep_distortion",
    "log_f0_rms",
    *(f"compile_{k}_ms_median" for k in COMPILE_TIMINGS),
    "cache_size_bytes",
    "validation_errors",
    "verdict_pass",
    "retries",
)

# pandas' nullable dtypes keep integers integers and write an empty cell for a missing value.
TEXT_COLUMNS = {"model", "family", "backend", "status", "error", "dataset", "labels", "validation_errors"}
INTEGER_COLUMNS = {
    "threads",
    "warmup_iterations",
    "iterations",
    "dataset_size",
    "latency_ms_n",
    "cache_size_bytes",
    "retries",
}
BOOLEAN_COLUMNS = {"cts_pass", "reference_exact", "verdict_pass"}

STRESS_COLUMNS: tuple[str, ...] = (
    "mode",
    "model",
    "driver",
    "outcome",
    "expected",
    "reason",
    "duration_s",
    "iterations",
    "signal",
)
STRESS_DTYPES = {"duration_s": "Float64", "iterations": "Int64"}


def _dtype(column: str) -> str:
    if column in TEXT_COLUMNS:
        return "string"
    if column in INTEGER_COLUMNS:
        return "Int64"
    return "boolean" if column in BOOLEAN_COLUMNS else "Float64"


def results_frame(doc: dict) -> pd.DataFrame:
    """The document's records as a table: one row per record, the columns of COLUMNS (or STRESS_COLUMNS).

    The document is validated first (ResultsSchemaError names the first problem).
    Columns have pandas' nullable dtypes (string, Int64, Float64, boolean), so an
    integer column stays integer beside an empty cell.
    """
    validate_results(doc)
    if doc["kind"] == "stress":
        rows = [{k: r.get(k) for k in STRESS_COLUMNS} for r in doc["results"]]
        dtypes = {c: STRESS_DTYPES.get(c, "string") for c in STRESS_COLUMNS}
    else:
        rows = [benchmark_row(r) for r in doc["results"]]
        dtypes = {c: _dtype(c) for c in COLUMNS}
    return pd.DataFrame(rows, columns=list(dtypes), dtype=object).astype(dtypes)


def write_csv(doc: dict, path: str | Path) -> None:
    """Write results_frame(doc) to `path` as UTF-8 CSV, atomically (the old file or the whole new one)."""
    text = io.StringIO()
    results_frame(doc).to_csv(text, index=False, lineterminator="\n")
    write_atomic(path, text.getvalue().encode("utf-8"))


def benchmark_row(rec: dict) -> dict[str, Any]:
    """One benchmark record flattened to COLUMNS; None where the record has no value."""
    dataset = rec.get("dataset") or {}
    row: dict[str, Any] = {
        "model": rec["model"],
        "family": rec.get("family"),
        "backend": rec["backend"],
        "status": rec["status"],
        "error": rec.get("error"),
        "threads": rec.get("threads"),
        "warmup_iterations": (rec.get("warmup") or {}).get("iterations"),
        "warmup_s": (rec.get("warmup") or {}).get("seconds"),
        "iterations": rec.get("iterations", (rec.get("run") or {}).get("iterations")),
        "run_s": (rec.get("run") or {}).get("seconds"),
        "dataset": dataset.get("name"),
        "dataset_size": dataset.get("size"),
        "labels": dataset.get("labels"),
        **_latency(rec.get("latency_ms")),
        **_driver_timing(rec.get("driver_timing_us")),
        "client_peak_rss_mb": (rec.get("memory_mb") or {}).get("client_peak_rss"),
        "driver_peak_rss_mb": (rec.get("memory_mb") or {}).get("driver_peak_rss"),
        **_accuracy(rec.get("accuracy") or {}),
        **_compilation(rec.get("compilation")),
        "validation_errors": "; ".join(violation_message(e) for e in rec.get("validation_errors") or [])
        or None,
        "verdict_pass": (rec.get("verdict") or {}).get("pass"),
        "retries": (rec.get("retries") or {}).get("retries"),
    }
    if rec.get("reference_inexact"):  # every row of the model, onnxruntime's own included
        row["reference_exact"] = False
    return row


def _latency(stats: dict | None) -> dict[str, Any]:
    """latency_ms_<key> for the describe() numbers, and the median's 95% interval as ci95_lo/ci95_hi."""
    stats = stats or {}
    lo, hi = stats.get("median_ci95") or (None, None)
    return {
        **{f"latency_ms_{k}": stats.get(k) for k in LATENCY_KEYS},
        "latency_ms_ci95_lo": lo,
        "latency_ms_ci95_hi": hi,
    }


def _median(stats: Any) -> float | None:
    """The median of a statistics object; None for null, "not measured" or a missing entry."""
    return stats.get("median") if isinstance(stats, dict) else None


def _driver_timing(timing: dict | None) -> dict[str, Any]:
    timing = timing or {}
    return {
        "driver_time_on_device_us_median": _median(timing.get("time_on_device")),
        "driver_time_in_driver_us_median": _median(timing.get("time_in_driver")),
    }


def _accuracy(acc: dict) -> dict[str, Any]:
    """top-k from `topk`; errors from `vs_golden` and `vs_reference`; speech metrics from vs_golden's metric."""
    topk = acc.get("topk") or {}
    golden = acc.get("vs_golden") or {}
    reference = acc.get("vs_reference") or {}
    metric = golden.get("metric") or {}
    return {
        **{k: topk.get(k) for k in TOPK},
        "golden_mse": _error(golden, "mse"),
        "golden_max_abs_error": _error(golden, "max_abs_error"),
        "reference_max_abs_error": _error(reference, "max_abs_error"),
        "cts_pass": reference.get("cts_pass"),
        "cts_ratio": reference.get("cts_ratio"),
        "reference_exact": reference.get("reference_exact"),
        "phone_error_rate": metric.get("phone_error_rate"),
        "mel_cep_distortion": metric.get("mel_cep_distortion"),
        "log_f0_rms": metric.get("log_f0_rms"),
    }


def _error(evaluator: dict, key: str) -> float | None:
    """The evaluator's own `key`, or (LSTM rows, errors per output) the largest over its outputs."""
    if evaluator.get(key) is not None:
        return evaluator[key]
    values = [o[key] for o in (evaluator.get("outputs") or {}).values() if o.get(key) is not None]
    return max(values) if values else None


def _compilation(comp: dict | None) -> dict[str, Any]:
    comp = comp or {}
    return {
        **{f"compile_{k}_ms_median": _median(comp.get(k)) for k in COMPILE_TIMINGS},
        "cache_size_bytes": comp.get("cache_size_bytes"),
    }
