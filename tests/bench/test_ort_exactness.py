"""The onnxruntime 8-bit exactness probe tells the truth about this CPU, and results, table and report show it.

The probe's verdict is checked against an independent measurement: full-range
random MatMulInteger products on onnxruntime compared with int64 NumPy. A
probe that always said "exact" fails on AVX2 machines without VNNI (where
uint8 x int8 saturates); one that always said "inexact" fails everywhere,
since uint8 x uint8 and int8 x int8 are exact on every x86-64 CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.bench import ort_exactness
from mlts.bench.stats import describe
from mlts.models import zoo
from mlts.records import BenchmarkRow, Evaluator
from mlts.records.environment import cpu_features, environment
from mlts.report.csv_export import benchmark_row
from mlts.report.html import render_report
from mlts.report.results import format_table


def _matmul_integer_is_exact(activation: str, weight: str) -> bool:
    """onnxruntime's MatMulInteger on full-range random 8-bit values, against int64 NumPy."""
    rng = np.random.default_rng(7)
    ai, wi = np.iinfo(activation), np.iinfo(weight)
    a = rng.integers(ai.min, ai.max + 1, (16, 64)).astype(activation)
    b = rng.integers(wi.min, wi.max + 1, (64, 8)).astype(weight)
    b[:2] = wi.max  # at least one pair of largest products per column
    a[:, :2] = ai.max
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("a", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        initializer=[numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    got = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"a": a}
    )[0]
    return bool(np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64)))


@pytest.mark.parametrize("pairing", ort_exactness.PAIRINGS, ids=lambda p: " x ".join(p))
def test_probe_agrees_with_an_independent_measurement(pairing):
    verdict = ort_exactness.probe()
    name = ort_exactness.pairing_name(*pairing)
    assert verdict["pairings"][name]["exact"] == _matmul_integer_is_exact(*pairing), verdict
    if not verdict["pairings"][name]["exact"]:
        assert not verdict["exact"] and name in verdict["summary"] and "NOT exact" in verdict["summary"]


def test_same_type_pairings_are_exact_on_every_x86_cpu():
    pairings = ort_exactness.probe()["pairings"]
    assert pairings["uint8 x uint8"]["exact"] and pairings["int8 x int8"]["exact"]


def _qdq_conv(activation: str, weights: np.ndarray) -> onnx.ModelProto:
    """x (8-bit) -> DequantizeLinear -> Conv with DequantizeLinear(int8 weights) -> y (float)."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(activation))
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"]),
        helper.make_node("Conv", ["xf", "wf"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, activation), "xz"),
        numpy_helper.from_array(weights, "w"),
        numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", elem, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_model_pairings_and_verdict(monkeypatch):
    full = np.array([127, -3, 5, 0] * 2, np.int8).reshape(2, 2, 1, 2)
    seven_bit = np.clip(full, -64, 64).astype(np.int8)
    assert ort_exactness.model_pairings(_qdq_conv("uint8", full)) == {"uint8 x int8": 127}
    assert ort_exactness.model_pairings(_qdq_conv("int8", full)) == {"int8 x int8": 127}

    def fake(exact: bool) -> dict:
        pairings = {ort_exactness.pairing_name(*p): {"exact": True} for p in ort_exactness.PAIRINGS}
        pairings["uint8 x int8"] = {"exact": exact}
        return {"onnxruntime": "x", "exact": exact, "pairings": pairings, "summary": "s"}

    monkeypatch.setattr(ort_exactness, "probe", lambda: fake(False))
    bad = ort_exactness.model_verdict(_qdq_conv("uint8", full))
    assert not bad["exact"] and "uint8 x int8 (weights up to ±127)" in bad["note"]
    assert ort_exactness.model_verdict(_qdq_conv("uint8", seven_bit))["exact"]  # 2*255*64 fits 16 bits
    assert ort_exactness.model_verdict(_qdq_conv("int8", full))["exact"]
    monkeypatch.setattr(ort_exactness, "probe", lambda: fake(True))
    assert ort_exactness.model_verdict(_qdq_conv("uint8", full))["exact"]


def test_zoo_perchannel_models_keep_weights_onnxruntime_computes_exactly():
    model = zoo.load("mobilenet_v1_0.25_128_quant_perchannel")
    pairings = ort_exactness.model_pairings(model)
    assert pairings == {"uint8 x int8": ort_exactness.SAFE_INT8_WEIGHT}
    assert ort_exactness.model_verdict(model)["exact"]


def test_cpu_features_from_flags():
    assert cpu_features({"avx2", "fma"}) == {"AVX2": True, "AVX-512": False, "VNNI": False, "AMX": False}
    assert cpu_features({"avx2", "avx512f", "avx512_vnni", "amx_int8"}) == dict.fromkeys(
        ("AVX2", "AVX-512", "VNNI", "AMX"), True
    )
    assert cpu_features({"avx_vnni"})["VNNI"]
    env = environment()
    assert set(env["cpu_features"] or {}) <= {"AVX2", "AVX-512", "VNNI", "AMX"}
    assert env["packages"]["onnxruntime"] == ort.__version__


def _row(backend: str, note: str | None) -> dict:
    row = {
        "model": "m_quant_perchannel",
        "family": "mobilenet_v1",
        "backend": backend,
        "status": "ok",
        "iterations": 3,
        "latency_ms": {"median": 1.0, "p90": 1.2, "mean": 1.1, "std": 0.1, "median_ci95": [0.9, 1.25]},
        "accuracy": {
            "topk": {"top1": 0.5},
            "vs_reference": {"max_quant_deviation": 40, "top1_agreement": 0.3, "cts_ratio": 13.3},
        },
        "validation_errors": [],
    }
    if note:
        row["reference_inexact"] = note
    return row


def _whole(row: dict) -> dict:
    """The row as a whole record (the table and the report read records): full statistics and every
    field an ok row has."""
    return {
        **row,
        "warmup": {"iterations": 1, "seconds": 0.01},
        "run": {"iterations": 3, "seconds": 0.003},
        "latency_ms": describe([0.0009, 0.001, 0.0012], p99_wanted=False),
        "compilation": None,
        "driver_timing_us": None,
        "memory_mb": {"client_peak_rss": None, "driver_peak_rss": None},
    }


def test_table_and_report_mark_comparisons_with_an_inexact_reference():
    note = "onnxruntime 1.0 is not exact on this CPU for uint8 x int8 (weights up to ±127)"
    lines = format_table([_whole(_row("driver:sample-all", note))])
    assert "40u!" in lines[2] and "13.30x!" in lines[2]
    assert lines[3] == f"  ! reference: {note}"
    assert not any("!" in line for line in format_table([_whole(_row("driver:sample-all", None))])[2:])
    # results.csv reads records: built here field by field (the rows above are not whole records).
    ref = BenchmarkRow(model="m", backend="cpu:onnxruntime", status="ok", reference_inexact=note)
    assert benchmark_row(ref)["reference_exact"] is False
    exact = BenchmarkRow(
        model="m",
        backend="driver:sample-all",
        status="ok",
        accuracy={"vs_reference": Evaluator(reference_exact=True)},
    )
    assert benchmark_row(exact)["reference_exact"] is True

    doc = {
        "schema_version": 2,
        "kind": "benchmark",
        "environment": {
            "cpu": "Some CPU",
            "cpu_features": {"AVX2": True, "AVX-512": False, "VNNI": False, "AMX": False},
            "onnxruntime_integer": {"exact": False, "summary": "uint8 x int8 NOT exact here"},
        },
        "config": {},
        "results": [_whole(_row("cpu:onnxruntime", note)), _whole(_row("driver:sample-all", note))],
    }
    html = render_report(doc)
    assert "AVX2 yes, AVX-512 no, VNNI no, AMX no" in html
    assert "uint8 x int8 NOT exact here" in html
    assert note in html and "13.30× †" in html
