"""A fixed, fast subset of onnx's own node tests: converted, run on the sample driver, compared with their outputs.

The cases are generated in this process by onnx's test-case modules (only
the few modules listed, so it stays fast); each listed case must convert and
match its expected outputs within the case's tolerance (onnx's backend
default: rtol 1e-3, atol 1e-7) or the CTS one, whichever is wider.
benchmarks/onnx_node_tests.py runs the whole suite.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.onnx_node_tests import Case, compare, run_case  # noqa: E402

MODULES = (
    "abs", "and_", "argmax", "convtranspose", "depthtospace", "equal", "greater_or_equal", "hardsigmoid",
    "leakyrelu", "lpnormalization", "lrn", "max", "min", "neg", "not_", "pow", "prelu", "reciprocal",
    "reducemax", "sin", "spacetodepth", "sqrt", "where", "xor", "erf", "gelu", "matmul", "hardswish",
    "shape", "gru", "lstm", "pad", "layernormalization",
)  # fmt: skip
CASES = (
    "test_abs", "test_and_bcast4v3d", "test_argmax_no_keepdims_random", "test_convtranspose",
    "test_convtranspose_pads", "test_convtranspose_output_shape", "test_convtranspose_autopad_same",
    "test_depthtospace_example", "test_equal_bcast", "test_greater_equal_bcast", "test_hardsigmoid",
    "test_leakyrelu", "test_lpnormalization_default", "test_l2normalization_axis_1", "test_lrn",
    "test_lrn_default", "test_max_example", "test_max_float16", "test_min_one_input", "test_neg",
    "test_not_4d", "test_pow_bcast_array", "test_prelu_broadcast", "test_reciprocal",
    "test_reduce_max_default_axes_keepdims_random", "test_sin", "test_spacetodepth",
    "test_spacetodepth_dcr_mode_example", "test_sqrt", "test_where_long_example", "test_xor_bcast3v2d",
    "test_erf", "test_gelu_default_1", "test_gelu_tanh_2", "test_gelu_default_2_expanded", "test_matmul_bcast",
    "test_matmul_4d_1d", "test_matmul_1d_3d", "test_hardswish", "test_hardswish_expanded", "test_shape_clip_end",
    "test_layer_normalization_4d_axis1_expanded",
)  # fmt: skip
# Cases whose parameters (weights, pads, scale) onnx feeds as graph inputs: every input but the first is
# fixed with the case's own data through input_values, as a user fixes configuration with --input-value.
FIXED_CASES = (
    "test_gru_defaults", "test_gru_with_initial_bias", "test_gru_seq_length", "test_gru_batchwise",
    "test_gru_reverse", "test_gru_bidirectional", "test_lstm_reverse", "test_lstm_bidirectional",
    "test_lstm_batchwise", "test_reflect_pad", "test_edge_pad", "test_wrap_pad",
    "test_layer_normalization_4d_axis1", "test_layer_normalization_default_axis",
    "test_layer_normalization_3d_axis_negative_2_epsilon",
)  # fmt: skip


@pytest.fixture(scope="module")
def node_cases() -> dict[str, Case]:
    import onnx.backend.test.case.node as node_pkg

    node_pkg._TargetOpType = None  # every op of the imported modules
    start = len(node_pkg._NodeTestCases)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for name in MODULES:
            full = f"{node_pkg.__name__}.{name}"
            # Importing a module runs its case generators; a module imported before is re-run.
            if full in sys.modules:
                importlib.reload(sys.modules[full])
            else:
                importlib.import_module(full)
    found = {}
    for c in node_pkg._NodeTestCases[start:]:
        if c.kind == "node" and c.data_sets:
            ins, outs = c.data_sets[0]
            found[c.name] = Case(c.name, c.model, list(ins), list(outs), c.rtol, c.atol)
    return found


@pytest.mark.parametrize("name", CASES)
def test_node_case_converts_and_matches(node_cases: dict[str, Case], name: str) -> None:
    assert name in node_cases, f"onnx generated no case {name}"
    outcome, why = run_case(node_cases[name])
    assert (outcome, why) == ("passed", "")


@pytest.mark.parametrize("name", FIXED_CASES)
def test_node_case_with_fixed_parameters_matches(node_cases: dict[str, Case], name: str) -> None:
    from driver.executor import run_model
    from mlts.convert import convert, prepare_input

    assert name in node_cases, f"onnx generated no case {name}"
    case = node_cases[name]
    names = [i.name for i in case.model.graph.input]  # type: ignore[attr-defined]
    given = dict(zip(names, case.inputs, strict=False))
    fixed = {n: given[n] for n in names[1:] if n in given}
    conv = convert(case.model, input_values=fixed)
    assert [i.name for i in conv.inputs] == names[:1]
    actual = run_model(conv.model, [prepare_input(i, given[i.name]) for i in conv.inputs])
    for info, got, want in zip(conv.outputs, actual, case.outputs, strict=True):
        assert compare(got, want, case.rtol, case.atol) == "", info.name
