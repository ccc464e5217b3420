"""The HTML report's inference tables: one per model family, accuracy columns and the baseline difference.

The tables read the typed records of the document (`mlts.records.BenchmarkRow`), already validated.
The difference against the CPU baseline is median - baseline median, in ms and in % of the
baseline median; it is "same" when the two medians' 95% confidence intervals overlap, else
"better" (faster) or "worse".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mlts.records import BenchmarkRow, Evaluator, Stats
from mlts.report._html_format import (
    DASH,
    anchor_for,
    is_baseline,
    mapping_of,
    number_of,
    percent_of,
    stat_of,
    text_of,
)

# --- inference tables -------------------------------------------------------------------------------

Cell = tuple[str, str]  # (text, css class)


@dataclass(frozen=True)
class Column:
    """An accuracy column: shown in a family's table when any of its rows has a value for it."""

    group: str
    header: str
    hint: str
    cell: Callable[[BenchmarkRow], Cell | None]  # None when the row has no value for it


def _evaluator(row: BenchmarkRow, name: str) -> Evaluator | None:
    found = row.evaluator(name)
    return found if isinstance(found, Evaluator) else None


def _figure(row: BenchmarkRow, name: str, key: str) -> float | None:
    """A number of evaluator `name` of the row, None when absent or the HAL's "no measurement"."""
    ev = _evaluator(row, name)
    return None if ev is None else number_of(getattr(ev, key))


def _topk_cell(k: int) -> Callable[[BenchmarkRow], Cell | None]:
    def cell(row: BenchmarkRow) -> Cell | None:
        value = _figure(row, "topk", f"top{k}")
        return None if value is None else (f"{100.0 * value:.1f}", "")

    return cell


def _golden_error(row: BenchmarkRow) -> Cell | None:
    """Largest |actual - golden| of the row: the whole output's, or the maximum over named outputs."""
    ev = _evaluator(row, "vs_golden")
    value = None
    if ev is not None:
        value = number_of(ev.max_abs_error)
        if value is None and ev.outputs:
            found = [number_of(o.max_abs_error) for o in ev.outputs.values()]
            value = max((v for v in found if v is not None), default=None)
    return None if value is None else (f"{value:.2e}", "")


def _cts_ratio(row: BenchmarkRow) -> Cell | None:
    """Largest error as a multiple of CTS's per-element tolerance: a figure, not the verdict (a whole
    network usually lands above 1x), so it is not marked pass or fail."""
    ratio = _figure(row, "vs_reference", "cts_ratio")
    return None if ratio is None else (f"{ratio:.2f}×", "")


def _verdict_cell(row: BenchmarkRow) -> Cell | None:
    """The whole-network accuracy verdict (docs/results-schema.md): pass or fail, marked so."""
    if row.verdict is None:
        return None
    return ("pass", "pass") if row.verdict.passed else ("fail", "fail")


def _ref_agreement(row: BenchmarkRow) -> Cell | None:
    text = percent_of(_figure(row, "vs_reference", "top1_agreement"))
    return None if text is None else (text, "")


def _quant_units(row: BenchmarkRow) -> Cell | None:
    units = _figure(row, "vs_reference", "max_quant_deviation")
    return None if units is None else (f"{units:g} u", "")


def _vs_float(row: BenchmarkRow) -> Cell | None:
    text = percent_of(mapping_of(row.quantization).get("top1_agreement_with_float"))
    return None if text is None else (text, "")


def _metric_cell(side: str, key: str, unit: str) -> Callable[[BenchmarkRow], Cell | None]:
    """A recurrent model's MLTS metric against golden outputs or onnxruntime, marked by its limit check."""

    def cell(row: BenchmarkRow) -> Cell | None:
        ev = _evaluator(row, side)
        metric = None if ev is None else ev.metric
        value = None if metric is None else number_of(getattr(metric, key))
        if metric is None or value is None:
            return None
        ok = metric.ok
        return f"{value:.3g}{unit}", "" if ok is None else ("pass" if ok else "fail")

    return cell


TOPK, GOLDEN, REFERENCE, QUANT = "top-k accuracy (%)", "vs golden", "vs onnxruntime", "quantized"
ACCURACY_COLUMNS = (
    *(
        Column(
            TOPK,
            f"{k}",
            f"share of the test inputs whose label (the golden output's arg-max, or the dataset's ground truth) "
            f"is among the {k} highest scores",
            _topk_cell(k),
        )
        for k in range(1, 6)
    ),
    Column(GOLDEN, "max |err|", "largest absolute error against the float64 golden outputs", _golden_error),
    Column(GOLDEN, "PER", "PhoneErrorRate (limit 5%)", _metric_cell("vs_golden", "phone_error_rate", "%")),
    Column(
        GOLDEN,
        "MCD",
        "mel-cepstral distortion (limit 4.0)",
        _metric_cell("vs_golden", "mel_cep_distortion", ""),
    ),
    Column(
        GOLDEN,
        "logF0",
        "logF0 RMS over voiced frames (limit 0.01)",
        _metric_cell("vs_golden", "log_f0_rms", ""),
    ),
    Column(
        REFERENCE,
        "verdict",
        "whole-network accuracy verdict: error against golden relative to onnxruntime's (see the overview)",
        _verdict_cell,
    ),
    Column(
        REFERENCE,
        "CTS ratio",
        "largest error as a multiple of CTS's per-element tolerance (a figure for single operations; "
        "whole networks usually exceed 1x)",
        _cts_ratio,
    ),
    Column(REFERENCE, "top-1 agr.", "share of inputs whose top-1 class equals onnxruntime's", _ref_agreement),
    Column(
        REFERENCE,
        "max dev",
        "largest difference from onnxruntime over every output value, in quantized units (u)",
        _quant_units,
    ),
    Column(REFERENCE, "PER", "PhoneErrorRate", _metric_cell("vs_reference", "phone_error_rate", "%")),
    Column(
        REFERENCE, "MCD", "mel-cepstral distortion", _metric_cell("vs_reference", "mel_cep_distortion", "")
    ),
    Column(
        REFERENCE, "logF0", "logF0 RMS over voiced frames", _metric_cell("vs_reference", "log_f0_rms", "")
    ),
    Column(
        QUANT,
        "vs float",
        "top-1 against the golden labels of the float model this one was quantized from (the top-1 column again)",
        _vs_float,
    ),
)

#: The legend of the columns every inference table has.
FIXED_LEGEND = (
    ("iters", "timed calls (steps, for recurrent models run step by step)"),
    ("test set", "inputs the accuracy pass ran on"),
    (
        "median [95% CI]",
        "median latency in ms (per step for recurrent models) and its distribution-free 95% confidence interval; "
        "* fewer than 6 samples: the interval [min, max] covers the median with less than 95%",
    ),
    ("p90", "90th percentile latency in ms (nearest rank)"),
    (
        "vs CPU baseline",
        "median minus onnxruntime's median on the same model, in ms and in % of it; better / worse when the two "
        "medians' 95% intervals do not overlap, same when they do (the difference is within measurement noise)",
    ),
)


def family_tables(rows: list[BenchmarkRow]) -> list[dict[str, Any]]:
    """One table per model family, families and rows in the order they appear in the document."""
    used: set[str] = set()
    groups: dict[str, list[BenchmarkRow]] = {}
    for row in rows:
        groups.setdefault(row.family or row.model, []).append(row)
    out = []
    for family, members in groups.items():
        columns = [c for c in ACCURACY_COLUMNS if any(r.ok and c.cell(r) is not None for r in members)]
        baselines = _baselines(members)
        legend = [*FIXED_LEGEND, *_column_legend(columns)]
        if any(r.reference_inexact for r in members):
            legend.append(
                ("†", "onnxruntime does not compute this model exactly on this CPU (see the note below)")
            )
        out.append(
            {
                "name": family,
                "anchor": anchor_for("family", family, used),
                "groups": _groups(columns),
                "columns": [{"header": c.header, "hint": c.hint} for c in columns],
                "rows": [_row_view(r, columns, baselines.get(r.model)) for r in members],
                "legend": legend,
                "quantized": any(_is_quantized(r) for r in members),
            }
        )
    return out


def _column_legend(columns: list[Column]) -> list[tuple[str, str]]:
    """(term, meaning) per shown accuracy column; the top-k columns share one line."""
    topk = [c.header for c in columns if c.group == TOPK]
    out = []
    if topk:
        out.append(
            (
                f"{TOPK}: {', '.join(topk)}",
                "share of the test inputs whose label (the golden output's arg-max, or the dataset's ground "
                "truth) is among the k highest scores, k the column's number",
            )
        )
    return out + [(f"{c.group}: {c.header}", c.hint) for c in columns if c.group != TOPK]


def _is_quantized(row: BenchmarkRow) -> bool:
    """An 8-bit model's row: quantized from a float model, or compared with onnxruntime in quantized units."""
    return bool(row.quantization) or _figure(row, "vs_reference", "max_quant_deviation") is not None


def _groups(columns: list[Column]) -> list[tuple[str, int]]:
    """(group name, how many consecutive columns it spans), for the table's first header row."""
    groups: list[tuple[str, int]] = []
    for c in columns:
        if groups and groups[-1][0] == c.group:
            groups[-1] = (c.group, groups[-1][1] + 1)
        else:
            groups.append((c.group, 1))
    return groups


def _baselines(rows: list[BenchmarkRow]) -> dict[str, Stats]:
    """model -> the latency statistics of its successful cpu:onnxruntime row."""
    out: dict[str, Stats] = {}
    for r in rows:
        lat = r.per_call_latency
        if is_baseline(r) and r.ok and lat is not None and stat_of(lat) is not None:
            out.setdefault(r.model, lat)
    return out


def _row_view(row: BenchmarkRow, columns: list[Column], baseline: Stats | None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "model": row.model,
        "backend": row.backend,
        "ok": row.ok,
        "error": row.error or row.status,
        "invalid": bool(row.validation_errors),
    }
    if not row.ok:
        return view
    lat = row.per_call_latency
    per_step = row.latency_unit == "step" or row.step_wise
    view.update(
        {
            "iterations": text_of(row.iterations),
            "size": text_of(None if row.dataset is None else row.dataset.size),
            "latency": stat_of(lat) or {"median": DASH, "ci": DASH, "p90": DASH, "note": ""},
            "unit": "per step" if per_step else "",
            "accuracy": [_mark_inexact(row, c, c.cell(row) or (DASH, "")) for c in columns],
            "diff": _diff(row, lat, baseline),
        }
    )
    return view


def _mark_inexact(row: BenchmarkRow, column: Column, cell: Cell) -> Cell:
    """A cell that compares with onnxruntime, on a row where onnxruntime is not exact: marked with †."""
    if not row.reference_inexact or cell[0] == DASH:
        return cell
    against_reference = column.group == REFERENCE or is_baseline(row)
    return (f"{cell[0]} †", f"{cell[1]} inexact-ref".strip()) if against_reference else cell


def compare_medians(lat: Stats | Mapping, base: Stats | Mapping) -> dict[str, Any]:
    """d = median - base median (ms), 100 * d / base median (%), and the verdict.

    "same" when the 95% CIs of the two medians overlap (lo <= base hi and base lo <= hi; a missing CI
    counts as the median alone), else "better" when d < 0 and "worse" when d > 0.
    """
    m, b = _median(lat), _median(base)
    lo, hi = _ci(lat)
    base_lo, base_hi = _ci(base)
    d = m - b
    verdict = "same" if lo <= base_hi and base_lo <= hi else ("better" if d < 0 else "worse")
    return {"ms": d, "percent": 100.0 * d / b if b > 0 else None, "verdict": verdict}


def _median(stats: Stats | Mapping) -> float:
    return float(stats.median if isinstance(stats, Stats) else stats["median"])


def _ci(stats: Stats | Mapping) -> tuple[float, float]:
    ci = stats.median_ci95 if isinstance(stats, Stats) else stats.get("median_ci95")
    m = _median(stats)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in (number_of(ci[0]), number_of(ci[1])):
        return float(ci[0]), float(ci[1])
    return m, m


def _diff(row: BenchmarkRow, lat: Stats | None, baseline: Stats | None) -> dict[str, str]:
    if is_baseline(row):
        return {"text": "baseline", "cls": "baseline", "verdict": ""}
    if baseline is None or lat is None or stat_of(lat) is None:
        return {"text": DASH, "cls": "", "verdict": ""}
    c = compare_medians(lat, baseline)
    pct = "" if c["percent"] is None else f" ({c['percent']:+.0f}%)"
    return {"text": f"{c['ms']:+.3g} ms{pct}", "cls": c["verdict"], "verdict": c["verdict"]}
