"""The HTML report's inference tables: one per model family, accuracy columns and the baseline difference.

The difference against the CPU baseline is median - baseline median, in ms and in % of the
baseline median; it is "same" when the two medians' 95% confidence intervals overlap, else
"better" (faster) or "worse".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mlts.report._html_format import (
    BASELINE,
    DASH,
    _anchor,
    _in_order,
    _latency,
    _mapping,
    _number,
    _ok,
    _percent,
    _stat,
    _text,
)

# --- inference tables -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """An accuracy column: shown in a family's table when any of its rows has a value for it."""

    group: str
    header: str
    hint: str
    cell: Callable[[Mapping], tuple[str, str] | None]  # (text, css class) or None when absent


def _acc(row: Mapping, *path: str) -> Any:
    node: Any = row.get("accuracy")
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _topk_cell(k: int) -> Callable[[Mapping], tuple[str, str] | None]:
    def cell(row: Mapping) -> tuple[str, str] | None:
        value = _number(_acc(row, "topk", f"top{k}"))
        return None if value is None else (f"{100.0 * value:.1f}", "")

    return cell


def _golden_error(row: Mapping) -> tuple[str, str] | None:
    """Largest |actual - golden| of the row: the whole output's, or the maximum over named outputs."""
    value = _number(_acc(row, "vs_golden", "max_abs_error"))
    outputs = _acc(row, "vs_golden", "outputs")
    if value is None and isinstance(outputs, Mapping):
        found = [_number(_mapping(o).get("max_abs_error")) for o in outputs.values()]
        value = max((v for v in found if v is not None), default=None)
    return None if value is None else (f"{value:.2e}", "")


def _cts_ratio(row: Mapping) -> tuple[str, str] | None:
    """Largest error as a multiple of CTS's per-element tolerance: a figure, not the verdict (a whole
    network usually lands above 1x), so it is not marked pass or fail."""
    ratio = _number(_acc(row, "vs_reference", "cts_ratio"))
    return None if ratio is None else (f"{ratio:.2f}×", "")


def _verdict_cell(row: Mapping) -> tuple[str, str] | None:
    """The whole-network accuracy verdict (docs/results-schema.md): pass or fail, marked so."""
    verdict = row.get("verdict")
    if not isinstance(verdict, Mapping) or not isinstance(verdict.get("pass"), bool):
        return None
    return ("pass", "pass") if verdict["pass"] else ("fail", "fail")


def _ref_agreement(row: Mapping) -> tuple[str, str] | None:
    text = _percent(_acc(row, "vs_reference", "top1_agreement"))
    return None if text is None else (text, "")


def _quant_units(row: Mapping) -> tuple[str, str] | None:
    units = _number(_acc(row, "vs_reference", "max_quant_deviation"))
    return None if units is None else (f"{units:g} u", "")


def _vs_float(row: Mapping) -> tuple[str, str] | None:
    text = _percent(_mapping(row.get("quantization")).get("top1_agreement_with_float"))
    return None if text is None else (text, "")


def _metric_cell(side: str, key: str, unit: str) -> Callable[[Mapping], tuple[str, str] | None]:
    """A recurrent model's MLTS metric against golden outputs or onnxruntime, marked by its limit check."""

    def cell(row: Mapping) -> tuple[str, str] | None:
        metric = _mapping(_acc(row, side, "metric"))
        value = _number(metric.get(key))
        if value is None:
            return None
        ok = metric.get("ok")
        return f"{value:.3g}{unit}", "" if ok is None else ("pass" if ok else "fail")

    return cell


TOPK, GOLDEN, REFERENCE, QUANT = "top-k accuracy (%)", "vs golden", "vs onnxruntime", "quantized"
ACCURACY_COLUMNS = (
    *(
        Column(TOPK, f"{k}", f"share of inputs whose label is in the top {k}", _topk_cell(k))
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
    Column(REFERENCE, "max dev", "largest deviation in quantized units", _quant_units),
    Column(REFERENCE, "PER", "PhoneErrorRate", _metric_cell("vs_reference", "phone_error_rate", "%")),
    Column(
        REFERENCE, "MCD", "mel-cepstral distortion", _metric_cell("vs_reference", "mel_cep_distortion", "")
    ),
    Column(
        REFERENCE, "logF0", "logF0 RMS over voiced frames", _metric_cell("vs_reference", "log_f0_rms", "")
    ),
    Column(QUANT, "vs float", "top-1 agreement with the float model this one was quantized from", _vs_float),
)


def _families(rows: list[Mapping]) -> list[dict[str, Any]]:
    """One table per model family, families and rows in the order they appear in the document."""
    used: set[str] = set()
    out = []
    for family, members in _in_order(rows, "family").items():
        columns = [c for c in ACCURACY_COLUMNS if any(_ok(r) and c.cell(r) is not None for r in members)]
        baselines = _baselines(members)
        out.append(
            {
                "name": family,
                "anchor": _anchor("family", family, used),
                "groups": _groups(columns),
                "columns": [{"header": c.header, "hint": c.hint} for c in columns],
                "rows": [_row_view(r, columns, baselines.get(str(r.get("model")))) for r in members],
            }
        )
    return out


def _groups(columns: list[Column]) -> list[tuple[str, int]]:
    """(group name, how many consecutive columns it spans), for the table's first header row."""
    groups: list[tuple[str, int]] = []
    for c in columns:
        if groups and groups[-1][0] == c.group:
            groups[-1] = (c.group, groups[-1][1] + 1)
        else:
            groups.append((c.group, 1))
    return groups


def _baselines(rows: list[Mapping]) -> dict[str, Mapping]:
    """model -> the latency statistics of its successful cpu:onnxruntime row."""
    out: dict[str, Mapping] = {}
    for r in rows:
        lat = _latency(r)
        if r.get("backend") == BASELINE and _ok(r) and lat is not None and _stat(lat) is not None:
            out.setdefault(str(r.get("model")), lat)
    return out


def _row_view(row: Mapping, columns: list[Column], baseline: Mapping | None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "model": _text(row.get("model")),
        "backend": _text(row.get("backend")),
        "ok": _ok(row),
        "error": _text(row.get("error") or row.get("status")),
        "invalid": bool(row.get("validation_errors")),
    }
    if not view["ok"]:
        return view
    lat = _latency(row)
    per_step = row.get("latency_unit") == "step" or row.get("mode") in ("step-by-step", "whole-sequence")
    view.update(
        {
            "iterations": _text(row.get("iterations")),
            "size": _text(_mapping(row.get("dataset")).get("size")),
            "latency": _stat(lat) or {"median": DASH, "ci": DASH, "p90": DASH, "note": ""},
            "unit": "per step" if per_step else "",
            "accuracy": [_mark_inexact(row, c, c.cell(row) or (DASH, "")) for c in columns],
            "diff": _diff(row, lat, baseline),
        }
    )
    return view


def _mark_inexact(row: Mapping, column: Column, cell: tuple[str, str]) -> tuple[str, str]:
    """A cell that compares with onnxruntime, on a row where onnxruntime is not exact: marked with †."""
    if not row.get("reference_inexact") or cell[0] == DASH:
        return cell
    against_reference = column.group == REFERENCE or row.get("backend") == BASELINE
    return (f"{cell[0]} †", f"{cell[1]} inexact-ref".strip()) if against_reference else cell


def compare_medians(lat: Mapping, base: Mapping) -> dict[str, Any]:
    """d = median - base median (ms), 100 * d / base median (%), and the verdict.

    "same" when the 95% CIs of the two medians overlap (lo <= base hi and base lo <= hi; a missing CI
    counts as the median alone), else "better" when d < 0 and "worse" when d > 0.
    """
    m, b = float(lat["median"]), float(base["median"])
    lo, hi = _ci(lat)
    base_lo, base_hi = _ci(base)
    d = m - b
    verdict = "same" if lo <= base_hi and base_lo <= hi else ("better" if d < 0 else "worse")
    return {"ms": d, "percent": 100.0 * d / b if b > 0 else None, "verdict": verdict}


def _ci(stats: Mapping) -> tuple[float, float]:
    ci = stats.get("median_ci95")
    m = float(stats["median"])
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in (_number(ci[0]), _number(ci[1])):
        return float(ci[0]), float(ci[1])
    return m, m


def _diff(row: Mapping, lat: Mapping | None, baseline: Mapping | None) -> dict[str, str]:
    if row.get("backend") == BASELINE:
        return {"text": "baseline", "cls": "baseline", "verdict": ""}
    if baseline is None or lat is None or _stat(lat) is None:
        return {"text": DASH, "cls": "", "verdict": ""}
    c = compare_medians(lat, baseline)
    pct = "" if c["percent"] is None else f" ({c['percent']:+.0f}%)"
    return {"text": f"{c['ms']:+.3g} ms{pct}", "cls": c["verdict"], "verdict": c["verdict"]}
