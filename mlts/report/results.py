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


def format_table(records: list[dict]) -> list[str]:
    """One line per model x backend: latency and accuracy against the CPU reference.

    "CTS err" is the largest error as a multiple of the CTS fp32 tolerance
    (at most 1.00x passes CTS's per-operation rule).
    """
    header = f"{'model':<26} {'backend':<22} {'iters':>5} {'median ms':>10} {'p90 ms':>9} {'mean±std ms':>16} {'max|err|':>9} {'top1 agr':>8} {'CTS err':>8}"
    lines = [header, "-" * len(header)]
    for r in records:
        if r.get("status") != "ok":
            lines.append(f"{r['model']:<26} {r['backend']:<22} ERROR {r.get('error', '')}")
            continue
        lat = r["latency_ms"]
        acc = r.get("accuracy") or {}
        ratio = acc.get("cts_ratio")
        mean_std = f"{lat['mean']:.2f}±{lat['std']:.2f}"
        top1 = acc.get("top1_agreement")
        lines.append(
            f"{r['model']:<26} {r['backend']:<22} {r['iterations']:>5} {lat['median']:>10.2f} {lat['p90']:>9.2f} {mean_std:>16} "
            f"{_fmt(acc.get('max_abs_error'), '.2e'):>9} {_fmt(top1 * 100 if top1 is not None else None, '.0f') + ('%' if top1 is not None else ''):>8} "
            f"{'-' if ratio is None else f'{ratio:.2f}x':>8}"
        )
    return lines
