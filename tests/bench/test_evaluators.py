"""Top-k accuracy, golden error and MLTS's validation rule, against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench.evaluators import golden_error, golden_labels, topk_accuracy, validation_errors


def _f(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_topk_hand_computed():
    scores = [
        _f(0.1, 0.5, 0.3, 0.2),  # label 2 is second -> top-2
        _f(0.9, 0.0, 0.05, 0.05),  # label 0 is first -> top-1
        _f(0.4, 0.3, 0.2, 0.1),  # label 3 is last -> top-4
    ]
    acc = topk_accuracy(scores, [2, 0, 3], label_source="ground_truth")
    assert acc == {
        "labels": "ground_truth",
        "n": 3,
        "top1": pytest.approx(1 / 3),
        "top2": pytest.approx(2 / 3),
        "top3": pytest.approx(2 / 3),
        "top4": 1.0,
        "top5": 1.0,
    }


def test_topk_ties_are_broken_at_random_in_expectation():
    # Label 1 ties class 2 for first place: place 1 or 2, each with probability 1/2.
    tied_first = _f(0.2, 0.4, 0.4, 0.1)
    # Label 0 ties classes 1 and 3 at 0.3 behind class 2: place 2, 3 or 4, each 1/3.
    tied_third = _f(0.3, 0.3, 0.9, 0.3)
    acc = topk_accuracy([tied_first, tied_third], [1, 0], k_max=4)
    want = [(0.5 + 0) / 2, (1 + 1 / 3) / 2, (1 + 2 / 3) / 2, 1.0]
    assert [acc[f"top{k}"] for k in range(1, 5)] == pytest.approx(want, abs=1e-12)


def test_topk_constant_output_scores_chance():
    acc = topk_accuracy([np.zeros(3, np.float32)] * 4, [0, 1, 2, 0])
    assert [acc[f"top{k}"] for k in range(1, 6)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0, 1.0], abs=1e-12)


def test_topk_8bit_scores_compare_as_integers():
    u8 = np.array([[0, 200, 255, 200]], dtype=np.uint8)  # label 1: 255 above, 200 tied -> place 2 or 3
    i8 = np.array([-1, 5, -128, -128], dtype=np.int8)  # label 0: 5 above -> place 2
    acc = topk_accuracy([u8, i8], [1, 0], k_max=3)
    assert [acc["top1"], acc["top2"], acc["top3"]] == [0.0, 0.75, 1.0]


def test_topk_k_beyond_class_count_counts_every_image():
    acc = topk_accuracy([_f(0.7, 0.3), _f(0.6, 0.4)], [1, 0], k_max=5)
    assert acc["top1"] == 0.5
    assert [acc[f"top{k}"] for k in range(2, 6)] == [1.0] * 4


def test_topk_nan_scores_rank_first_and_nan_labels_never_count():
    acc = topk_accuracy([_f(np.nan, 0.9, 0.1), _f(0.2, np.nan, 0.1)], [1, 1], k_max=3)
    assert [acc["top1"], acc["top2"], acc["top3"]] == [0.0, 0.5, 0.5]


def test_topk_empty_and_bad_arguments():
    assert topk_accuracy([], [], k_max=2) == {"labels": "golden", "n": 0, "top1": None, "top2": None}
    with pytest.raises(ValueError, match="2 score arrays but 1 labels"):
        topk_accuracy([_f(1, 2), _f(1, 2)], [0])
    with pytest.raises(ValueError, match="label 3 is out of range; the scores have classes 0..1"):
        topk_accuracy([_f(1, 2)], [3])
    with pytest.raises(ValueError, match="different sizes"):
        topk_accuracy([_f(1, 2), _f(1, 2, 3)], [0, 0])


def test_golden_labels_argmax_first_of_ties():
    assert golden_labels([np.array([[0.1, 0.7, 0.2]]), np.array([3.0, 3.0, 1.0])]) == [1, 0]
    with pytest.raises(ValueError, match="golden output 0 is empty or not finite"):
        golden_labels([np.array([np.inf, 0.0])])


def test_golden_error_float_outputs_in_float64():
    out = golden_error([_f(1, 2, 3)], [np.array([1.5, 2.0, 2.0])])
    assert out["mse"] == pytest.approx((0.25 + 0.0 + 1.0) / 3, rel=1e-15)
    assert out["max_abs_error"] == 1.0
    # A 1e-12 difference survives: float32 arithmetic would round it to 0.
    tiny = golden_error([np.array([1.0], np.float32)], [np.array([1.0 + 1e-12])])
    assert tiny["max_abs_error"] == pytest.approx(1e-12, rel=1e-3)


def test_golden_error_dequantizes_8bit_outputs():
    q = [np.array([130, 128], np.uint8), np.array([[124]], np.uint8)]
    # (130-128)*0.5 = 1.0, 0.0, (124-128)*0.5 = -2.0 against 0.75, 0.25, -2.5
    out = golden_error(q, [np.array([0.75, 0.25]), np.array([[-2.5]])], scale=0.5, zero_point=128)
    assert out["mse"] == pytest.approx((0.0625 + 0.0625 + 0.25) / 3, rel=1e-15)
    assert out["max_abs_error"] == 0.5
    signed = golden_error([np.array([-3], np.int8)], [np.array([-1.0])], scale=0.25)
    assert signed == {"mse": 0.0625, "max_abs_error": 0.25}
    with pytest.raises(ValueError, match="need a quantization scale > 0"):
        golden_error(q, [np.zeros(2), np.zeros(1)], scale=-0.5)
    # Plain integers (TENSOR_INT32 outputs such as ARGMAX's, no scale) are their own real values.
    plain = golden_error([np.array([2, 0], np.int32)], [np.array([2.0, 1.0])])
    assert plain == {"mse": 0.5, "max_abs_error": 1.0}


def test_golden_error_bad_arguments():
    with pytest.raises(ValueError, match="output 0 has 2 values but its golden output has 3"):
        golden_error([_f(1, 2)], [np.zeros(3)])
    with pytest.raises(ValueError, match="1 outputs but 2 golden"):
        golden_error([_f(1)], [np.zeros(1), np.zeros(1)])
    with pytest.raises(ValueError, match="no outputs"):
        golden_error([], [])


def test_validation_rule_message():
    (error,) = validation_errors({"top1": 0.7}, {"top1": 0.81})
    assert error["message"] == (
        "top-1 accuracy 0.700 is more than 0.05 below the reference's 0.810 (MLTS validation rule)"
    )
    assert error["metric"] == "top1_below_reference" and error["limit"] == 0.05
    assert error["value"] == pytest.approx(0.11)


@pytest.mark.parametrize(
    ("backend", "reference", "errors"),
    [
        (76 / 100, 81 / 100, 0),  # exactly 0.05 below: passes (0.81 - 0.05 is 0.7600000000000001 in binary)
        (1140 / 1500, 1215 / 1500, 0),  # the same boundary on 1500 images
        (1139 / 1500, 1215 / 1500, 1),  # one image fewer: fails
        (0.7599, 0.81, 1),
        (0.9, 0.81, 0),  # better than the reference
        (0.0, 0.05, 0),
    ],
)
def test_validation_rule_boundary(backend, reference, errors):
    assert len(validation_errors({"top1": backend}, {"top1": reference})) == errors


def test_validation_rule_tolerance_and_missing_top1():
    assert validation_errors({"top1": 0.7}, {"top1": 0.81}, tolerance=0.11) == []
    assert validation_errors({"top1": 0.7}, {"top1": 0.81}, tolerance=0.1) != []
    assert validation_errors({"top1": None}, {"top1": 0.81}) == []
    assert validation_errors({"top1": 0.1}, {}) == []
