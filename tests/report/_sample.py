"""A realistic results document (schema version 2) for the report, CSV, schema and compare tests.

Statistics come from `mlts.bench.stats.describe` on seeded samples, so they
are internally consistent (median inside its CI, histogram counts summing to n).
"""

from __future__ import annotations

import copy

import numpy as np

from mlts.bench.stats import describe


def _stats(median_ms: float, n: int, seed: int, spread: float = 0.05) -> dict:
    rng = np.random.default_rng(seed)
    samples_s = median_ms / 1000.0 * (1.0 + spread * np.abs(rng.standard_normal(n)))
    out = describe(list(samples_s), p99_wanted=False)
    out["samples"] = [float(s * 1000.0) for s in samples_s]
    return out


def _topk(top1: float) -> dict:
    return {
        "labels": "golden",
        "n": 100,
        "top1": top1,
        "top2": min(1.0, top1 + 0.05),
        "top3": min(1.0, top1 + 0.08),
        "top4": min(1.0, top1 + 0.1),
        "top5": min(1.0, top1 + 0.11),
    }


def _base(model: str, family: str, backend: str) -> dict:
    return {
        "model": model,
        "family": family,
        "backend": backend,
        "status": "ok",
        "threads": 1,
        "warmup": {"iterations": 12, "seconds": 0.31, "target_seconds": 0.3},
        "run": {"iterations": 40, "seconds": 1.02, "min_seconds": 1.0, "min_iterations": 20},
        "iterations": 40,
        "dataset": {"name": "procedural", "size": 100, "labels": "golden"},
        "percentile_estimator": "nearest-rank",
        "memory_mb": {"client_peak_rss": 310.5, "driver_peak_rss": None, "method": "VmHWM after clear_refs"},
        "validation_errors": [],
    }


def _compilation(seed: int) -> dict:
    return {
        "without_cache": {**_stats(20.0, 30, seed), "stopped": "bound"},
        "save_to_cache": {**_stats(26.0, 30, seed + 1), "stopped": "bound"},
        "prepare_from_cache": {**_stats(6.0, 30, seed + 2), "stopped": "precise"},
        "cache_size_bytes": 4_312_064,
        "cache_files": {"model": 1, "data": 1},
        "note": None,
        "stop_rule": None,
    }


def sample_doc() -> dict:
    """Two float image models and one quantized, on onnxruntime and one driver, an error row, an LSTM row."""
    rows = []
    for i, (model, family, ref_ms, drv_ms) in enumerate(
        [
            ("mobilenet_v1_0.25_128", "mobilenet_v1", 1.1, 3.4),
            ("mobilenet_v2_0.35_128", "mobilenet_v2", 1.6, 5.2),
        ]
    ):
        ref = _base(model, family, "cpu:onnxruntime")
        ref["latency_ms"] = _stats(ref_ms, 40, 10 * i)
        ref["driver_timing_us"] = None
        ref["accuracy"] = {"topk": _topk(0.94), "vs_golden": {"mse": 1.2e-14, "max_abs_error": 3.1e-7}}
        ref["compilation"] = None
        rows.append(ref)
        drv = _base(model, family, "driver:sample-all")
        drv["latency_ms"] = _stats(drv_ms, 40, 10 * i + 1)
        drv["memory_mb"]["driver_peak_rss"] = 201.25
        drv["driver_timing_us"] = {
            "time_on_device": _stats(drv_ms * 900.0, 40, 10 * i + 2),
            "time_in_driver": "not measured",
        }
        drv["accuracy"] = {
            "topk": _topk(0.93),
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
        drv["compilation"] = _compilation(100 + i)
        rows.append(drv)

    quant = "mobilenet_v1_0.25_128_quant"
    ref = _base(quant, "mobilenet_v1_quant", "cpu:onnxruntime")
    ref["latency_ms"] = _stats(0.9, 40, 50)
    ref["driver_timing_us"] = None
    ref["accuracy"] = {"topk": _topk(0.81)}
    ref["quantization"] = {"float_model": "mobilenet_v1_0.25_128", "top1_agreement_with_float": 0.82}
    ref["compilation"] = None
    rows.append(ref)
    bad = _base(quant, "mobilenet_v1_quant", "driver:sample-all")
    bad["latency_ms"] = _stats(7.5, 40, 51)
    bad["driver_timing_us"] = {"time_on_device": "not measured", "time_in_driver": "not measured"}
    bad["accuracy"] = {
        "topk": _topk(0.70),
        "vs_reference": {
            "max_abs_error": 0.02,
            "mse": 1e-5,
            "top1_agreement": 0.9,
            "max_quant_deviation": 5,
            "quant_deviation_histogram": {"0": 9000, "1": 900, "2": 80, "3": 15, "4": 4, "5": 1},
            "cts_pass": False,
            "cts_ratio": 1.67,
            "tolerance": "|a-e| <= 3 quantized units (CTS quant8)",
        },
    }
    bad["validation_errors"] = [
        {
            "message": "top-1 accuracy 0.700 is more than 0.05 below the reference's 0.810 (MLTS validation rule)",
            "metric": "top1_below_reference",
            "value": 0.11,
            "limit": 0.05,
        }
    ]
    bad["compilation"] = _compilation(200)
    rows.append(bad)

    rows.append(
        {
            "model": "mobilenet_v2_0.35_128",
            "family": "mobilenet_v2",
            "backend": "driver:sample-minimal",
            "status": "error",
            "error": "INVALID_ARGUMENT: sample-minimal does not support operation 3 (DEPTHWISE_CONV_2D)",
            "threads": 1,
        }
    )

    lstm = _base("asr_float", "asr", "driver:sample-all")
    lstm.update(
        {
            "mode": "step-by-step",
            "sequences": 5,
            "steps": 420,
            "iterations": 420,
            "latency_unit": "step",
            "latency_ms": _stats(1.5, 420, 60),
            "sequence_latency_ms": _stats(120.0, 5, 61),
            "driver_timing_us": None,
            "compilation": None,
            "dataset": {"name": "asr-sequences", "size": 5, "labels": None},
            "accuracy": {
                "vs_golden": {
                    "metric": {"name": "PhoneErrorRate", "phone_error_rate": 0.0, "limit": 5.0, "ok": True},
                    "outputs": {"output": {"mse": 1e-12, "max_abs_error": 2e-6}},
                },
            },
        }
    )
    rows.append(lstm)

    return {
        "schema_version": 3,
        "kind": "benchmark",
        "environment": {
            "time_utc": "2026-11-21T18:40:00+00:00",
            "cpu": "Example CPU @ 2.0GHz",
            "machine": "x86_64",
            "cores": 2,
            "usable_cores": 2,
            "os": "Linux 6.1",
            "python": "3.11.7",
            "numpy": "2.4.6",
            "onnx": "1.23.2",
            "onnxruntime": "1.31.1",
            "mlts": "0.1.0",
            "threads": 1,
        },
        "config": {
            "threads": 1,
            "warmup_s": 0.3,
            "duration_s": 1.0,
            "min_iterations": 20,
            "quick": True,
            "images": 100,
            "seed": 0,
            "in_process": False,
            "plugin_files": [],
            "sequences": 5,
            "compilation": True,
            "models": [
                "mobilenet_v1_0.25_128",
                "mobilenet_v2_0.35_128",
                "mobilenet_v1_0.25_128_quant",
                "asr_float",
            ],
            "drivers": ["sample-all", "sample-minimal"],
        },
        "devices": {
            "sample-all": {
                "version": "mlts-sample-1.3.0",
                "type": "CPU",
                "cache_files": {"model": 1, "data": 1},
            },
        },
        "results": rows,
    }


def slower(doc: dict, model: str, backend: str, factor: float) -> dict:
    """A copy of `doc` with one row's latency samples (and statistics) scaled by `factor`."""
    out = copy.deepcopy(doc)
    for r in out["results"]:
        if r["model"] == model and r["backend"] == backend and r.get("status") == "ok":
            samples = [s * factor / 1000.0 for s in r["latency_ms"]["samples"]]
            r["latency_ms"] = describe(samples, p99_wanted=False)
            r["latency_ms"]["samples"] = [s * 1000.0 for s in samples]
    return out


def stress_doc() -> dict:
    return {
        "schema_version": 2,
        "kind": "stress",
        "environment": {},
        "config": {"duration_s": 2.0},
        "results": [
            {
                "mode": "inference-stress",
                "model": "mobilenet_v1_0.25_128",
                "driver": "sample-all",
                "outcome": "SUCCESS",
            },
            {
                "mode": "client-early-termination-stress",
                "driver": "sample-all",
                "outcome": "CRASH",
                "expected": "CRASH",
                "reason": "client killed by the test",
                "duration_s": 1.5,
                "iterations": 12,
                "signal": 9,
                "log_tail": ["compiling", "killed"],
            },
            {
                "mode": "inference-stress",
                "driver": "sample-all",
                "outcome": "HANG",
                "signal": "SIGKILL",
                "expected": None,
            },
        ],
    }
