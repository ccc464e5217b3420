"""Documents shaped like a whole run on a loaded machine, for the layout and chart tests of the report.

`full_run_doc` is the model zoo's 29 models on onnxruntime and two drivers with long names, latency
with the spikes of a busy machine (a few samples 100x the median), quantized rows with every accuracy
column, latency warnings on every row and the run-side sections (load, noise, completion, summary).
`wide_validate_doc` is a validate run with every operation x key type cell, `multi_process_stress_doc`
a stress run whose multi-process rows differ only by their process index.
"""

from __future__ import annotations

import numpy as np

from mlts.bench.stats import describe
from mlts.hal.enums import OperationType
from mlts.records import CaseResult, ValidateSection
from mlts.validate.results import results_document

FLOAT = [
    "mobilenet_v1_1.0_224",
    "mobilenet_v1_0.75_192",
    "mobilenet_v1_0.5_160",
    "mobilenet_v1_0.25_128",
    "mobilenet_v2_0.35_128",
    "mobilenet_v2_0.5_160",
    "mobilenet_v2_0.75_192",
    "mobilenet_v2_1.0_224",
]
QUANT_BASES = [
    "mobilenet_v1_1.0_224",
    "mobilenet_v1_0.75_192",
    "mobilenet_v1_0.5_160",
    "mobilenet_v1_0.25_128",
    "mobilenet_v2_1.0_224",
]
QUANT = [f"{m}{suffix}" for suffix in ("_quant", "_quant_signed", "_quant_perchannel") for m in QUANT_BASES]
OTHER = ["gelu_mlp_block", "iterative_refinement"]
DRIVERS = ("driver:sample-all", "driver:sample-float-fast-with-a-long-plugin-name")


def noisy_stats(median_ms: float, n: int, seed: int, spikes: int = 3) -> dict:
    """Latency statistics of `n` calls around `median_ms`, `spikes` of them 40 to 100 times slower."""
    rng = np.random.default_rng(seed)
    ms = median_ms * (1.0 + 0.08 * np.abs(rng.standard_normal(n)))
    ms[rng.choice(n, spikes, replace=False)] = median_ms * rng.uniform(40.0, 100.0, spikes)
    out = describe(list(ms / 1000.0))
    out["samples"] = [float(v) for v in ms]
    return out


def _row(model: str, family: str, backend: str, median_ms: float, seed: int) -> dict:
    latency = noisy_stats(median_ms, 400, seed)
    return {
        "model": model,
        "family": family,
        "backend": backend,
        "status": "ok",
        "threads": 1,
        "warmup": {"iterations": 50, "seconds": 2.0, "target_seconds": 2.0},
        "run": {"iterations": 400, "seconds": 10.0, "min_seconds": 10.0, "min_iterations": 20},
        "iterations": 400,
        "dataset": {"name": "procedural", "size": 100, "labels": "golden"},
        "latency_ms": latency,
        "accuracy": {},
        "validation_errors": [],
        "compilation": None,
        "driver_timing_us": None,
        "memory_mb": {"client_peak_rss": 412.5, "driver_peak_rss": None, "method": "VmHWM after clear_refs"},
    }


def _topk(top1: float) -> dict:
    return {"labels": "golden", "n": 100, **{f"top{k}": min(1.0, top1 + 0.04 * (k - 1)) for k in range(1, 6)}}


def _verdict(passed: bool, quantized: bool) -> dict:
    if quantized:
        rule = "RMS deviation from onnxruntime <= 1 quantized unit; RMS error vs golden <= onnxruntime's + 1 unit"
        checks = [
            {"metric": "rms_quant_deviation", "value": 0.4, "limit": 1.0, "pass": True, "at_least": False},
            {
                "metric": "rms_error_vs_golden",
                "value": 0.02,
                "limit": 0.03,
                "pass": passed,
                "at_least": False,
            },
        ]
        return {"pass": passed, "profile": "quantized", "rule": rule, "checks": checks}
    checks = [{"metric": "top1_agreement", "value": 1.0, "limit": 0.99, "pass": passed, "at_least": True}]
    return {"pass": passed, "profile": "float", "rule": "dense-error", "checks": checks}


def full_run_doc() -> dict:
    """A benchmark document of the whole zoo on a noisy machine, with the run-side sections."""
    rows = []
    seed = 0
    for i, model in enumerate(FLOAT + QUANT + OTHER):
        quantized = model in QUANT
        family = model.split("_")[0] + "_" + model.split("_")[1] + ("_quant" if quantized else "")
        if model in OTHER:
            family = "other"
        ref_ms = 1.0 + 0.3 * i
        ref = _row(model, family, "cpu:onnxruntime", ref_ms, seed := seed + 1)
        ref["accuracy"] = {"topk": _topk(0.37 + 0.01 * i if quantized else 0.94)}
        if quantized:
            base = model.split("_quant")[0]
            ref["quantization"] = {"float_model": base, "top1_agreement_with_float": 0.37 + 0.01 * i}
            ref["reference_inexact"] = "onnxruntime's uint8 x int8 products saturate at 16 bits on this CPU"
        rows.append(ref)
        for backend in DRIVERS:
            drv = _row(model, family, backend, ref_ms * (3.6 if i == 2 else 0.9 + 0.05 * i), seed := seed + 1)
            drv["latency_ms"]["warnings"] = [
                "latency varies: std is 240% of the mean; close other programs or pin the CPU",
                "outliers: max is 96x the median; a busy machine or a garbage collection",
            ]
            drv["compilation"] = None
            drv["driver_timing_us"] = {"time_on_device": "not measured", "time_in_driver": "not measured"}
            drv["verdict"] = _verdict(passed=not (quantized and i == 12), quantized=quantized)
            if quantized:
                drv["accuracy"] = {
                    "topk": _topk(0.37 + 0.01 * i),
                    "vs_golden": {"mse": 1e-4, "max_abs_error": 0.031},
                    "vs_reference": {
                        "max_abs_error": 0.3,
                        "mse": 1e-4,
                        "top1_agreement": 0.88,
                        "max_quant_deviation": 81,
                        "rms_quant_deviation": 0.41,
                        "cts_pass": False,
                        "cts_ratio": 27.0,
                        "tolerance": "|a-e| <= 3 quantized units (CTS quant8)",
                    },
                }
                drv["quantization"] = {
                    "float_model": model.split("_quant")[0],
                    "top1_agreement_with_float": 0.66,
                }
                drv["reference_inexact"] = ref["reference_inexact"]
            else:
                drv["accuracy"] = {
                    "topk": _topk(0.94),
                    "vs_golden": {"mse": 2.0e-13, "max_abs_error": 1.1e-6},
                    "vs_reference": {
                        "max_abs_error": 9.5e-7,
                        "mse": 1.0e-13,
                        "top1_agreement": 1.0,
                        "cts_pass": True,
                        "cts_ratio": 0.41,
                        "tolerance": "|a-e| <= 1e-05 + 5.96e-07*|e| (CTS fp32)",
                    },
                }
            rows.append(drv)
    failures = [
        "mobilenet_v1_0.5_160_quant on driver:sample-all: accuracy verdict failed (rms_error_vs_golden)",
        "mobilenet_v1_0.5_160_quant on driver:sample-float-fast-with-a-long-plugin-name: "
        "accuracy verdict failed (rms_error_vs_golden)",
    ]
    verdicts = sum(1 for r in rows if "verdict" in r)
    return {
        "schema_version": 3,
        "kind": "benchmark",
        "environment": {
            "time_utc": "2026-11-29T08:00:00+00:00",
            "cpu": "Example CPU @ 2.0GHz",
            "machine": "x86_64",
            "cores": 2,
            "usable_cores": 2,
            "os": "Linux 6.1",
            "python": "3.11.7",
            "mlts": "0.1.0",
            "threads": 1,
            "load": {
                "before": {"loadavg": [3.9, 2.1, 1.2], "steal_pct": 0.4, "procs_running": 4},
                "during": [
                    {"loadavg": [4.8, 3.0, 1.5], "steal_pct": 2.5, "procs_running": 5},
                    {"loadavg": [5.2, 3.9, 2.0], "steal_pct": 6.1, "procs_running": 6},
                ],
                "after": {"loadavg": [4.1, 3.7, 2.2], "steal_pct": 1.0, "procs_running": 3},
            },
        },
        "config": {"threads": 1, "warmup_s": 2.0, "duration_s": 10.0, "quick": False, "seed": 0},
        "noise": {
            "noisy": True,
            "reasons": [
                "onnxruntime's median varied 54% between its repeated runs (its usual spread is 5%)",
                "load average 5.2 on 2 cores during the run",
                "CPU steal up to 6.1%",
            ],
            "headline": "this run was noisy: the reference itself varied beyond its usual spread",
        },
        "completion": {
            "complete": False,
            "interrupted": True,
            "planned": 87,
            "done": 58,
            "reason": "interrupted by the user (Ctrl-C)",
        },
        "summary": {
            "verdicts_passed": verdicts - len(failures),
            "verdicts_total": verdicts,
            "failures": failures,
            "geomean_ratio": 1.63,
            "geomean_ci": [1.41, 1.9],
            "noisy": True,
        },
        "results": rows,
    }


KEY_TYPES = (
    "TENSOR_FLOAT32",
    "TENSOR_FLOAT16",
    "TENSOR_INT32",
    "TENSOR_QUANT8_ASYMM",
    "TENSOR_QUANT8_ASYMM_SIGNED",
    "TENSOR_QUANT8_SYMM_PER_CHANNEL",
    "TENSOR_QUANT16_SYMM",
    "TENSOR_QUANT16_ASYMM",
    "TENSOR_BOOL8",
    "TENSOR_QUANT8_SYMM",
)


def wide_validate_doc() -> dict:
    """A validate document with a case for every operation x key type (a few failing)."""
    cases = []
    for op in OperationType:
        for k, t in enumerate(KEY_TYPES):
            outcome = "fail" if (op.value + k) % 37 == 0 else "pass"
            reason = "accepted an operand of rank 5 (_validate_operand.py:141)" if outcome == "fail" else ""
            cases.append(CaseResult("validation", f"{op.name}/{t}: rank 5 input", outcome, reason, None))
    cases.append(CaseResult("behaviour", "queries stable across restarts", "pass", ""))
    section = ValidateSection(
        "sample-all",
        ("validation", "behaviour"),
        tuple(cases),
        41.0,
        2,
        {
            "quick": True,
            "fuzz_seconds": None,
            "fuzz_cases": None,
            "seed": 0,
            "filter": None,
            "call_timeout": 20.0,
        },
    )
    return results_document(section).to_json()


def multi_process_stress_doc() -> dict:
    """A stress document whose multi-process rows name the same models and differ by process only."""
    rows = []
    for p in range(4):
        killed = p == 2
        rows.append(
            {
                "kind": "stress",
                "test": f"multi-process-inference-stress/sample-all/process-{p}",
                "mode": "multi-process-inference-stress",
                "driver": "sample-all",
                "models": ["mobilenet_v1_0.25_128", "mobilenet_v2_0.35_128"],
                "model": "mobilenet_v1_0.25_128, mobilenet_v2_0.35_128",
                "outcome": "CRASH" if killed else "SUCCESS",
                "expected": "CRASH" if killed else "SUCCESS",
                "as_expected": True,
                "reason": "killed by the test at 3.1 s" if killed else None,
                "duration_s": 3.1 if killed else 10.0,
                "iterations": 120 + p,
                "signal": "SIGKILL" if killed else None,
            }
        )
    rows.append(
        {
            "kind": "stress",
            "test": "performance-degradation-stress/sample-all",
            "mode": "performance-degradation-stress",
            "driver": "sample-all",
            "models": ["mobilenet_v1_1.0_224_quant_perchannel", "mobilenet_v2_1.0_224_quant_perchannel"],
            "outcome": "FAILURE",
            "expected": "SUCCESS",
            "reason": "latency of model A rose 162% (limit 50%) while model B was compiled in the same service "
            "at load 1.0-1.2; the driver's executions slow down while it prepares another model",
            "duration_s": 31.0,
            "iterations": 900,
        }
    )
    return {
        "schema_version": 3,
        "kind": "stress",
        "environment": {"time_utc": "2026-11-29T08:00:00+00:00"},
        "config": {"duration_s": 10.0},
        "results": rows,
    }
