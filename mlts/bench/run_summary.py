"""The verdict of a whole run: verdicts passed, failures, the driver ÷ reference geometric mean, noise.

The document's `summary` section:

    {"verdicts_passed": n, "verdicts_total": m, "failures": ["model/backend: reason", ...],
     "geomean_ratio": x, "geomean_ci": [lo, hi], "geomean_rows": k, "noisy": bool,
     "estimator": "..."}

Benchmark runs: one verdict per driver row (model × driver backend); it passes when the row ran,
its whole-network accuracy verdict passed (when it has one) and it broke no validation rule. A failing
reference row is listed under failures as well (its model has no ratio), though it is not a verdict
of the driver. The geometric mean is over the driver rows whose model's reference row also ran, of
driver median ÷ reference median (per step for LSTM rows, as the report shows them), with a
log-normal 95% interval (GEOMEAN_ESTIMATOR).

Stress runs: one verdict per test; it passes when its outcome is the expected one. No ratio.
"""

from __future__ import annotations

import math
from typing import Any

from mlts.records import BenchmarkRow, ResultsDocument, StressRecord

Z95 = 1.959963984540054

GEOMEAN_ESTIMATOR = (
    "log-normal: each row's log ratio log(driver median / reference median) has a standard error "
    "from the two medians' 95% intervals (half their width on the log scale over 1.96, the two added "
    "in quadrature); the geometric mean exp(mean of the n log ratios) has the interval "
    "exp(mean ± 1.96·√(Σ se²)/n): the uncertainty of measuring these models, not the spread between them"
)


def _log_se(lo: float, hi: float) -> float | None:
    """The standard error of log(median) from its 95% interval [lo, hi] (None when an end is 0)."""
    if lo <= 0 or hi <= 0:
        return None
    return (math.log(hi) - math.log(lo)) / (2 * Z95)


def ratio_rows(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    """Per driver row with a reference: model, backend, ratio = driver ÷ reference median and its log se."""
    refs = {r.model: r for r in rows if r.is_reference and r.ok}
    out = []
    for row in rows:
        ref = refs.get(row.model)
        if row.is_reference or not row.ok or ref is None:
            continue
        d, r = row.per_call_latency, ref.per_call_latency
        if d is None or r is None or d.median <= 0 or r.median <= 0:
            continue
        se_d, se_r = _log_se(*d.median_ci95), _log_se(*r.median_ci95)
        out.append(
            {
                "model": row.model,
                "backend": row.backend,
                "ratio": d.median / r.median,
                "log_se": None if se_d is None or se_r is None else math.hypot(se_d, se_r),
            }
        )
    return out


def geomean(ratios: list[dict[str, Any]]) -> tuple[float | None, list[float] | None]:
    """(geometric mean, its 95% interval) of the rows' ratios; the interval is None when a row has no se."""
    if not ratios:
        return None, None
    logs = [math.log(r["ratio"]) for r in ratios]
    mean = sum(logs) / len(logs)
    ses = [r["log_se"] for r in ratios]
    if any(se is None for se in ses):
        return math.exp(mean), None
    se = math.sqrt(sum(s * s for s in ses)) / len(ses)
    return math.exp(mean), [math.exp(mean - Z95 * se), math.exp(mean + Z95 * se)]


def _row_failure(row: BenchmarkRow) -> str | None:
    """Why a row fails (None: it passes)."""
    if not row.ok:
        return " ".join((row.error or "failed").split())
    reasons = []
    if row.verdict is not None and not row.verdict.passed:
        failed = ", ".join(
            f"{c.metric} {_num(c.value)} (limit {_num(c.limit)})" for c in row.verdict.failures()
        )
        reasons.append(f"accuracy verdict failed: {failed or row.verdict.rule}")
    reasons += [v.message for v in row.violations]
    return "; ".join(reasons) or None


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def benchmark_summary(rows: list[BenchmarkRow], noisy: bool | None) -> dict[str, Any]:
    drivers = [r for r in rows if not r.is_reference]
    failures = []
    passed = 0
    for row in rows:
        why = _row_failure(row)
        if why is None:
            passed += not row.is_reference
            continue
        label = f"{row.model}/{row.backend}"
        failures.append(
            f"{label}: {why}" + (" (the reference: no ratio for this model)" if row.is_reference else "")
        )
    ratios = ratio_rows(rows)
    value, interval = geomean(ratios)
    return {
        "verdicts_passed": passed,
        "verdicts_total": len(drivers),
        "failures": failures,
        "geomean_ratio": value,
        "geomean_ci": interval,
        "geomean_rows": len(ratios),
        "noisy": noisy,
        "estimator": GEOMEAN_ESTIMATOR,
    }


def stress_summary(records: list[StressRecord], noisy: bool | None) -> dict[str, Any]:
    failures = [
        f"{r.test or r.mode + '/' + r.driver}: {r.outcome}, expected {r.expected or 'SUCCESS'}"
        + (f": {' '.join(r.reason.split())}" if r.reason else "")
        for r in records
        if r.unexpected
    ]
    return {
        "verdicts_passed": len(records) - len(failures),
        "verdicts_total": len(records),
        "failures": failures,
        "geomean_ratio": None,
        "geomean_ci": None,
        "geomean_rows": 0,
        "noisy": noisy,
    }


def summarize(doc: ResultsDocument | dict, noisy: bool | None = None) -> dict[str, Any]:
    """The `summary` section of a benchmark or stress document."""
    document = doc if isinstance(doc, ResultsDocument) else ResultsDocument.from_json(doc)
    if document.kind == "stress":
        return stress_summary(document.stress, noisy)
    return benchmark_summary(document.rows, noisy)
