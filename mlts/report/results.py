"""The results document (results.json): its schema version, writing it safely, and a text table."""

from __future__ import annotations

import json
import math
from pathlib import Path

from mlts.hal.atomic import write_atomic
from mlts.records import SCHEMA_VERSION  # noqa: F401  (re-exported: the version written)
from mlts.records.benchmark import violation_message


def write_json_atomic(doc: dict, path: Path) -> None:
    """Write `doc` so that `path` is either the old file or the complete new one, never half."""
    write_atomic(path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _image_table(records: list[dict]) -> list[str]:
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
    w = max([26, *(len(r["model"]) for r in records)])
    header = (
        f"{'model':<{w}} {'backend':<22} {'iters':>5} {'median ms [95% CI]':>24} {'p90 ms':>9} "
        f"{'top1':>6} {'top5':>6} {'max|err|':>9} {'CTS err':>8}"
    )
    lines = [header, "-" * len(header)]
    noted: set[str] = set()
    with_extensions: set[str] = set()
    for r in records:
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<{w}} {r['backend']:<22} ERROR {r.get('error', '')}")
            continue
        lat = r["latency_ms"]
        acc = r.get("accuracy") or {}
        topk = acc.get("topk") or {}
        ref = acc.get("vs_reference") or {}
        ratio = ref.get("cts_ratio")
        lo, hi = lat["median_ci95"]
        median = f"{lat['median']:.2f} [{lo:.2f}, {hi:.2f}]"
        if "max_quant_deviation" in ref:
            err = f"{ref['max_quant_deviation']}u"
        else:
            err = _fmt(ref.get("max_abs_error"), ".2e")
        # "!": onnxruntime is not exact for this model on this CPU, so its side of the comparison is suspect.
        mark = "!" if r.get("reference_inexact") else ""
        lines.append(
            f"{r['model']:<{w}} {r['backend']:<22} {r['iterations']:>5} {median:>24} {lat['p90']:>9.2f} "
            f"{_percent(topk.get('top1')):>6} {_percent(topk.get('top5')):>6} {err + mark:>9} "
            f"{'-' if ratio is None else f'{ratio:.2f}x' + mark:>8}"
        )
        lines += [f"  validation error: {violation_message(e)}" for e in r.get("validation_errors") or []]
        if r.get("extensions") and r["model"] not in with_extensions:
            with_extensions.add(r["model"])
            lines.append(f"  vendor extensions used: {', '.join(r['extensions'])}")
        if r.get("reference_inexact") and r["model"] not in noted:
            noted.add(r["model"])  # once per model: the note is the same on each of its rows
            lines.append(f"  ! reference: {r['reference_inexact']}")
    return lines


def _metric_text(metric: dict | None) -> str:
    if not metric:
        return "-"
    if metric.get("name") == "PhoneErrorRate":
        return f"PER {metric['phone_error_rate']:.2f}%"
    f0 = metric.get("log_f0_rms")
    return f"MCD {metric['mel_cep_distortion']:.1e} F0 {'-' if f0 is None else f'{f0:.1e}'}"


def _max_abs(side: dict | None) -> float | None:
    if not side:
        return None
    return max(o["max_abs_error"] for o in side["outputs"].values())


def _recurrent_table(records: list[dict]) -> list[str]:
    """LSTM models: per-step latency, MLTS's metric vs golden and vs onnxruntime.

    Whole-sequence rows give each sequence's latency divided by its steps.
    """
    w = max([18, *(len(r["model"]) for r in records)])
    b = max([22, *(len(r["backend"]) for r in records)])
    header = (
        f"{'model':<{w}} {'backend':<{b}} {'steps':>6} {'ms/step':>8} {'p90 ms':>8} {'mean±std ms':>14} "
        f"{'vs golden':>24} {'max|err| gold':>13} {'vs onnxruntime':>24} {'max|err| ort':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<{w}} {r['backend']:<{b}} ERROR {r.get('error', '')}")
            continue
        lat = r["step_latency_ms"] if r.get("mode") == "whole-sequence" else r["latency_ms"]
        acc = r.get("accuracy") or {}
        gold, ort = acc.get("vs_golden"), acc.get("vs_reference")
        mean_std = f"{lat['mean']:.3f}±{lat['std']:.3f}"
        lines.append(
            f"{r['model']:<{w}} {r['backend']:<{b}} {r['steps']:>6} {lat['median']:>8.3f} {lat['p90']:>8.3f} "
            f"{mean_std:>14} {_metric_text(gold and gold['metric']):>24} {_fmt(_max_abs(gold), '.2e'):>13} "
            f"{_metric_text(ort and ort['metric']):>24} {_fmt(_max_abs(ort), '.2e'):>12}"
        )
        dm = r.get("device_memory")
        if dm:
            lines.append(
                f"  state in driver buffers: {dm['step_latency_saved_ms']:+.3f} ms/step saved against "
                f"{dm['client_state_backend']}; outputs bit-equal: {'yes' if dm['bit_equal_to_client_state'] else 'NO'}"
            )
        lines += [f"  validation error: {violation_message(e)}" for e in r.get("validation_errors") or []]
    return lines


def format_table(records: list[dict]) -> list[str]:
    """The image models' table, then (when any ran) the step-by-step LSTM models' table."""
    # A failed LSTM run has no mode: it goes with its model's other rows.
    lstm_models = {r["model"] for r in records if r.get("mode") in ("step-by-step", "whole-sequence")}
    recurrent = [r for r in records if r["model"] in lstm_models]
    images = [r for r in records if r["model"] not in lstm_models]
    lines = _image_table(images) if images else []
    if recurrent:
        lines += ([""] if lines else []) + _recurrent_table(recurrent)
    return lines
