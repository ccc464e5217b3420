"""The results document (results.json): its schema version, writing it safely, and a text table."""

from __future__ import annotations

import json
import math
from pathlib import Path

from mlts.hal.atomic import write_atomic

SCHEMA_VERSION = 1


def write_json_atomic(doc: dict, path: Path) -> None:
    """Write `doc` so that `path` is either the old file or the complete new one, never half."""
    write_atomic(path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def format_table(records: list[dict]) -> list[str]:
    """One line per model x backend: latency and accuracy against the CPU reference.

    "CTS err" is the largest error as a multiple of the CTS tolerance (fp32:
    atol + rtol*|e|; quantized: 1 unit, 3 for MobileNets); at most 1.00x passes.
    For quantized models "max|err|" is in quantized units ("2u") and "vs float"
    is the top-1 agreement with the float model the quantized one was made from.
    """
    w = max([26, *(len(r["model"]) for r in records)])
    header = (
        f"{'model':<{w}} {'backend':<22} {'iters':>5} {'median ms':>10} {'p90 ms':>9} {'mean±std ms':>16} "
        f"{'max|err|':>9} {'top1 agr':>8} {'CTS err':>8} {'vs float':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<{w}} {r['backend']:<22} ERROR {r.get('error', '')}")
            continue
        lat = r["latency_ms"]
        acc = r.get("accuracy") or {}
        ratio = acc.get("cts_ratio")
        mean_std = f"{lat['mean']:.2f}±{lat['std']:.2f}"
        top1 = acc.get("top1_agreement")
        if "max_quant_deviation" in acc:
            err = f"{acc['max_quant_deviation']}u"
        else:
            err = _fmt(acc.get("max_abs_error"), ".2e")
        vs_float = (r.get("quantization") or {}).get("top1_agreement_with_float")
        lines.append(
            f"{r['model']:<{w}} {r['backend']:<22} {r['iterations']:>5} {lat['median']:>10.2f} {lat['p90']:>9.2f} {mean_std:>16} "
            f"{err:>9} {_percent(top1):>8} {'-' if ratio is None else f'{ratio:.2f}x':>8} {_percent(vs_float):>8}"
        )
    return lines
