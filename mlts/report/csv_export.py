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
from mlts.records import BenchmarkRow, Compilation, DriverTiming, Evaluator, ResultsDocument, Stats
from mlts.records.benchmark import COMPILE_TIMINGS, TOPK

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
    "verdict_rule",
    "output_kind",
    "retries",
    "reference",
    "endpoint",
    "host",
    "transport",
)

# pandas' nullable dtypes keep integers integers and write an empty cell for a missing value.
TEXT_COLUMNS = {
    "model",
    "family",
    "backend",
    "status",
    "error",
    "dataset",
    "labels",
    "validation_errors",
    "reference",
    "endpoint",
    "host",
    "transport",
    "verdict_rule",
    "output_kind",
}
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


def results_frame(doc: dict | ResultsDocument) -> pd.DataFrame:
    """The document's records as a table: one row per record, the columns of COLUMNS (or STRESS_COLUMNS).

    The document is read into records first (ResultsSchemaError names the first problem); the
    columns are read from the records' fields. Columns have pandas' nullable dtypes (string, Int64,
    Float64, boolean), so an integer column stays integer beside an empty cell.
    """
    parsed = doc if isinstance(doc, ResultsDocument) else ResultsDocument.from_json(doc)
    if parsed.kind == "stress":
        rows = [{k: getattr(r, k) for k in STRESS_COLUMNS} for r in parsed.stress]
        dtypes = {c: STRESS_DTYPES.get(c, "string") for c in STRESS_COLUMNS}
    else:
        rows = [benchmark_row(r) for r in parsed.rows]
        dtypes = {c: _dtype(c) for c in COLUMNS}
    return pd.DataFrame(rows, columns=list(dtypes), dtype=object).astype(dtypes)


def write_csv(doc: dict | ResultsDocument, path: str | Path) -> None:
    """Write results_frame(doc) to `path` as UTF-8 CSV, atomically (the old file or the whole new one)."""
    text = io.StringIO()
    results_frame(doc).to_csv(text, index=False, lineterminator="\n")
    write_atomic(path, text.getvalue().encode("utf-8"))


def benchmark_row(rec: BenchmarkRow) -> dict[str, Any]:
    """One benchmark record flattened to COLUMNS; None where the record has no value."""
    dataset, warmup, run, memory = rec.dataset, rec.warmup, rec.run, rec.memory_mb
    row: dict[str, Any] = {
        "model": rec.model,
        "family": rec.family,
        "backend": rec.backend,
        "status": rec.status,
        "error": rec.error,
        "threads": rec.threads,
        "warmup_iterations": warmup and warmup.iterations,
        "warmup_s": warmup and warmup.seconds,
        "iterations": rec.iterations if rec.iterations is not None else run and run.iterations,
        "run_s": run and run.seconds,
        "dataset": dataset and dataset.name,
        "dataset_size": dataset and dataset.size,
        "labels": dataset and dataset.labels,
        **_latency(rec.latency_ms),
        **_driver_timing(rec.driver_timing_us),
        "client_peak_rss_mb": memory and memory.client_peak_rss,
        "driver_peak_rss_mb": memory and memory.driver_peak_rss,
        **_accuracy(rec),
        **_compilation(rec.compilation),
        "validation_errors": "; ".join(v.message for v in rec.violations) or None,
        "verdict_pass": rec.verdict and rec.verdict.passed,
        "verdict_rule": rec.verdict and rec.verdict.rule_name,
        "output_kind": rec.verdict and rec.verdict.output_kind,
        "retries": rec.retries and rec.retries.retries,
        "reference": rec.reference,
        # Where the backend ran: the lab device (or driver) name, its host and transport.
        "endpoint": rec.endpoint and rec.endpoint.name,
        "host": rec.endpoint and rec.endpoint.host,
        "transport": rec.endpoint and rec.endpoint.transport,
    }
    if rec.reference_inexact:  # every row of the model, onnxruntime's own included
        row["reference_exact"] = False
    return row


def _latency(stats: Stats | None) -> dict[str, Any]:
    """latency_ms_<key> for the describe() numbers, and the median's 95% interval as ci95_lo/ci95_hi."""
    lo, hi = stats.median_ci95 if stats is not None else (None, None)
    return {
        **{f"latency_ms_{k}": getattr(stats, k) if stats is not None else None for k in LATENCY_KEYS},
        "latency_ms_ci95_lo": lo,
        "latency_ms_ci95_hi": hi,
    }


def _median(stats: Stats | str | None) -> float | None:
    """The median of statistics; None for null, "not measured" or a missing entry."""
    return stats.median if isinstance(stats, Stats) else None


def _driver_timing(timing: DriverTiming | None) -> dict[str, Any]:
    return {
        "driver_time_on_device_us_median": _median(timing.time_on_device) if timing else None,
        "driver_time_in_driver_us_median": _median(timing.time_in_driver) if timing else None,
    }


def _accuracy(rec: BenchmarkRow) -> dict[str, Any]:
    """top-k from `topk`; errors from `vs_golden` and `vs_reference`; speech metrics from vs_golden's metric."""
    topk, golden, reference = rec.evaluator("topk"), rec.evaluator("vs_golden"), rec.evaluator("vs_reference")
    metric = golden.metric if golden is not None else None
    return {
        **{k: getattr(topk, k) if topk is not None else None for k in TOPK},
        "golden_mse": _error(golden, "mse"),
        "golden_max_abs_error": _error(golden, "max_abs_error"),
        "reference_max_abs_error": _error(reference, "max_abs_error"),
        "cts_pass": reference and reference.cts_pass,
        "cts_ratio": reference and reference.cts_ratio,
        "reference_exact": reference and reference.reference_exact,
        "phone_error_rate": metric and metric.phone_error_rate,
        "mel_cep_distortion": metric and metric.mel_cep_distortion,
        "log_f0_rms": metric and metric.log_f0_rms,
    }


def _error(evaluator: Evaluator | None, key: str) -> float | None:
    """The evaluator's own `key`, or (LSTM rows, errors per output) the largest over its outputs."""
    if evaluator is None:
        return None
    if getattr(evaluator, key) is not None:
        return getattr(evaluator, key)
    values = [getattr(o, key) for o in (evaluator.outputs or {}).values() if getattr(o, key) is not None]
    return max(values) if values else None


def _compilation(comp: Compilation | None) -> dict[str, Any]:
    return {
        **{f"compile_{k}_ms_median": _median(getattr(comp, k) if comp else None) for k in COMPILE_TIMINGS},
        "cache_size_bytes": comp and comp.cache_size_bytes,
    }
