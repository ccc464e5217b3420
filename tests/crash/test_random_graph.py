"""Random valid graphs: validity, determinism, coverage, bounded values, the reference check, dumps and probing."""

from __future__ import annotations

import collections
import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from driver.device import SampleDevice, Variant
from driver.operands import constant_value
from driver.variants import SampleAll
from mlts import __version__
from mlts.cli import main
from mlts.crash.random_check import (
    INPUT_MIN,
    check_outputs,
    classify_failure,
    dump,
    random_inputs,
    reference_outputs,
    supported_operations,
)
from mlts.crash.random_graph import (
    DIVISOR_MIN,
    EXP_INPUT_LIMIT,
    INPUT_BOUND,
    KNOWN_OP_TYPES,
    VALUE_LIMIT,
    GraphSpec,
    random_model,
    supported_op_types,
)
from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus, OperandLifeTime, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import Capabilities, Model, PerformanceInfo
from mlts.hal.validate import validate_model
from mlts.runtime.session import Session

Op = OperationType
# The operation types the random stress modes must cover.
REQUIRED = {
    Op.ADD, Op.MUL, Op.SUB, Op.DIV, Op.MAXIMUM, Op.MINIMUM, Op.RELU, Op.RELU1, Op.RELU6, Op.LOGISTIC,
    Op.TANH, Op.ABS, Op.NEG, Op.EXP, Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D,
    Op.FULLY_CONNECTED, Op.RESHAPE, Op.CONCATENATION, Op.SOFTMAX, Op.TRANSPOSE, Op.PAD, Op.MEAN,
    Op.REDUCE_SUM, Op.SLICE, Op.SQUEEZE, Op.EXPAND_DIMS,
}  # fmt: skip
SMALL_SPECS = (
    GraphSpec(10),
    GraphSpec(6, max_dim=4),
    GraphSpec(12, min_dim=2, max_dim=6, quant=0.5),
    GraphSpec(8, max_rank=2),
    GraphSpec(7, quant=1.0),
    GraphSpec(9, max_dim=8, quant=0.0),
)
SEEDS = range(200)
QUANT_OPERANDS = (OperandType.TENSOR_QUANT8_ASYMM,)


def _encoded(model: Model) -> bytes:
    return nnfile.encode(model)


def _spec(seed: int) -> GraphSpec:
    return SMALL_SPECS[seed % len(SMALL_SPECS)]


def _run_on_sample_all(device: SampleAll, model: Model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with Session(device, model, measure=False) as session:
        outputs, _ = session.run(inputs)
    return outputs


def _float_outputs_bounded(outputs: list[np.ndarray]) -> bool:
    return all(
        np.isfinite(o).all() and np.abs(o).max(initial=0.0) <= VALUE_LIMIT
        for o in outputs
        if o.dtype == np.float32
    )


@pytest.fixture(scope="module")
def small_models() -> list[tuple[int, GraphSpec, Model]]:
    return [(seed, _spec(seed), random_model(seed, _spec(seed))) for seed in SEEDS]


# ------------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ops": 0}, "at least 1 operation"),
        ({"ops": 3, "min_dim": 5, "max_dim": 4}, "1 <= min <= max"),
        ({"ops": 3, "max_rank": 0}, "max_rank"),
        ({"ops": 3, "quant": 1.5}, "quant share"),
        ({"ops": 3, "op_types": frozenset()}, "op_types is empty"),
        ({"ops": 3, "op_types": frozenset({Op.LSTM})}, "cannot make LSTM"),
        ({"ops": 3, "max_rank": 3, "op_types": frozenset({Op.CONV_2D})}, "CONV_2D"),
    ],
)
def test_spec_rejects_what_it_cannot_generate(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GraphSpec(**kwargs)


def test_default_types_follow_rank_and_quant_share():
    assert REQUIRED <= GraphSpec(5).resolved_op_types() <= KNOWN_OP_TYPES
    flat = GraphSpec(5, max_rank=2).resolved_op_types()
    assert Op.CONV_2D not in flat and Op.MAX_POOL_2D not in flat and Op.FULLY_CONNECTED in flat
    assert Op.QUANTIZE not in GraphSpec(5, quant=0.0).resolved_op_types()


def test_spec_json_round_trips():
    spec = GraphSpec(7, 2, 9, 3, frozenset({Op.ADD, Op.SOFTMAX}), 0.5)
    assert json.loads(spec.to_json())["op_types"] == ["ADD", "SOFTMAX"]
    assert GraphSpec.from_json(spec.to_json()) == spec
    assert GraphSpec.from_json(GraphSpec(4).to_json()) == GraphSpec(4)


# ------------------------------------------------------------------ the models


def test_every_model_is_valid_with_exactly_the_asked_operations(small_models):
    for seed, spec, model in small_models:
        validate_model(model)
        sub = model.main
        assert len(sub.operations) == spec.ops, seed
        assert {op.type for op in sub.operations} <= spec.resolved_op_types(), seed
        for index in sub.input_indexes:
            dims = sub.operands[index].dimensions
            assert len(dims) <= spec.max_rank and all(d >= 1 for d in dims), seed


def test_models_are_deterministic_and_seeds_differ():
    for seed in range(20):
        spec = _spec(seed)
        first = _encoded(random_model(seed, spec))
        assert first == _encoded(random_model(seed, spec)), seed
        assert first != _encoded(random_model(seed + 1000, spec)), seed


def test_graphs_chain_results_and_have_several_inputs_and_outputs():
    model = random_model(3, GraphSpec(60))
    sub = model.main
    written = {o for op in sub.operations for o in op.outputs}
    reads_results = sum(any(i in written for i in op.inputs) for op in sub.operations)
    assert reads_results >= 30  # a DAG, not 60 independent operations
    assert len(sub.input_indexes) >= 2 and len(sub.output_indexes) >= 2
    lifetimes = collections.Counter(sub.operands[i].lifetime for op in sub.operations for i in op.inputs)
    assert lifetimes[OperandLifeTime.CONSTANT_COPY] and lifetimes[OperandLifeTime.CONSTANT_REFERENCE]


def test_every_listed_type_appears_in_float_and_quant8_forms(small_models):
    forms: dict[int, set[int]] = collections.defaultdict(set)
    conv_inputs: set[int] = set()
    for _, _, model in small_models:
        sub = model.main
        for op in sub.operations:
            forms[op.type].add(sub.operands[op.inputs[0]].type)
            if op.type == Op.CONV_2D:
                conv_inputs.add(len(op.inputs))
    assert REQUIRED <= set(forms), sorted(Op(t).name for t in REQUIRED - set(forms))
    quantizable = {Op.ADD, Op.MUL, Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED, Op.SOFTMAX,
                   Op.AVERAGE_POOL_2D, Op.MAX_POOL_2D, Op.CONCATENATION, Op.RESHAPE, Op.LOGISTIC}  # fmt: skip
    for t in quantizable:
        assert OperandType.TENSOR_QUANT8_ASYMM in forms[t], Op(t).name
        assert OperandType.TENSOR_FLOAT32 in forms[t], Op(t).name
    # Implicit padding without/with layout/with dilations, explicit padding without/with layout/with dilations.
    assert conv_inputs == {7, 8, 10, 11, 13}


def test_op_types_restrict_the_generator():
    only = frozenset({Op.TANH, Op.FULLY_CONNECTED})
    for seed in range(10):
        model = random_model(seed, GraphSpec(15, op_types=only))
        validate_model(model)
        assert {op.type for op in model.main.operations} <= only


# ------------------------------------------------------------------ running them


def test_sample_driver_matches_the_reference_and_values_stay_bounded(small_models):
    device = SampleAll()
    for seed, _, model in small_models:
        inputs = random_inputs(model, seed)
        expected = reference_outputs(model, inputs)
        assert _float_outputs_bounded(expected), seed
        actual = _run_on_sample_all(device, model, inputs)
        assert check_outputs(actual, expected) is None, seed


def test_six_hundred_operation_models_generate_fast_and_run():
    device = SampleAll()
    spec = GraphSpec(600)
    for seed in (0, 1, 2):
        model = random_model(seed, spec)  # its speed (1 s budget): benchmarks/speed_budgets.py
        validate_model(model)
        assert len(model.main.operations) == 600
        inputs = random_inputs(model, seed)
        expected = reference_outputs(model, inputs)
        assert _float_outputs_bounded(expected)
        assert check_outputs(_run_on_sample_all(device, model, inputs), expected) is None


def _every_value(model: Model, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Operand index -> value of every model input, constant and operation result (all made outputs)."""
    sub = model.main
    temporaries = [i for i, o in enumerate(sub.operands) if o.lifetime == OperandLifeTime.TEMPORARY_VARIABLE]
    operands = tuple(
        dataclasses.replace(o, lifetime=OperandLifeTime.SUBGRAPH_OUTPUT) if i in temporaries else o
        for i, o in enumerate(sub.operands)
    )
    outputs = (*sub.output_indexes, *temporaries)
    exposed = dataclasses.replace(
        model, main=dataclasses.replace(sub, operands=operands, output_indexes=outputs)
    )
    values = dict(zip(outputs, reference_outputs(exposed, inputs), strict=True))
    values.update(zip(sub.input_indexes, inputs, strict=True))
    for i, operand in enumerate(sub.operands):
        if operand.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
            values[i] = np.asarray(constant_value(model, operand))
    return values


@pytest.mark.parametrize(
    ("seeds", "spec"), [(range(40), GraphSpec(40, quant=0.5)), (range(1), GraphSpec(600))]
)
def test_every_intermediate_value_is_finite_and_bounded(seeds, spec):
    for seed in seeds:
        model = random_model(seed, spec)
        values = _every_value(model, random_inputs(model, seed))
        for op in model.main.operations:
            for i in op.outputs:
                v = values[i]
                if v.dtype == np.float32:
                    assert np.isfinite(v).all() and np.abs(v).max() <= VALUE_LIMIT, (seed, Op(op.type).name)
            if op.type == Op.EXP:
                assert values[op.inputs[0]].max() <= EXP_INPUT_LIMIT, seed
            if op.type == Op.DIV:
                assert np.abs(values[op.inputs[1]]).min() >= DIVISOR_MIN, seed


@pytest.mark.parametrize(
    ("op", "fn"),
    [
        (Op.RELU, lambda x: np.maximum(x, 0.0)),
        (Op.RELU1, lambda x: np.clip(x, -1.0, 1.0)),
        (Op.RELU6, lambda x: np.clip(x, 0.0, 6.0)),
        (Op.ABS, np.abs),
        (Op.NEG, np.negative),
        (Op.EXP, np.exp),
        (Op.TANH, np.tanh),
        (Op.LOGISTIC, lambda x: 1.0 / (1.0 + np.exp(-x))),
    ],
)
def test_reference_of_one_elementwise_operation_matches_float64_numpy(op, fn):
    model = random_model(5, GraphSpec(1, op_types=frozenset({op}), quant=0.0))
    (x,) = random_inputs(model, 5)
    (y,) = reference_outputs(model, [x])
    expected = fn(x.astype(np.float64))
    assert check_outputs([y], [expected.astype(np.float32)]) is None
    assert np.all(np.abs(y - expected) <= 1e-5 + 5 * 2.0**-23 * np.abs(expected))


def test_random_inputs_are_bounded_non_zero_and_deterministic():
    model = random_model(11, GraphSpec(40, quant=0.5))
    inputs = random_inputs(model, 4)
    assert any(a.dtype == np.uint8 for a in inputs) and any(a.dtype == np.float32 for a in inputs)
    for a in inputs:
        if a.dtype == np.float32:
            assert np.all((np.abs(a) >= INPUT_MIN) & (np.abs(a) <= INPUT_BOUND))
        else:
            assert a.min() >= 1
    again = random_inputs(model, 4)
    assert all(np.array_equal(a, b) for a, b in zip(inputs, again, strict=True))


# ------------------------------------------------------------------ dumps


def test_dump_loads_back_identical_runs_and_regenerates(tmp_path):
    seed, spec = 17, GraphSpec(25, quant=0.5)
    model = random_model(seed, spec)
    path = dump(model, tmp_path / "dumps", seed, spec, "output 0 differs")
    assert path.name == "random-17-25.nnm"
    loaded = nnfile.load(path)
    assert _encoded(loaded.model) == _encoded(model)
    meta = loaded.metadata
    assert (meta["seed"], meta["reason"], meta["mlts_version"]) == ("17", "output 0 differs", __version__)
    regenerated = random_model(int(meta["seed"]), GraphSpec.from_json(meta["spec"]))
    assert _encoded(regenerated) == _encoded(model)
    inputs = random_inputs(model, seed)
    assert check_outputs(reference_outputs(loaded.model, inputs), reference_outputs(model, inputs)) is None
    result = CliRunner().invoke(main, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    assert "reason: output 0 differs" in result.output


# ------------------------------------------------------------------ output checks and failure classes


def test_check_outputs_accepts_tolerance_and_names_the_worst_element():
    e = np.array([[1.0, 2.0], [100.0, -3.0]], dtype=np.float32)
    within = e + np.float32(5e-6)  # 5e-6 <= 1e-5 + 5*2^-23*|e|
    assert check_outputs([within], [e]) is None
    bad = e.copy()
    bad[1, 0] += np.float32(0.01)  # allowed at 100: 1e-5 + 5.96e-5 = 6.96e-5
    bad[0, 1] += np.float32(2e-5)  # allowed at 2: 1.12e-5; a smaller ratio than the element above
    reason = check_outputs([e, bad], [e, e])
    assert reason is not None and reason.startswith("output 1: element [1, 0]")
    nan = e.copy()
    nan[0, 0] = np.nan
    assert "element [0, 0]" in check_outputs([nan], [e])


def test_check_outputs_quant8_allows_one_unit_and_checks_shapes_and_counts():
    e = np.array([10, 200, 0], dtype=np.uint8)
    assert check_outputs([np.array([11, 199, 1], dtype=np.uint8)], [e]) is None
    reason = check_outputs([np.array([10, 202, 0], dtype=np.uint8)], [e])
    assert reason is not None and "element [1]" in reason and "error 2 units" in reason
    assert "shape" in check_outputs([e[:2]], [e])
    assert "1 outputs, the reference has 2" in check_outputs([e], [e, e])


def _no_conv(model, op) -> bool:
    return op.type != Op.CONV_2D


class NoConvDevice(SampleDevice):
    """The sample driver refusing CONV_2D."""

    variant = Variant("sample-no-conv", _no_conv, Capabilities.uniform(PerformanceInfo(1.0, 1.0)))


def _float_first_input(model, op) -> bool:
    return model.main.operands[op.inputs[0]].type == OperandType.TENSOR_FLOAT32


class FloatOnlyDevice(SampleDevice):
    """The sample driver refusing operations whose first input is not float32."""

    variant = Variant(
        "sample-float-only", _float_first_input, Capabilities.uniform(PerformanceInfo(1.0, 1.0))
    )


class DivQueryFails(SampleAll):
    """getSupportedOperations fails for any model holding DIV."""

    def getSupportedOperations(self, model):
        if any(op.type == Op.DIV for op in model.main.operations):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "query failed")
        return super().getSupportedOperations(model)


def test_classify_failure_is_structural():
    refusal = HalError(ErrorStatus.INVALID_ARGUMENT, "any wording at all")
    assert classify_failure(refusal, (True, False, True)) == "unsupported"
    assert classify_failure(HalError(ErrorStatus.GENERAL_FAILURE, "x"), (False,)) == "unsupported"
    # The wording alone decides nothing: a "does not support" message with every operation supported.
    assert classify_failure(HalError(ErrorStatus.INVALID_ARGUMENT, "does not support"), (True,)) == "invalid"
    assert classify_failure(HalError(ErrorStatus.INVALID_ARGUMENT, "operand 4: bad scale"), None) == "invalid"
    assert classify_failure(HalError(ErrorStatus.GENERAL_FAILURE, "operation 2 failed"), (True,)) == "failure"
    assert classify_failure(HalError(ErrorStatus.DEVICE_UNAVAILABLE, "x"), (False,)) == "failure"
    model = random_model(2, GraphSpec(3, op_types=frozenset({Op.CONV_2D}), quant=0.0))
    device = NoConvDevice()
    with pytest.raises(HalError) as caught:
        device.prepareModel(model)
    assert classify_failure(caught.value, supported_operations(device, model)) == "unsupported"


def test_supported_op_types_probes_the_driver():
    spec = GraphSpec(10, quant=0.5)
    assert supported_op_types(SampleAll(), spec) == spec.resolved_op_types()
    assert supported_op_types(NoConvDevice(), spec) == spec.resolved_op_types() - {Op.CONV_2D}
    assert supported_op_types(DivQueryFails(), spec) == spec.resolved_op_types() - {Op.DIV}
    # A float-only driver supports ADD in float graphs, not where ADD may be quantized.
    float_only = supported_op_types(FloatOnlyDevice(), spec)
    assert Op.ADD not in float_only and Op.SUB in float_only and Op.DEQUANTIZE not in float_only
    assert Op.ADD in supported_op_types(FloatOnlyDevice(), GraphSpec(10, quant=0.0))


NEWER = {
    Op.SQRT, Op.RSQRT, Op.LOG, Op.SIN, Op.FLOOR, Op.ELU, Op.HARD_SWISH, Op.PRELU, Op.POW, Op.LOG_SOFTMAX,
    Op.L2_NORMALIZATION, Op.LOCAL_RESPONSE_NORMALIZATION, Op.INSTANCE_NORMALIZATION, Op.DEPTH_TO_SPACE,
    Op.SPACE_TO_DEPTH, Op.SPACE_TO_BATCH_ND, Op.BATCH_TO_SPACE_ND, Op.CHANNEL_SHUFFLE, Op.RESIZE_BILINEAR,
    Op.RESIZE_NEAREST_NEIGHBOR, Op.TILE, Op.GATHER, Op.REDUCE_MAX, Op.REDUCE_MIN, Op.REDUCE_PROD,
    Op.L2_POOL_2D, Op.GROUPED_CONV_2D, Op.TRANSPOSE_CONV_2D,
}  # fmt: skip


def test_newer_operations_are_generated_valid_bounded_and_run_like_the_reference():
    device = SampleAll()
    assert NEWER <= KNOWN_OP_TYPES
    seen: dict[int, set[int]] = collections.defaultdict(set)
    for seed in range(60):
        spec = GraphSpec(6, max_dim=6, op_types=frozenset(NEWER), quant=0.5)
        model = random_model(seed, spec)
        validate_model(model)
        sub = model.main
        for op in sub.operations:
            seen[op.type].add(sub.operands[op.inputs[0]].type)
        inputs = random_inputs(model, seed)
        expected = reference_outputs(model, inputs)
        assert _float_outputs_bounded(expected), seed
        assert check_outputs(_run_on_sample_all(device, model, inputs), expected) is None, seed
    assert NEWER <= set(seen), sorted(Op(t).name for t in NEWER - set(seen))
    for t in (Op.DEPTH_TO_SPACE, Op.GATHER, Op.TILE, Op.REDUCE_MAX, Op.GROUPED_CONV_2D, Op.L2_NORMALIZATION):
        assert OperandType.TENSOR_QUANT8_ASYMM in seen[t], Op(t).name
