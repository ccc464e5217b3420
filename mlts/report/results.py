"""The results document (results.json): its schema version, writing it safely, and a text table."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from mlts.hal.atomic import write_atomic
from mlts.records import (
    SCHEMA_VERSION,  # noqa: F401  (re-exported: the version written)
    BenchmarkRow,
    Evaluator,
)


def write_json_atomic(doc: dict, path: Path) -> None:
    """Write `doc` so that `path` is either the old file or the complete new one, never half."""
    write_atomic(path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def ms_text(value: float) -> str:
    """Milliseconds: two decimals, three significant digits below 0.1 ms ("0.0213", not "0.02")."""
    if value >= 100:
        return f"{value:.1f}"
    if value >= 0.1 or value <= 0:
        return f"{value:.2f}"
    if value < 1e-4:
        return f"{value:.2e}"
    return f"{value:.{2 - math.floor(math.log10(value))}f}"


def _image_table(records: list[BenchmarkRow]) -> list[str]:
    """One line per model x backend: latency, top-k against the labels, error against onnxruntime.

    "median ms [95% CI]" is the median with its distribution-free confidence
    interval. "top1"/"top5" are against the golden labels (the float64
    reference's arg-max) or the dataset's ground truth. "CTS err" is the
    largest error against onnxruntime as a multiple of the CTS tolerance
    (fp32: atol + rtol*|e|; quantized: 1 unit, 3 for MobileNets); at most
    1.00x passes. For quantized models "max|err|" is in quantized units ("2u").
    A "!" after them: onnxruntime is not exact for the model on this CPU (the
    note under the model's first row says why), so its side is the suspect one.
    """
    w = max([26, *(len(r.model) for r in records)])
    b = max([22, *(len(r.backend) for r in records)])
    medians = [_median_text(r) for r in records]
    m = max([24, *(len(t) for t in medians)])
    header = (
        f"{'model':<{w}} {'backend':<{b}} {'iters':>5} {'median ms [95% CI]':>{m}} {'p90 ms':>9} "
        f"{'top1':>6} {'top5':>6} {'max|err|':>9} {'CTS err':>8}"
    )
    lines = [header, "-" * len(header)]
    noted: set[str] = set()
    unscored: set[str] = set()
    with_extensions: set[str] = set()
    for r, median in zip(records, medians, strict=True):
        lat = r.latency_ms
        if not r.ok or lat is None:
            lines.append(f"{r.model:<{w}} {r.backend:<{b}} ERROR {r.error or ''}")
            continue
        topk = r.evaluator("topk")
        ref = r.evaluator("vs_reference")
        ratio = None if ref is None else ref.cts_ratio
        if ref is not None and ref.max_quant_deviation is not None:
            err = f"{ref.max_quant_deviation:g}u"
        else:
            err = _fmt(None if ref is None else ref.max_abs_error, ".2e")
        # "!": onnxruntime is not exact for this model on this CPU, so its side of the comparison is suspect.
        mark = "!" if r.reference_inexact else ""
        lines.append(
            f"{r.model:<{w}} {r.backend:<{b}} {_fmt(r.iterations, 'd'):>5} {median:>{m}} {ms_text(lat.p90):>9} "
            f"{_percent(None if topk is None else topk.top1):>6} {_percent(None if topk is None else topk.top5):>6} "
            f"{err + mark:>9} {'-' if ratio is None else f'{ratio:.2f}x' + mark:>8}"
        )
        if r.verdict is not None and r.verdict.rule_name:
            kind = f", first output {r.verdict.output_kind}" if r.verdict.output_kind else ""
            lines.append(f"  verdict: {'pass' if r.verdict.passed else 'FAIL'} ({r.verdict.rule_name}{kind})")
        lines += [f"  validation error: {e.message}" for e in r.violations]
        if r.reference_unavailable and r.model not in unscored:
            unscored.add(r.model)  # once per model, as the note below
            lines.append(f"  no reference: {r.reference_unavailable}")
        if r.extensions and r.model not in with_extensions:
            with_extensions.add(r.model)
            lines.append(f"  vendor extensions used: {', '.join(r.extensions)}")
        if r.reference_inexact and r.model not in noted:
            noted.add(r.model)  # once per model: the note is the same on each of its rows
            lines.append(f"  ! reference: {r.reference_inexact}")
    return lines


def _median_text(r: BenchmarkRow) -> str:
    lat = r.latency_ms
    if not r.ok or lat is None:
        return ""
    lo, hi = lat.median_ci95
    return f"{ms_text(lat.median)} [{ms_text(lo)}, {ms_text(hi)}]"


def table_legend(records: Sequence[BenchmarkRow]) -> list[str]:
    """The lines under the image models' table that say what its less obvious columns mean."""
    quantized = any(
        (ref := r.evaluator("vs_reference")) is not None and ref.max_quant_deviation is not None
        for r in records
    )
    lines = [
        "top1/top5: share of test images whose label (the golden output's arg-max) is among the model's 1/5 "
        "highest scores.",
        "max|err|: largest absolute error against onnxruntime"
        + ("; for 8-bit models in quantized units (u)." if quantized else "."),
        "CTS err: that error as a multiple of CTS's per-element tolerance (fp32: 1e-5 + 5.96e-7*|e|; 8-bit: "
        "1 unit, 3 for MobileNets); a figure, not the verdict: a whole network usually lands above 1x.",
    ]
    if quantized:
        lines.append(
            "8-bit models: top1/top5 are against the float model's labels; with synthetic weights 8-bit rounding "
            "moves many arg-maxes, so a low top1 is the network's, not the driver's (see docs/quantization.md)."
        )
    if any(r.reference_inexact for r in records):
        lines.append("!: onnxruntime does not compute the model exactly on this CPU (the note says why).")
    return lines


def _metric_text(evaluator: Evaluator | None) -> str:
    metric = None if evaluator is None else evaluator.metric
    if metric is None:
        return "-"
    if metric.name == "PhoneErrorRate":
        return f"PER {_fmt(metric.phone_error_rate, '.2f')}%"
    f0 = metric.log_f0_rms
    return f"MCD {_fmt(metric.mel_cep_distortion, '.1e')} F0 {'-' if f0 is None else f'{f0:.1e}'}"


def _max_abs(evaluator: Evaluator | None) -> float | None:
    return None if evaluator is None else evaluator.largest_output_error()


def _step_ms(value: float) -> str:
    """A step's milliseconds: three decimals, four below 0.1 ms."""
    return f"{value:.3f}" if value >= 0.1 or value == 0 else f"{value:.4f}"


def _recurrent_table(records: list[BenchmarkRow]) -> list[str]:
    """LSTM models: per-step latency, MLTS's metric vs golden and vs onnxruntime.

    Whole-sequence rows give each sequence's latency divided by its steps.
    """
    w = max([18, *(len(r.model) for r in records)])
    b = max([22, *(len(r.backend) for r in records)])
    header = (
        f"{'model':<{w}} {'backend':<{b}} {'steps':>6} {'ms/step':>8} {'p90 ms':>8} {'mean±std ms':>14} "
        f"{'vs golden':>24} {'max|err| gold':>13} {'vs onnxruntime':>24} {'max|err| ort':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        lat = r.per_call_latency
        if not r.ok or lat is None:
            lines.append(f"{r.model:<{w}} {r.backend:<{b}} ERROR {r.error or ''}")
            continue
        gold, ort = r.evaluator("vs_golden"), r.evaluator("vs_reference")
        mean_std = f"{_step_ms(lat.mean)}±{_step_ms(lat.std)}"
        lines.append(
            f"{r.model:<{w}} {r.backend:<{b}} {_fmt(r.steps, 'd'):>6} {_step_ms(lat.median):>8} {_step_ms(lat.p90):>8} "
            f"{mean_std:>14} {_metric_text(gold):>24} {_fmt(_max_abs(gold), '.2e'):>13} "
            f"{_metric_text(ort):>24} {_fmt(_max_abs(ort), '.2e'):>12}"
        )
        dm = r.device_memory
        if dm:
            lines.append(
                f"  state in driver buffers: {dm['step_latency_saved_ms']:+.3f} ms/step saved against "
                f"{dm['client_state_backend']}; outputs bit-equal: {'yes' if dm['bit_equal_to_client_state'] else 'NO'}"
            )
        lines += [f"  validation error: {e.message}" for e in r.violations]
    return lines


def format_table(records: Sequence[Mapping | BenchmarkRow]) -> list[str]:
    """The image models' table, then (when any ran) the step-by-step LSTM models' table.

    Rows given as JSON are read as records first (RecordError, one line naming the field, if one is invalid).
    """
    rows = [
        r if isinstance(r, BenchmarkRow) else BenchmarkRow.from_json(r, f"results[{i}]")
        for i, r in enumerate(records)
    ]
    # A failed LSTM run has no mode: it goes with its model's other rows.
    lstm_models = {r.model for r in rows if r.step_wise}
    recurrent = [r for r in rows if r.model in lstm_models]
    images = [r for r in rows if r.model not in lstm_models]
    lines = _image_table(images) + ["", *table_legend(images)] if images else []
    if recurrent:
        lines += ([""] if lines else []) + _recurrent_table(recurrent)
    return lines
