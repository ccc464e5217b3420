"""The end of a run in the terminal: the verdict lines, and the legend of the table's less obvious columns.

Formatters return lines; the commands print them. They read the document's `summary`, `noise` and
`completion` sections (mlts.bench.run_record writes them); a document without them (an older file)
gets the lines it can have.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable
from typing import Any

from mlts.records import BenchmarkRow
from mlts.report.terminal import escape

#: The widest a wrapped line gets when the output is not a terminal (a CI log).
DEFAULT_WIDTH = 120


def terminal_width() -> int:
    return max(60, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def ratio_text(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def wrap(text: str, indent: str, width: int | None = None) -> list[str]:
    """`text` on as many lines as it needs, each starting with `indent`: never cut. Control and
    invisible characters (a driver's error message is untrusted) are shown escaped."""
    width = width or terminal_width()
    return textwrap.wrap(
        escape(" ".join(text.split())),
        width=max(len(indent) + 20, width),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def verdict_lines(doc: dict[str, Any], width: int | None = None) -> list[str]:
    """'verdict: …' (verdicts passed, geomean ratio and interval, noise flag), the failures, the noise
    headline and, for a run that did not finish, how far it got."""
    summary, noise, completion = doc.get("summary"), doc.get("noise"), doc.get("completion")
    lines: list[str] = []
    if isinstance(completion, dict) and not completion.get("complete", True):
        lines += wrap(
            f"INCOMPLETE: {completion.get('done')} of {completion.get('planned')} "
            f"({completion.get('reason')})",
            "",
            width,
        )
    if isinstance(summary, dict):
        what = "tests as expected" if doc.get("kind") == "stress" else "verdicts passed"
        parts = [f"{summary['verdicts_passed']} of {summary['verdicts_total']} {what}"]
        if summary.get("geomean_ratio") is not None:
            ci = summary.get("geomean_ci")
            interval = f" [{ratio_text(ci[0])}, {ratio_text(ci[1])}]" if ci else ""
            parts.append(
                f"driver ÷ onnxruntime geomean {ratio_text(summary['geomean_ratio'])}{interval} "
                f"over {summary.get('geomean_rows', '?')} rows"
            )
        noisy = summary.get("noisy")
        parts.append("run noisy: " + ("yes" if noisy else "no" if noisy is not None else "not measured"))
        lines += wrap("verdict: " + " · ".join(parts), "", width)
        failures = summary.get("failures") or []
        if failures:
            lines.append(f"failures ({len(failures)}):")
            for failure in failures:
                lines += wrap(failure, "  ", width)
    if isinstance(noise, dict) and noise.get("noisy"):
        lines += wrap(noise["headline"], "", width)
    return lines


def legend_lines(rows: Iterable[BenchmarkRow], width: int | None = None) -> list[str]:
    """What the benchmark table's columns mean, the ones a first reader cannot guess."""
    rows = list(rows)
    if not rows:
        return []
    items = [
        "median ms [95% CI]: the median latency of one call (LSTM: of one step) and its distribution-free "
        "95% confidence interval, in milliseconds",
    ]
    images = [r for r in rows if not r.step_wise and r.ok]
    if images:
        items.append(
            "top1/top5: share of the test images whose label is the golden one (the float64 reference's "
            "arg-max, or the dataset's ground truth) among the model's first 1 or 5"
        )
        items.append(
            "max|err|: the largest difference from onnxruntime's output; CTS err: that difference as a "
            "multiple of CTS's per-operation tolerance (float32: 1e-5 + 5·2⁻²³·|expected|), at most 1.00x "
            "within it"
        )
    quantized = [r for r in images if _quantized(r)]
    if quantized:
        items.append(
            '8-bit models: max|err| is in quantized units ("81u": 81 steps of the output\'s scale) and '
            "CTS err divides it by CTS's tolerance, 3 units for the MobileNets and 1 otherwise "
            '("27.00x" = 81 / 3); onnxruntime rounds its requantization differently from NNAPI and the '
            "difference grows through the network, so these rows are judged by the accuracy verdict "
            "(RMS deviation from onnxruntime, error against the float64 golden outputs), not by CTS err "
            "(docs/quantization.md)"
        )
        items.append(
            "8-bit models' top1: the zoo's weights are synthetic, without the margin between classes "
            "that training builds, so 8-bit rounding moves many arg-maxes; compare it with onnxruntime's "
            "row of the same model, not with 100%"
        )
    if any(r.reference_inexact for r in rows):
        items.append(
            "!: onnxruntime is not exact for this model on this CPU (the note under its row says why)"
        )
    lines = ["legend:"]
    for item in items:
        lines += wrap(item, "  ", width)
    return lines


def _quantized(row: BenchmarkRow) -> bool:
    ref = row.evaluator("vs_reference")
    return row.quantization is not None or (ref is not None and ref.max_quant_deviation is not None)
