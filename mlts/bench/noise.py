"""Was this run noisy? Decided from the machine's load and steal and from the reference's own spread.

A run is noisy when at least one of these holds (each gives one reason):

- **load**: the 1-minute load average, at any sample before, during or after the run, exceeded
  both the usable cores and the run's own load (its driver threads and its client, `own_load`) plus
  LOAD_MARGIN: more tasks wanted the CPU than it has, and not only the run's own;
- **steal**: the hypervisor took more than STEAL_MEAN_PCT of the CPU time on average over the
  samples, or more than STEAL_MAX_PCT in one interval;
- **reference spread** (benchmark runs): the CPU reference (onnxruntime) is the yardstick and
  does the same work every call, so its own spread says how steady the machine was. Per reference row
  the median absolute deviation as a share of the median (MAD %) and the drift between the medians of
  the first and the second half of its samples (drift %); the run is noisy when the median over the
  rows of either exceeds USUAL_SPREAD_PCT, a spread onnxruntime stays well within on a quiet machine
  (its MAD is 1-2 % of the median there).

The result is the document's `noise` section: {"noisy", "reasons", "reference_spread", "headline",
"thresholds"}.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from mlts.bench.machine_load import all_samples
from mlts.records import BenchmarkRow

LOAD_MARGIN = 1.0
STEAL_MEAN_PCT = 2.0
STEAL_MAX_PCT = 10.0
USUAL_SPREAD_PCT = 5.0
#: A reference row needs this many samples for its spread and drift to count.
MIN_SAMPLES = 10


def thresholds() -> dict[str, float]:
    return {
        "load_margin": LOAD_MARGIN,
        "steal_mean_pct": STEAL_MEAN_PCT,
        "steal_max_pct": STEAL_MAX_PCT,
        "usual_spread_pct": USUAL_SPREAD_PCT,
    }


def _load_reasons(load: Any, usable_cores: int, own_load: float) -> list[str]:
    samples = all_samples(load)
    out = []
    peaks = [s["loadavg"][0] for s in samples if isinstance(s.get("loadavg"), list) and s["loadavg"]]
    limit = max(float(usable_cores), own_load + LOAD_MARGIN)
    if peaks and max(peaks) > limit:
        out.append(
            f"load average up to {max(peaks):.1f} on {usable_cores} cores (this run's own is about "
            f"{own_load:g}; noisy above {limit:g})"
        )
    steals = [s["steal_pct"] for s in samples if isinstance(s.get("steal_pct"), (int, float))]
    if steals:
        mean, peak = statistics.fmean(steals), max(steals)
        if mean > STEAL_MEAN_PCT or peak > STEAL_MAX_PCT:
            out.append(f"CPU steal {mean:.1f}% on average, up to {peak:.1f}% (the hypervisor's other guests)")
    return out


def _halves_drift(samples: tuple[float, ...]) -> float | None:
    """|median of the first half / median of the second half - 1| in percent."""
    half = len(samples) // 2
    if half < MIN_SAMPLES // 2:
        return None
    first, second = statistics.median(samples[:half]), statistics.median(samples[half:])
    if first <= 0 or second <= 0:
        return None
    return 100.0 * abs(first / second - 1.0)


def reference_spread(rows: Iterable[BenchmarkRow]) -> dict[str, Any] | None:
    """The reference rows' spread: per row MAD % and drift %, their medians and maxima (None: no rows)."""
    mads, drifts, names = [], [], []
    for row in rows:
        lat = row.per_call_latency if row.ok and row.is_reference else None
        if lat is None or lat.n < MIN_SAMPLES or lat.median <= 0:
            continue
        names.append(row.model)
        mads.append(100.0 * lat.mad / lat.median)
        drift = _halves_drift(lat.samples) if lat.samples else None
        if drift is not None:
            drifts.append(drift)
    if not mads:
        return None
    out: dict[str, Any] = {
        "rows": len(mads),
        "mad_pct_median": round(statistics.median(mads), 2),
        "mad_pct_max": round(max(mads), 2),
        "worst_row": names[mads.index(max(mads))],
        "drift_pct_median": round(statistics.median(drifts), 2) if drifts else None,
        "drift_pct_max": round(max(drifts), 2) if drifts else None,
        "usual_pct": USUAL_SPREAD_PCT,
    }
    return out


def _spread_reasons(spread: dict[str, Any] | None) -> list[str]:
    if spread is None:
        return []
    out = []
    if spread["mad_pct_median"] > USUAL_SPREAD_PCT:
        out.append(
            f"onnxruntime's own latency varied: MAD {spread['mad_pct_median']:.1f}% of the median "
            f"(median of {spread['rows']} rows; quiet runs stay within {USUAL_SPREAD_PCT:g}%)"
        )
    drift = spread.get("drift_pct_median")
    if drift is not None and drift > USUAL_SPREAD_PCT:
        out.append(
            f"onnxruntime's median moved {drift:.1f}% between the halves of its runs "
            f"(median of the rows; quiet runs stay within {USUAL_SPREAD_PCT:g}%)"
        )
    return out


#: What a noisy run's headline advises, by the kind of run.
ADVICE = {
    "benchmark": "Compare driver ÷ reference ratios from one run, and repeat before trusting a difference",
    "stress": "Latency-based outcomes (performance-degradation-stress) are less certain; repeat on a quiet "
    "machine before trusting one",
}


def decide(
    load: Any,
    usable_cores: int,
    own_load: float,
    rows: Iterable[BenchmarkRow] = (),
    kind: str = "benchmark",
) -> dict[str, Any]:
    """The `noise` section of a run from its `environment.load` record and (benchmark) its rows."""
    spread = reference_spread(rows)
    reasons = _load_reasons(load, max(1, usable_cores), own_load) + _spread_reasons(spread)
    noisy = bool(reasons)
    if noisy:
        headline = "this run was noisy: " + "; ".join(reasons) + ". " + ADVICE.get(kind, ADVICE["benchmark"])
    elif load is None and spread is None:
        headline = "noise not measured (no /proc load figures and no reference rows)"
    else:
        headline = "this run was quiet: " + _quiet_text(load, usable_cores, spread)
    return {
        "noisy": noisy,
        "reasons": reasons,
        "reference_spread": spread,
        "headline": headline,
        "thresholds": thresholds(),
    }


def _quiet_text(load: Any, usable_cores: int, spread: dict[str, Any] | None) -> str:
    parts = []
    samples = all_samples(load)
    peaks = [s["loadavg"][0] for s in samples if isinstance(s.get("loadavg"), list) and s["loadavg"]]
    if peaks:
        parts.append(f"load average at most {max(peaks):.1f} on {usable_cores} cores")
    steals = [s["steal_pct"] for s in samples if isinstance(s.get("steal_pct"), (int, float))]
    if steals:
        parts.append(f"CPU steal at most {max(steals):.1f}%")
    if spread is not None:
        parts.append(f"onnxruntime's MAD {spread['mad_pct_median']:.1f}% of its median")
    return ", ".join(parts)
