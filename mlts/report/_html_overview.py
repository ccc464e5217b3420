"""The report's first screen: per model and driver, latency against the reference, accuracy verdict, failures.

Read from typed records (mlts.records.BenchmarkRow, validated with the document). The latency ratio is the driver's
median over the reference's (cpu:onnxruntime) median of the same model, with the conservative interval
[driver_lo / ref_hi, driver_hi / ref_lo] built from the two medians' 95% intervals (as `mlts compare`
does): "faster" when it lies below 1, "slower" above, "same" when it contains 1.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from markupsafe import Markup

from mlts.records import BenchmarkRow
from mlts.report._html_format import DASH, is_baseline
from mlts.report._text_width import text_width

PLOT_WIDTH = 420
LABEL_FONT_PX = 12
MIN_LABEL_WIDTH = 120
VALUE_WIDTH = 56  # right of the plot: the ratio printed after the longest whisker
ROW_HEIGHT = 22
AXIS_HEIGHT = 42
RULE_NAME_MAX = 32  # a verdict's rule this short and without spaces is a name, shown under the verdict


def ratio_interval(driver: BenchmarkRow, ref: BenchmarkRow) -> dict[str, Any] | None:
    """{ratio, lo, hi, verdict} of driver median ÷ reference median, or None without both latencies."""
    d, r = driver.per_call_latency, ref.per_call_latency
    if d is None or r is None or r.median <= 0:
        return None
    (d_lo, d_hi), (r_lo, r_hi) = d.median_ci95, r.median_ci95
    lo = d_lo / r_hi if r_hi > 0 else None
    hi = d_hi / r_lo if r_lo > 0 else None
    if hi is not None and hi < 1:
        verdict = "faster"
    elif lo is not None and lo > 1:
        verdict = "slower"
    else:
        verdict = "same"
    return {"ratio": d.median / r.median, "lo": lo, "hi": hi, "verdict": verdict}


def _ratio_text(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def _verdict(row: BenchmarkRow) -> tuple[str, str, str, str]:
    """(text, css class, detail, note) of the row's whole-network accuracy verdict; the note, shown
    under the verdict, names the rule that decided (when it is a short name, e.g. "dense-error") and
    the checks that failed."""
    if not row.ok:
        return "error", "fail", "", ""
    v = row.verdict
    if v is None:
        return DASH, "", "no verdict (no golden outputs or reference figures to judge against)", ""
    rule = v.rule if len(v.rule) <= RULE_NAME_MAX and " " not in v.rule else ""
    if v.passed:
        return "pass", "pass", v.rule, rule
    failed = ", ".join(c.metric for c in v.failures())
    note = f"{rule}: {failed}" if rule else failed
    return "fail", "fail", f"failed: {failed}. Rule: {v.rule}", note


def _retries(row: BenchmarkRow) -> str:
    r = row.retries
    if r is None or (not r.retries and not r.total_errors):
        return ""
    classes = ", ".join(f"{n} {k}" for k, n in sorted(r.error_classes.items()) if n)
    return f"{r.retries} retried" + (f" ({classes})" if classes else "")


def overview(records: list[BenchmarkRow]) -> dict[str, Any]:
    """Headline counts, one line per driver row (ratio, verdict, failures, retries) and the ratio chart."""
    refs = {r.model: r for r in records if is_baseline(r)}
    lines = []
    for row in records:
        if is_baseline(row):
            continue
        ref = refs.get(row.model)
        ratio = ratio_interval(row, ref) if row.ok and ref is not None and ref.ok else None
        verdict, verdict_cls, verdict_detail, verdict_note = _verdict(row)
        problems = [row.error or "failed"] if not row.ok else [v.message for v in row.violations]
        lines.append(
            {
                "model": row.model,
                "backend": row.backend,
                "ratio": ratio,
                "ratio_text": DASH if ratio is None else _ratio_text(ratio["ratio"]),
                "interval_text": ""
                if ratio is None
                else f"[{_ratio_text(ratio['lo'])} – {_ratio_text(ratio['hi'])}]",
                "speed_cls": "" if ratio is None else ratio["verdict"],
                "verdict": verdict,
                "verdict_cls": verdict_cls,
                "verdict_detail": verdict_detail,
                "verdict_note": verdict_note,
                "problems": problems,
                "retries": _retries(row),
            }
        )
    failed_refs = [
        {"model": r.model, "backend": r.backend, "error": r.error or "failed"}
        for r in refs.values()
        if not r.ok
    ]
    verdicts = [ln for ln in lines if ln["verdict"] in ("pass", "fail")]
    headline = [
        ("models", str(len({r.model for r in records}))),
        ("driver runs", str(len(lines))),
    ]
    if verdicts:
        passed = sum(ln["verdict"] == "pass" for ln in verdicts)
        headline.append(("accuracy verdicts passed", f"{passed} of {len(verdicts)}"))
    headline += [
        ("failed runs", str(sum(not r.ok for r in records))),
        ("runs with validation errors", str(sum(bool(r.violations) for r in records))),
    ]
    retried = sum((r.retries.retries if r.retries else 0) for r in records)
    if retried:
        headline.append(("transient errors retried", str(retried)))
    return {
        "headline": headline,
        "lines": lines,
        "failed_references": failed_refs,
        "chart": Markup(ratio_chart(lines)) if any(ln["ratio"] for ln in lines) else "",
    }


def ratio_chart(lines: list[dict[str, Any]]) -> str:
    """An SVG dot-and-whisker chart of driver ÷ reference latency on a log axis, 1× marked.

    The label column is as wide as the longest "model · driver" label (mlts.report._text_width), so no
    label is clipped; the SVG's natural width is that column plus the plot, and the page scales it down
    (text included) only where the window is narrower.
    """
    shown = [ln for ln in lines if ln["ratio"]]
    values = [1.0]
    for ln in shown:
        values += [v for v in (ln["ratio"]["ratio"], ln["ratio"]["lo"], ln["ratio"]["hi"]) if v]
    lo_exp = math.floor(math.log10(min(values)) * 2) / 2 - 0.1
    hi_exp = math.ceil(math.log10(max(values)) * 2) / 2 + 0.1
    labels = [f"{ln['model']} · {ln['backend'].removeprefix('driver:')}" for ln in shown]
    label_w = max([MIN_LABEL_WIDTH, *(text_width(t, LABEL_FONT_PX) + 16 for t in labels)])
    label_w = math.ceil(label_w)
    width = label_w + PLOT_WIDTH + VALUE_WIDTH

    def x(v: float) -> float:
        return label_w + PLOT_WIDTH * (math.log10(v) - lo_exp) / (hi_exp - lo_exp)

    height = ROW_HEIGHT * len(shown) + AXIS_HEIGHT + 8
    parts = [
        f'<svg class="chart ratio" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="driver latency divided by the reference latency, per model">',
        f'<line x1="{x(1):.1f}" y1="4" x2="{x(1):.1f}" y2="{height - AXIS_HEIGHT + 4}" stroke="#5b6670" '
        'stroke-dasharray="4 3"/>',
    ]
    for i, (ln, label) in enumerate(zip(shown, labels, strict=True)):
        y = 8 + ROW_HEIGHT * i + ROW_HEIGHT / 2
        r = ln["ratio"]
        colour = {"faster": "#16632d", "slower": "#9c2314"}.get(r["verdict"], "#4a545c")
        parts.append(
            f'<text class="label" x="{label_w - 8}" y="{y + 4:.1f}" text-anchor="end" '
            f'font-size="{LABEL_FONT_PX}">{escape(label)}</text>'
        )
        lo = x(r["lo"]) if r["lo"] else label_w
        hi = x(r["hi"]) if r["hi"] else label_w + PLOT_WIDTH
        parts.append(
            f'<line x1="{lo:.1f}" y1="{y:.1f}" x2="{hi:.1f}" y2="{y:.1f}" stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<circle cx="{x(r["ratio"]):.1f}" cy="{y:.1f}" r="4" fill="{colour}"/>')
        parts.append(
            f'<text class="value" x="{min(hi + 6, width - VALUE_WIDTH + 6):.1f}" y="{y + 4:.1f}" '
            f'font-size="11" fill="{colour}">{escape(_ratio_text(r["ratio"]))}</text>'
        )
    axis_y = height - AXIS_HEIGHT + 8
    parts.append(
        f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + PLOT_WIDTH}" y2="{axis_y}" stroke="#aab4bc"/>'
    )
    for tick in _ticks(lo_exp, hi_exp):
        parts.append(
            f'<text class="tick" x="{x(tick):.1f}" y="{axis_y + 14}" text-anchor="middle" font-size="11">'
            f"{escape(_ratio_text(tick))}</text>"
        )
    parts.append(
        f'<text class="axis-title" x="{label_w + PLOT_WIDTH / 2:.1f}" y="{axis_y + 28}" text-anchor="middle" '
        'font-size="11">driver median ÷ onnxruntime median (log scale; left of 1× is faster)</text></svg>'
    )
    return "".join(parts)


def _ticks(lo_exp: float, hi_exp: float) -> list[float]:
    """1, 2, 5 × powers of ten inside the axis, thinned to at most 8."""
    ticks = [
        m * 10.0**e
        for e in range(math.floor(lo_exp), math.ceil(hi_exp) + 1)
        for m in (1, 2, 5)
        if lo_exp <= math.log10(m * 10.0**e) <= hi_exp
    ]
    step = max(1, math.ceil(len(ticks) / 8))
    return ticks[::step]
