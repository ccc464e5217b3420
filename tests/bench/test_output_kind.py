"""The verdict decides from what the output is: top-1 for classifiers only, errors for everything else.

A driver whose outputs agree with onnxruntime's to 1e-7 never fails, whatever the output; one off by
1e-3 always does.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlts.bench.output_kind import output_kind, rule_name
from mlts.bench.verdict import network_verdict
from mlts.bench.workload import Workload
from mlts.convert.converter import Conversion, TensorInfo


@pytest.mark.parametrize(
    ("shape", "dtype", "kind"),
    [
        ((1, 1000), "float32", "classifier"),
        ((4, 10), "float32", "classifier"),
        ((1, 1000, 1, 1), "float32", "classifier"),
        ((1, 1, 1000), "float32", "classifier"),
        ((1000,), "float32", "classifier"),
        ((1, 2), "float32", "classifier"),
        ((1, 1), "float32", "regression"),
        ((1,), "float32", "regression"),
        ((), "float32", "regression"),
        ((1, 1, 640, 640), "float32", "dense-map"),
        ((1, 21, 128, 128), "float32", "dense-map"),
        ((1, 256, 20, 20), "float32", "dense-map"),
        ((1, 100, 4), "float32", "boxes"),
        ((1, 25200, 6), "float32", "boxes"),
        ((300, 4), "float32", "classifier"),  # without the model's batch: 300 inputs, 4 classes
        ((1, 50, 40), "float32", "tensor"),
        ((1, 100), "int64", "integers"),
        ((1, 100), "bool", "integers"),
        ((1, 1000), "uint8", "classifier"),  # quantized scores
    ],
)
def test_kinds(shape, dtype, kind):
    quantized = np.dtype(dtype) == np.uint8
    assert output_kind(shape, dtype, quantized) == kind


def test_an_output_without_the_batch_dimension():
    assert output_kind((300, 4), "float32", batch=1) == "boxes"
    assert output_kind((8, 4), "float32", batch=8) == "classifier"
    assert output_kind((1, 10), "float32", batch=1) == "classifier"


def test_unit_length_vectors_are_embeddings():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((2, 128))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    assert output_kind(v.shape, "float32", sample=v) == "embedding"
    assert output_kind(v.shape, "float32", sample=v * 3) == "classifier"
    assert rule_name("embedding", False) == "embedding-error"
    assert (
        rule_name("classifier", False) == "classifier-top1" and rule_name("dense-map", True) == "quant8-rms"
    )


def _workload(shape, golden, expected) -> Workload:
    conv = Conversion(None, (), (TensorInfo("out", tuple(shape), "float32"),), 0)  # type: ignore[arg-type]
    kind = output_kind(shape, "float32", sample=expected[0][0])
    return Workload(
        name="m",
        family="user",
        model=None,
        conv=conv,
        feeds=[],
        reference=None,
        expected=expected,
        golden=golden,
        labels=None,
        label_source=None,
        dataset={},
        quantized=False,
        output_kinds=(kind,),
    )


def _judge(work: Workload, driver_outputs) -> dict:
    ref = {"status": "ok", "accuracy": work.score(work.expected, against_reference=False)}
    row = {"status": "ok", "accuracy": work.score(driver_outputs, against_reference=True)}
    verdict = network_verdict(row, ref, work.output_kind)
    assert verdict is not None
    return verdict


def _outputs(rng, golden, noise: float, dtype=np.float32):
    return [[(g + rng.uniform(-noise, noise, g.shape)).astype(dtype)] for g in golden]


def test_a_probability_map_is_judged_by_its_error_not_top1():
    """The 640x640 case: a map whose rows have many near-equal maxima made top-1 agreement 0.06."""
    rng = np.random.default_rng(1)
    golden = [1 / (1 + np.exp(-rng.normal(0, 8, (1, 1, 64, 64)))) for _ in range(6)]  # saturated: ties at 1.0
    expected = _outputs(rng, golden, 1e-7)
    work = _workload((1, 1, 64, 64), golden, expected)
    good = _judge(work, _outputs(rng, [e[0].astype(np.float64) for e in expected], 1e-7))
    assert good["pass"] and good["rule_name"] == "dense-map-error" and good["output_kind"] == "dense-map"
    assert [c["metric"] for c in good["checks"]] == ["max_abs_error_vs_golden"]
    bad = _judge(work, [[e[0] + np.float32(1e-3)] for e in expected])
    assert not bad["pass"]


@pytest.mark.parametrize("shape", [(1, 10), (1, 1000), (1, 1, 32, 32), (1, 50, 4), (1, 1), (1, 64, 40)])
@pytest.mark.parametrize("seed", range(4))
def test_a_driver_within_1e_7_of_onnxruntime_never_fails(shape, seed):
    rng = np.random.default_rng(seed)
    golden = []
    for _ in range(20):
        g = rng.normal(0, 3, shape)
        if shape[-1] > 1 and len(shape) == 2:
            g = np.exp(g) / np.exp(g).sum(axis=-1, keepdims=True)
            g[..., : shape[-1] // 2] = g[..., :1]  # many exact ties in the classifier's scores
        golden.append(g)
    expected = _outputs(rng, golden, 2e-7)  # onnxruntime: float32 rounding off the float64 truth
    work = _workload(shape, golden, expected)
    driver = _outputs(rng, [e[0].astype(np.float64) for e in expected], 1e-7)
    verdict = _judge(work, driver)
    assert verdict["pass"], verdict
    off = [[e[0] + np.float32(1e-3)] for e in expected]
    assert not _judge(work, off)["pass"]


def test_classifier_near_ties_within_the_error_limit_count_as_agreement():
    golden = [np.array([[0.5, 0.5 - 1e-9, 0.0]]) for _ in range(10)]
    expected = [[g.astype(np.float32)] for g in golden]
    work = _workload((1, 3), golden, expected)
    swapped = [[np.array([[0.5 - 1e-7, 0.5, 0.0]], np.float32)] for _ in golden]  # argmax 1, not 0
    verdict = _judge(work, swapped)
    agreement = next(c for c in verdict["checks"] if c["metric"] == "top1_agreement_within_tolerance")
    assert agreement["value"] == 1.0 and verdict["pass"]
    wrong = [[np.array([[0.1, 0.2, 0.7]], np.float32)] for _ in golden]  # a clear other class
    failed = [c["metric"] for c in _judge(work, wrong)["checks"] if not c["pass"]]
    assert "top1_agreement_within_tolerance" in failed
