"""The whole-network accuracy verdict of a driver row: judged against float64 golden, relative to the reference.

Per-element CTS rules fit single operations; a whole network accumulates rounding, so a healthy
float32 driver breaks CTS's fp32 rule on most networks and every quantized one breaks CTS's quant8 rule
against onnxruntime (whose requantization rounds differently). The verdict instead asks whether the
driver is as close to the truth as the reference backend is:

- float outputs: the driver's largest error against the float64 golden outputs is at most k times
  onnxruntime's own plus a float32 floor (64 float32 epsilons of the largest golden magnitude, at
  least 1), for the first output and each other one; for a classifier-shaped first output
  (mlts.bench.output_kind) also top-1 agreement with onnxruntime of at least 99% (an input counts
  as agreeing when onnxruntime's score of the driver's class is within the error limit of its best:
  a near-tie is no disagreement) and MLTS's validation rule. Dense maps, boxes, embeddings and
  regressions are judged by their errors alone, so a driver within 1e-7 of onnxruntime never fails.
- 8-bit outputs: the root-mean-square deviation from onnxruntime is at most 1 quantized unit (the
  documented rounding difference moves single values by a unit, rarely more); the driver's RMS error
  against golden (the float model's outputs) is at most 1 unit above onnxruntime's; MLTS's rule holds.
- LSTM rows: per output, the driver's error against golden within k× onnxruntime's plus the floor.

Every check is kept with its value and limit; a failed check is also a validation error.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from mlts.bench.evaluators import VALIDATION_TOLERANCE
from mlts.bench.output_kind import rule_name
from mlts.records.benchmark import BenchmarkRow, Verdict, Violation, violation
from mlts.records.tolerance import WHOLE_NETWORK_FLOAT, WHOLE_NETWORK_QUANT8, WholeNetwork


def _check(metric: str, value: float | None, limit: float, at_least: bool = False) -> dict[str, Any]:
    ok = value is None or (value >= limit if at_least else value <= limit)
    return {"metric": metric, "value": value, "limit": limit, "pass": bool(ok), "at_least": at_least}


def float_rule(p: WholeNetwork = WHOLE_NETWORK_FLOAT, classifier: bool = True) -> str:
    error = (
        f"max|driver - golden| <= {p.k:g} x max|onnxruntime - golden| + {p.floor_eps:g} float32 eps x "
        f"max(1, max|golden|)"
    )
    if not classifier:
        return error + " (every output)"
    return (
        f"{error}; top-1 agreement with onnxruntime >= {p.agreement:g} (near-ties within that limit agree); "
        f"top-1 at most {VALIDATION_TOLERANCE:g} below onnxruntime's (MLTS)"
    )


def quant_rule(p: WholeNetwork = WHOLE_NETWORK_QUANT8) -> str:
    return (
        f"RMS deviation from onnxruntime <= {p.rms_units:g} quantized unit (the rounding difference); "
        f"RMS error against golden <= onnxruntime's + {p.golden_units:g} unit; "
        f"top-1 at most {VALIDATION_TOLERANCE:g} below onnxruntime's (MLTS)"
    )


def _acc(row: dict, name: str) -> dict:
    return (row.get("accuracy") or {}).get(name) or {}


def _mlts_rule(row: dict, ref: dict) -> list[dict]:
    top1, ref_top1 = _acc(row, "topk").get("top1"), _acc(ref, "topk").get("top1")
    if top1 is None or ref_top1 is None:
        return []
    return [_check("top1_below_reference", round(ref_top1 - top1, 12), VALIDATION_TOLERANCE)]


def error_limit(
    reference_error: float, golden_max_abs: float | None, p: WholeNetwork = WHOLE_NETWORK_FLOAT
) -> float:
    """k x onnxruntime's max error against golden + the float32 floor (64 eps x max(1, max|golden|))."""
    return p.k * reference_error + p.floor_rel * max(1.0, float(golden_max_abs or 0.0))


def float_checks(
    row: dict, ref: dict, p: WholeNetwork = WHOLE_NETWORK_FLOAT, classifier: bool = True
) -> list[dict]:
    gold, ref_gold = _acc(row, "vs_golden"), _acc(ref, "vs_golden")
    checks = []
    if gold.get("max_abs_error") is not None and ref_gold.get("max_abs_error") is not None:
        limit = error_limit(ref_gold["max_abs_error"], gold.get("golden_max_abs"), p)
        checks.append(_check("max_abs_error_vs_golden", gold["max_abs_error"], limit))
    # LSTM rows: per output (floor of magnitude 1); models with several outputs: each after the first.
    for key in ("outputs", "other_outputs"):
        for name, out in (gold.get(key) or {}).items():
            ref_out = (ref_gold.get(key) or {}).get(name)
            if ref_out and out.get("max_abs_error") is not None and ref_out.get("max_abs_error") is not None:
                limit = error_limit(ref_out["max_abs_error"], out.get("golden_max_abs"), p)
                checks.append(_check(f"max_abs_error_vs_golden[{name}]", out["max_abs_error"], limit))
    if not classifier:
        return checks
    vs_ref = _acc(row, "vs_reference")
    if vs_ref.get("top1_agreement_within_tolerance") is not None:
        value = vs_ref["top1_agreement_within_tolerance"]
        checks.append(_check("top1_agreement_within_tolerance", value, p.agreement, at_least=True))
    elif vs_ref.get("top1_agreement") is not None:
        checks.append(_check("top1_agreement", vs_ref["top1_agreement"], p.agreement, at_least=True))
    return checks + _mlts_rule(row, ref)


def quant_checks(row: dict, ref: dict, p: WholeNetwork = WHOLE_NETWORK_QUANT8) -> list[dict]:
    vs_ref = _acc(row, "vs_reference")
    checks = []
    if vs_ref.get("rms_quant_deviation") is not None:
        checks.append(_check("rms_quant_deviation", vs_ref["rms_quant_deviation"], p.rms_units))
    scale = vs_ref.get("output_scale")
    gold, ref_gold = _acc(row, "vs_golden"), _acc(ref, "vs_golden")
    if scale and gold.get("mse") is not None and ref_gold.get("mse") is not None:
        gap = (math.sqrt(gold["mse"]) - math.sqrt(ref_gold["mse"])) / scale
        checks.append(_check("rms_error_vs_golden_above_reference_units", gap, p.golden_units))
    return checks + _mlts_rule(row, ref)


def network_verdict(row: dict, ref: dict, kind: str | None = None) -> dict | None:
    """The verdict of driver row `row` against reference row `ref` (both ok), or None with nothing to judge.

    `kind` is what the model's first output is (mlts.bench.output_kind): top-1 checks only for
    "classifier"; None for the LSTM rows, judged output by output ("per-output-error")."""
    if row.get("status") != "ok" or ref.get("status") != "ok":
        return None
    quantized = "max_quant_deviation" in _acc(row, "vs_reference")
    classifier = kind in (None, "classifier")
    if quantized:
        profile, rule, checks = WHOLE_NETWORK_QUANT8.name, quant_rule(), quant_checks(row, ref)
    else:
        profile, rule = WHOLE_NETWORK_FLOAT.name, float_rule(classifier=classifier)
        checks = float_checks(row, ref, classifier=classifier)
    if not checks:
        return None
    verdict = {"pass": all(c["pass"] for c in checks), "profile": profile, "rule": rule, "checks": checks}
    verdict["rule_name"] = rule_name(kind, quantized)
    if kind is not None:
        verdict["output_kind"] = kind
    return verdict


def verdict_errors(verdict: dict) -> list[dict]:
    """A validation error per failed check of `verdict` (not the MLTS rule, which
    evaluators.validation_errors already reports)."""
    errors = []
    for c in verdict["checks"]:
        if not c["pass"] and c["metric"] != "top1_below_reference":
            relation = "below" if c["at_least"] else "above"
            message = (
                f"whole-network verdict: {c['metric']} {c['value']:.3g} is {relation} its limit "
                f"{c['limit']:.3g} ({verdict['profile']})"
            )
            errors.append(violation(message, c["metric"], c["value"], c["limit"]))
    return errors


def with_verdict(row: BenchmarkRow, ref: BenchmarkRow, kind: str | None = None) -> BenchmarkRow:
    """Driver row `row` with its verdict against `ref` (first output of `kind`) and a validation error per
    failed check."""
    verdict = network_verdict(row.to_json(), ref.to_json(), kind)
    if verdict is None:
        return row
    errors = tuple(Violation.from_json(e) for e in verdict_errors(verdict))
    return replace(row, verdict=Verdict.from_json(verdict), validation_errors=row.violations + errors)
