"""examples/minimal_driver.py, the plugin docs/writing-a-driver.md builds: it loads with --driver-plugin,
passes `mlts validate --quick`, and computes a small graph as float64 NumPy does (CTS fp32 tolerance)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.loader import load_factory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.discovery import plugin_specs
from mlts.validate.request_mutations import valid_request

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "minimal_driver.py"
OPERATIONS = ("ADD", "SUB", "MUL", "RELU", "LOGISTIC", "TANH")
F32 = OperandType.TENSOR_FLOAT32
ATOL, RTOL = 1e-5, 5 * 2.0**-23  # CTS's float32 tolerance


def test_the_plugin_passes_mlts_validate_quick(tmp_path):
    out = tmp_path / "validate"
    args = ["validate", "--driver-plugin", str(EXAMPLE), "--quick", "--fuzz-seconds", "1", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "minimal-numpy: passed" in r.stdout
    section = json.loads((out / "results.json").read_text())["validate"]
    assert section["passed"] and not section["errors"]
    assert set(section["suites"]) == {"validation", "operations", "behaviour", "fuzz"}
    for suite, counts in section["summary"].items():
        assert counts["pass"] > 0 and counts["fail"] == counts["error"] == counts["hang"] == 0, suite
    passed = {
        c["name"].split(":")[0]
        for c in section["cases"]
        if c["suite"] == "operations" and c["outcome"] == "pass"
    }
    assert {f"{op}/TENSOR_FLOAT32" for op in OPERATIONS} <= passed
    # What it does not run is skipped, saying why: other types, and the behaviour cases needing WHILE.
    skipped = [c for c in section["cases"] if c["outcome"] == "skip"]
    assert any(c["name"].startswith("CONV_2D/") for c in skipped)
    assert any("WHILE" in c["reason"] for c in skipped if c["suite"] == "behaviour")


def test_it_is_found_by_name_and_loads_as_its_class():
    (spec,) = plugin_specs(EXAMPLE)
    assert spec.name == "minimal-numpy" and spec.factory.endswith("minimal_driver.py:MinimalDevice")
    device = load_factory(spec.factory)()
    assert device.getVersionString() == "minimal-numpy-1.0"


def _graph(out_dims: tuple[int, ...]):
    """y = LOGISTIC(ADD(a [2, 3], b [3], RELU6)): broadcasting, a fused activation and two operations."""
    b = ModelBuilder()
    a_in = b.add_input(F32, (2, 3))
    b_in = b.add_input(F32, (3,))
    relu6 = b.add_constant(3, OperandType.INT32)
    s = b.add_operand(F32, (2, 3))
    b.add_operation(OperationType.ADD, [a_in, b_in, relu6], [s])
    y = b.add_operand(F32, out_dims)
    b.add_operation(OperationType.LOGISTIC, [s], [y])
    b.mark_outputs(y)
    return b.build()


def test_a_two_operation_graph_matches_float64_numpy():
    device = load_factory(f"{EXAMPLE}:MinimalDevice")()
    rng = np.random.default_rng(3)
    a = rng.uniform(-8, 8, (2, 3)).astype(np.float32)
    bias = rng.uniform(-2, 2, 3).astype(np.float32)
    model = _graph((2, 3))
    assert device.getSupportedOperations(model) == (True, True)
    prepared = device.prepareModel(model)
    request = valid_request(model, [a.tobytes(), bias.tobytes()])
    result = prepared.executeSynchronously(request)
    got = np.frombuffer(request.pools[1].buffer[:24], np.float32).reshape(2, 3)
    x = np.clip(a.astype(np.float64) + bias, 0.0, 6.0)
    expected = 1.0 / (1.0 + np.exp(-x))
    assert np.all(np.abs(got - expected) <= ATOL + RTOL * np.abs(expected))
    assert result.output_shapes[0].dimensions == (2, 3) and result.output_shapes[0].is_sufficient


def test_an_output_of_unknown_shape_is_filled_in_and_a_small_one_refused():
    device = load_factory(f"{EXAMPLE}:MinimalDevice")()
    model = _graph((0, 0))
    prepared = device.prepareModel(model)
    full = valid_request(_graph((2, 3)), [np.ones((2, 3), np.float32).tobytes(), bytes(12)])
    result = prepared.executeSynchronously(full)
    assert result.output_shapes[0].dimensions == (2, 3)
    small = Request(full.inputs, (RequestArgument(False, DataLocation(1, 0, 8)),), full.pools)
    with pytest.raises(HalError) as e:
        prepared.executeSynchronously(small)
    assert e.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert e.value.output_shapes[0].dimensions == (2, 3) and not e.value.output_shapes[0].is_sufficient


def test_unsupported_operations_are_declined_and_invalid_models_refused():
    device = load_factory(f"{EXAMPLE}:MinimalDevice")()
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_INT32, (4,))
    y = b.add_operand(OperandType.TENSOR_INT32, (4,))
    b.add_operation(OperationType.ADD, [x, x, b.add_constant(0, OperandType.INT32)], [y])
    b.mark_outputs(y)
    ints = b.build()
    assert device.getSupportedOperations(ints) == (False,)
    with pytest.raises(HalError) as e:
        device.prepareModel(ints)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    broken = _graph((2, 3))
    op = broken.main.operations[0]
    bad = broken.main.__class__(
        broken.main.operands, (op.__class__(op.type, op.inputs[:2], op.outputs), *broken.main.operations[1:]),
        broken.main.input_indexes, broken.main.output_indexes,
    )  # fmt: skip
    with pytest.raises(HalError) as e:
        device.getSupportedOperations(broken.__class__(bad, operand_values=broken.operand_values))
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
