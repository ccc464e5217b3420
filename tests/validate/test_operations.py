"""The operations suite: references and tolerances, a short run on sample-all, a wrong kernel caught and replayed."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType
from mlts.runtime.discovery import discover
from mlts.validate import operations
from mlts.validate.core import SuiteOptions, Target
from mlts.validate.operations_data import Tolerance, compare, expected_stored, tolerance
from mlts.validate.operations_model import Slot
from mlts.validate.operations_refs import REFERENCES, Ctx
from mlts.validate.replay import replay


def _run(driver: str, tmp_path, filter: str, quick: bool = True, **options: str) -> list:
    results: list = []
    with Target(discover()[driver], str(tmp_path), options=options) as target:
        operations.run(target, SuiteOptions(quick=quick, filter=filter, seed=3), results.append)
    return results


def test_cts_tolerances_follow_nnapi():
    f32 = tolerance(Slot("output", int(T.TENSOR_FLOAT32), (1,)), relaxed=False)
    assert (f32.atol, f32.rtol) == (1e-5, 5 * 2.0**-23)
    relaxed = tolerance(Slot("output", int(T.TENSOR_FLOAT32), (1,)), relaxed=True)
    assert relaxed.atol == relaxed.rtol == 5 * 2.0**-10
    q = tolerance(Slot("output", int(T.TENSOR_QUANT8_ASYMM), (1,), 0.5, 128), relaxed=False)
    assert (q.atol, q.rtol) == (1.0, 0.0)
    assert tolerance(Slot("output", int(T.TENSOR_INT32), (1,)), relaxed=False).atol == 0.0


def test_compare_reports_shape_and_first_bad_value():
    tol = Tolerance(1e-5, 0.0)
    assert compare(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.000001]), tol) is None
    assert "shape" in compare(np.zeros(3, np.float32), np.zeros(2), tol)
    problem = compare(np.array([1.0, 2.5], np.float32), np.array([1.0, 2.0]), tol)
    assert "1 of 2" in problem and "flat index 1" in problem


def test_quantised_expectations_round_and_saturate():
    slot = Slot("output", int(T.TENSOR_QUANT8_ASYMM), (3,), 0.5, 128)
    assert expected_stored(slot, np.array([0.0, 1.25, 1000.0])).tolist() == [128, 131, 255]


def test_references_are_the_spec_not_the_kernels():
    # Hand-computed: NNAPI's int32 DIV floors; SPACE_TO_DEPTH moves 2x2 blocks into channels.
    div = REFERENCES["DIV"]([np.array([7, -7]), np.array([2, 2]), 0], Ctx("DIV", ()))[0]
    assert div.tolist() == [3, -4]
    x = np.arange(4.0).reshape(1, 2, 2, 1)
    s2d = REFERENCES["SPACE_TO_DEPTH"]([x, 2], Ctx("SPACE_TO_DEPTH", ()))[0]
    assert s2d.reshape(-1).tolist() == [0.0, 1.0, 2.0, 3.0]
    conv = REFERENCES["CONV_2D"](
        [np.ones((1, 3, 3, 1)), np.ones((1, 2, 2, 1)), np.array([0.5]), 0, 0, 0, 0, 1, 1, 0],
        Ctx("CONV_2D", ()),
    )[0]
    assert conv.shape == (1, 2, 2, 1) and np.all(conv == 4.5)


def test_every_table_combination_is_enumerated():
    names = {c.name for c in operations.combos()}
    assert len({n for n in names if "/per-channel" not in n}) == 361
    assert "CONV_2D/TENSOR_QUANT8_ASYMM/per-channel" in names


def test_case_names_fill_the_report_matrix():
    from mlts.report.validate_section import _CELL

    combo = operations.Combo(OperationType.CONV_2D, T.TENSOR_QUANT8_ASYMM, True)
    name = operations.case_name(combo, "nchw", "burst")
    assert name == "CONV_2D/TENSOR_QUANT8_ASYMM: per-channel/nchw/burst"
    assert _CELL.match(name).groups() == ("CONV_2D", "TENSOR_QUANT8_ASYMM")


def test_sample_all_passes_on_every_path_layout_and_shape(tmp_path):
    results = _run("sample-all", tmp_path, r"^(ADD|CONV_2D|BOX_WITH_NMS_LIMIT)/", quick=False)
    failing = [(r.name, r.reason) for r in results if r.failed]
    assert not failing, failing
    names = {r.name for r in results}
    for check in operations.CHECKS:
        assert f"ADD/TENSOR_FLOAT32: {check}" in names
    assert "CONV_2D/TENSOR_FLOAT32: nchw/sync" in names
    assert "CONV_2D/TENSOR_QUANT8_ASYMM: per-channel/sync" in names
    assert "ADD/TENSOR_FLOAT32: relaxed/sync" in names
    passed = {r.name for r in results if r.outcome == "pass"}
    assert "CONV_2D/TENSOR_QUANT8_ASYMM_SIGNED: nchw/sync" in passed
    # No float64 reference for BOX_WITH_NMS_LIMIT: its paths must agree, and it says so.
    skipped = [r for r in results if r.name.startswith("BOX_WITH_NMS_LIMIT/") and r.outcome == "skip"]
    assert skipped and all(
        "no float64 reference" in r.reason or "data-dependent" in r.reason for r in skipped
    )


def test_unclaimed_combinations_are_skipped(tmp_path):
    results = _run("sample-minimal", tmp_path, r"^(ADD|MUL)/TENSOR_FLOAT32: ")
    outcome = {r.name: r.outcome for r in results}
    assert outcome["MUL/TENSOR_FLOAT32: not claimed"] == "skip"
    assert outcome["ADD/TENSOR_FLOAT32: sync"] == "pass"


@pytest.fixture(scope="module")
def wrong_add(tmp_path_factory):
    out = tmp_path_factory.mktemp("wrong-add")
    return out, _run("sample-faulty", out, r"^(ADD|MUL)/TENSOR_FLOAT32: ", wrong_op="ADD")


def test_a_wrong_kernel_is_caught_on_its_operation_only(wrong_add):
    _, results = wrong_add
    add = [r for r in results if r.name.startswith("ADD/")]
    mul = [r for r in results if r.name.startswith("MUL/")]
    assert add and all(r.outcome == "fail" and "float64 reference" in r.reason for r in add)
    assert mul and not any(r.failed for r in mul)
    assert all(r.reproducer for r in add)


def test_a_saved_reproducer_replays(wrong_add, tmp_path):
    _, results = wrong_add
    path = next(r.reproducer for r in results if r.name == "ADD/TENSOR_FLOAT32: sync")
    with Target(discover()["sample-faulty"], str(tmp_path), options={"wrong_op": "ADD"}) as target:
        assert replay(target, path).outcome == "fail"
    with Target(discover()["sample-all"], str(tmp_path)) as target:
        again = replay(target, path)
        assert again.outcome == "pass", again.reason


# ---------------------------------------------------------------- signed vs unsigned 8-bit


def test_signed_conversion_shifts_values_zero_points_and_pad_values():
    from mlts.validate.operations_model import OpModel
    from mlts.validate.operations_signed import to_signed

    q = int(T.TENSOR_QUANT8_ASYMM)
    case = OpModel(
        int(OperationType.PAD_V2),
        (
            Slot("input", q, (1, 2), 0.5, 130),
            Slot("const", int(T.TENSOR_INT32), (2, 2), value=np.zeros((2, 2), np.int32)),
            Slot("const", int(T.INT32), (), value=np.array(200, np.int32)),
        ),
        (Slot("output", q, (1, 4), 0.5, 130),),
    )
    signed, inputs = to_signed(case, [np.array([[0, 255]], np.uint8)])
    s8 = int(T.TENSOR_QUANT8_ASYMM_SIGNED)
    assert [s.type for s in signed.inputs] == [s8, int(T.TENSOR_INT32), int(T.INT32)]
    assert signed.inputs[0].zero_point == 2 and signed.outputs[0].zero_point == 2
    assert signed.outputs[0].type == s8 and signed.inputs[2].value == 72  # the pad value, in input units
    np.testing.assert_array_equal(inputs[0], np.array([[-128, 127]], np.int8))


_SIGNED = r"^(ADD|RESIZE_BILINEAR|PAD_V2|DEQUANTIZE|ARGMAX)/TENSOR_QUANT8_ASYMM_SIGNED: signed-vs-unsigned"


def test_sample_all_agrees_in_both_8bit_types(tmp_path):
    results = _run("sample-all", tmp_path, _SIGNED)
    outcome = {r.name: r.outcome for r in results}
    assert outcome == {
        f"{op}/TENSOR_QUANT8_ASYMM_SIGNED: signed-vs-unsigned": "pass"
        for op in ("ADD", "RESIZE_BILINEAR", "PAD_V2", "DEQUANTIZE", "ARGMAX")
    }, [(r.name, r.outcome, r.reason) for r in results]


def test_signed_kernels_that_drift_are_caught(tmp_path):
    results = _run("sample-faulty", tmp_path, _SIGNED, signed_offset="2")
    by_name = {r.name: r for r in results}
    add = by_name["ADD/TENSOR_QUANT8_ASYMM_SIGNED: signed-vs-unsigned"]
    assert add.outcome == "fail" and "differs from unsigned by 2 units" in add.reason
    # Outputs that are not quant8 (DEQUANTIZE's float, ARGMAX's int32) are untouched by the fault.
    assert by_name["DEQUANTIZE/TENSOR_QUANT8_ASYMM_SIGNED: signed-vs-unsigned"].outcome == "pass"
    assert by_name["ARGMAX/TENSOR_QUANT8_ASYMM_SIGNED: signed-vs-unsigned"].outcome == "pass"
    # One unit either way is within the CTS tolerance of quantized results.
    one = _run("sample-faulty", tmp_path, r"^ADD/TENSOR_QUANT8_ASYMM_SIGNED: signed-vs", signed_offset="-1")
    assert [r.outcome for r in one] == ["pass"]
