"""Quantized-output comparison, quantized benchmark inputs and the text table's quantized columns."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench.accuracy import HISTOGRAM_MAX_UNITS, compare_quantized, top1_agreement
from mlts.bench.inputs import make_inputs
from mlts.bench.stats import describe
from mlts.datasets.images import image_batch
from mlts.report.results import format_table


def test_deviations_in_units_histogram_and_cts_rule():
    e = np.array([[10, 200, 30, 0, 255]], dtype=np.uint8)
    a = np.array([[11, 200, 27, 0, 245]], dtype=np.uint8)  # deviations 1, 0, 3, 0, 10
    got = compare_quantized([[a]], [[e]], [0.5], tolerance_units=3)
    assert got["max_quant_deviation"] == 10
    hist = got["quant_deviation_histogram"]
    assert hist["0"] == 2 and hist["1"] == 1 and hist["3"] == 1 and hist[f">={HISTOGRAM_MAX_UNITS}"] == 1
    assert sum(hist.values()) == 5
    assert got["cts_pass"] is False and got["cts_ratio"] == pytest.approx(10 / 3)
    assert got["max_abs_error"] == pytest.approx(5.0)
    assert got["mse"] == pytest.approx((1 + 9 + 100) * 0.25 / 5)
    assert got["top1_agreement"] == 1.0  # argmax 4 in both
    assert "3 quantized units" in got["tolerance"] and "half to even" in got["rounding_note"]


def test_signed_values_do_not_wrap():
    e = np.array([[-128, 127]], dtype=np.int8)
    a = np.array([[127, -128]], dtype=np.int8)
    got = compare_quantized([[a]], [[e]], [1 / 256])
    assert got["max_quant_deviation"] == 255 and got["top1_agreement"] == 0.0
    within = compare_quantized([[e]], [[e]], [1 / 256])
    assert within["cts_pass"] and within["max_quant_deviation"] == 0 and within["cts_ratio"] == 0


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="shape"):
        compare_quantized([[np.zeros((1, 3), np.uint8)]], [[np.zeros((1, 4), np.uint8)]], [1.0])


def test_top1_agreement_counts_rows():
    a = [np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([[0.3, 0.7]])]
    e = [np.array([[0.2, 0.8], [0.1, 0.9]]), np.array([[0.6, 0.4]])]
    assert top1_agreement(a, e) == pytest.approx(1 / 3)


@pytest.mark.parametrize(("dtype", "zero_point"), [(np.uint8, 128), (np.int8, 0)])
def test_quantized_image_inputs_are_the_float_images_quantized(dtype, zero_point):
    (q,), (q2,) = make_inputs([((1, 3, 16, 16), np.dtype(dtype).name, 1 / 128, zero_point)], 2)
    x = image_batch(2, 16)
    assert q.dtype == dtype and q.shape == (1, 3, 16, 16)
    expected = np.clip(np.sign(x / (1 / 128)) * np.floor(np.abs(x * 128) + 0.5) + zero_point, *_range(dtype))
    assert np.array_equal(q[0], expected[0]) and np.array_equal(q2[0], expected[1])
    assert len(np.unique(q)) > 50  # real image content, not a constant


def _range(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return info.min, info.max


def test_table_shows_quantized_units_top_k_and_the_median_interval():
    row = {
        "model": "mobilenet_v1_0.25_128_quant_perchannel",
        "backend": "driver:sample-all",
        "status": "ok",
        "iterations": 3,
        "warmup": {"iterations": 1, "seconds": 0.01},
        "run": {"iterations": 3, "seconds": 0.003},
        # Three samples: the median 1.0 ms, its interval [min, max] (the widest one n = 3 allows).
        "latency_ms": describe([0.0009, 0.001, 0.00125], p99_wanted=False),
        "compilation": None,
        "driver_timing_us": None,
        "memory_mb": {"client_peak_rss": None, "driver_peak_rss": None},
        "accuracy": {
            "topk": {"top1": 0.75, "top5": 0.875},
            "vs_reference": {"max_quant_deviation": 2, "top1_agreement": 0.5, "cts_ratio": 2 / 3},
        },
        "validation_errors": ["top-1 accuracy 0.750 is more than 0.05 below the reference's 0.810"],
    }
    header, _, line, error, blank, *legend = format_table([row])
    assert "top1" in header and "mobilenet_v1_0.25_128_quant_perchannel" in line
    assert "2u" in line and "0.67x" in line and "75.0%" in line and "87.5%" in line
    assert "1.00 [0.90, 1.25]" in line
    assert "validation error: top-1 accuracy 0.750" in error
    # Under the table: what the less obvious columns mean, the quantized units and the 8-bit top-1.
    assert blank == "" and any(t.startswith("CTS err: ") for t in legend)
    assert any("quantized units (u)" in t for t in legend) and any(
        t.startswith("8-bit models:") for t in legend
    )
