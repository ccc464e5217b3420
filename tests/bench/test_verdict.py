"""The whole-network accuracy verdict: the sample driver passes, a driver off by 1e-3 (float) or 4 units
(quantized) fails, and each check reads the figures it names."""

from __future__ import annotations

import pytest

from driver.faulty import parse_options, shift
from mlts.bench.runner import BenchmarkConfig, run_benchmark
from mlts.bench.sources import select_models
from mlts.bench.verdict import network_verdict, with_verdict
from mlts.records import BenchmarkRow, Evaluator, ResultsDocument
from mlts.runtime.discovery import discover, select


def _row(**acc) -> dict:
    return {"status": "ok", "accuracy": acc}


def test_float_rule_is_relative_to_the_reference_with_a_float32_floor():
    ref = _row(vs_golden={"max_abs_error": 1e-6, "golden_max_abs": 1.0}, topk={"top1": 0.9})
    # limit = 4 * 1e-6 + 64 * 2^-23 * 1 = 1.163e-5
    limit = 4e-6 + 64 * 2.0**-23
    good = _row(
        vs_golden={"max_abs_error": 1.1e-5, "golden_max_abs": 1.0},
        vs_reference={"top1_agreement": 1.0},
        topk={"top1": 0.9},
    )
    verdict = network_verdict(good, ref)
    assert verdict["pass"] and verdict["checks"][0]["limit"] == pytest.approx(limit, rel=1e-12)
    bad = _row(
        vs_golden={"max_abs_error": 1.2e-5, "golden_max_abs": 1.0}, vs_reference={"top1_agreement": 1.0}
    )
    assert not network_verdict(bad, ref)["pass"]
    # A larger golden magnitude raises the floor: 64 eps of 10.
    big = _row(vs_golden={"max_abs_error": 6e-5, "golden_max_abs": 10.0})
    assert network_verdict(big, ref)["pass"]


def test_float_rule_needs_top1_agreement_and_the_mlts_rule():
    ref = _row(vs_golden={"max_abs_error": 1e-6}, topk={"top1": 0.9})
    disagree = _row(
        vs_golden={"max_abs_error": 1e-6}, vs_reference={"top1_agreement": 0.98}, topk={"top1": 0.9}
    )
    failed = [c["metric"] for c in network_verdict(disagree, ref)["checks"] if not c["pass"]]
    assert failed == ["top1_agreement"]
    worse = _row(vs_golden={"max_abs_error": 1e-6}, topk={"top1": 0.84})
    failed = [c["metric"] for c in network_verdict(worse, ref)["checks"] if not c["pass"]]
    assert failed == ["top1_below_reference"]


def test_quantized_rule_in_units():
    ref = _row(vs_golden={"mse": 0.01**2})
    scale = 1 / 256
    ok = _row(
        vs_golden={"mse": (0.01 + 0.9 * scale) ** 2},
        vs_reference={"max_quant_deviation": 26, "rms_quant_deviation": 0.45, "output_scale": scale},
    )
    verdict = network_verdict(ok, ref)
    assert verdict["pass"] and verdict["profile"] == "whole network quant8"
    assert verdict["checks"][1]["value"] == pytest.approx(0.9)
    off = _row(
        vs_golden={"mse": 0.0001},
        vs_reference={"max_quant_deviation": 4, "rms_quant_deviation": 1.2, "output_scale": scale},
    )
    assert [c["metric"] for c in network_verdict(off, ref)["checks"] if not c["pass"]] == [
        "rms_quant_deviation"
    ]


def test_failed_checks_become_structured_validation_errors():
    def rec(backend: str, max_abs_error: float) -> BenchmarkRow:
        vs_golden = {"vs_golden": Evaluator(max_abs_error=max_abs_error)}
        return BenchmarkRow(model="m", backend=backend, status="ok", accuracy=vs_golden, validation_errors=())

    judged = with_verdict(rec("driver:d", 1e-3), rec("cpu:onnxruntime", 1e-6))
    (error,) = judged.violations
    assert error.metric == "max_abs_error_vs_golden" and error.value == 1e-3 and error.limit < 2e-5
    assert "whole-network verdict" in error.message
    assert judged.verdict.passed is False and judged.verdict.failures()[0].metric == error.metric
    assert (
        judged.to_json()["verdict"]["pass"] is False
        and judged.to_json()["validation_errors"][0]["value"] == 1e-3
    )


def test_output_offset_option():
    assert parse_options({"output_offset": "1e-3"}).output_offset == 1e-3
    with pytest.raises(ValueError, match="output_offset='x' must be a number"):
        parse_options({"output_offset": "x"})
    import numpy as np

    q = np.array([0, 100, 253], dtype=np.uint8)
    shift(q, 4)
    assert q.tolist() == [4, 104, 255]  # saturated
    f = np.zeros(2, dtype=np.float32)
    shift(f, 1e-3)
    assert f.tolist() == pytest.approx([1e-3, 1e-3])


def _sample_against_offset(model: str, offset: str, **options) -> dict[str, dict]:
    """Rows by backend of a short in-process run of `model` on sample-all and on sample-faulty whose
    outputs are off by `offset`; the produced document must fit the records."""
    specs = select(discover(), "^sample-(all|faulty)$")
    config = BenchmarkConfig(
        warmup_s=0.0,
        duration_s=0.0,
        min_iterations=1,
        compilation=False,
        in_process=True,
        driver_options={"sample-faulty": {"output_offset": offset}},
        **options,
    )
    doc = run_benchmark(select_models(f"^{model}$"), specs, config)
    ResultsDocument.from_json(doc)
    return {r["backend"]: r for r in doc["results"]}


@pytest.mark.parametrize(
    ("model", "offset"), [("mobilenet_v1_0.25_128", "1e-3"), ("mobilenet_v1_0.25_128_quant", "4")]
)
def test_sample_driver_passes_and_an_offset_driver_fails(model, offset):
    rows = _sample_against_offset(model, offset, images=8)
    assert "verdict" not in rows["cpu:onnxruntime"]
    good, bad = rows["driver:sample-all"], rows["driver:sample-faulty"]
    assert good["verdict"]["pass"], good["verdict"]
    assert good["validation_errors"] == []
    assert not bad["verdict"]["pass"], bad["verdict"]
    assert any(e["message"].startswith("whole-network verdict") for e in bad["validation_errors"])
    assert bad["verdict"]["rule"] == good["verdict"]["rule"]


def test_lstm_rows_get_the_verdict_and_their_retries():
    """The whole-sequence TTS model: one session per sequence length, the retries summed over them."""
    rows = _sample_against_offset("tts_float_sequence", "1e-3", sequences=2)
    good, bad = rows["driver:sample-all"], rows["driver:sample-faulty"]
    assert good["verdict"]["pass"] and not bad["verdict"]["pass"], (good["verdict"], bad["verdict"])
    assert good["verdict"]["checks"][0]["metric"].startswith("max_abs_error_vs_golden[")
    assert good["retries"] == {"retries": 0, "errors": {}, "error_classes": {}}
    assert "retries" not in rows["cpu:onnxruntime"]
