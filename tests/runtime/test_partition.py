"""Partitioning across drivers: per-operation device choice, steps and sub-models, CPU path and fallback.

The drivers are in-process sample drivers with chosen support rules and capabilities; results
are checked against the single-device executor (bit for bit: the same kernels run) and against
float64 NumPy references.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from driver.device import Variant
from driver.executor import run_model
from driver.variants import SampleAll
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, ExecutionPreference, OperandType, OperationType
from mlts.hal.enums import OperandLifeTime as L
from mlts.hal.errors import HalError
from mlts.hal.interface import PreparedModel
from mlts.hal.types import (
    Capabilities,
    DataLocation,
    Model,
    Operand,
    OperandPerformance,
    Operation,
    PerformanceInfo,
    Subgraph,
)
from mlts.hal.validate import validate_model
from mlts.runtime.partition import CPU, constant_array, plan_partition
from mlts.runtime.partitioned import PartitionedSession, load_cpu_device, open_partitioned
from mlts.runtime.selection import choose_device, model_cost
from tests.runtime.partitionkit import Q2_SCALE, Q_SCALE, Q_ZP, X_SHAPE, Y_SHAPE, chain_inputs, chain_model

T = OperandType
O = OperationType  # noqa: E741
FAST, LOW_POWER, SUSTAINED = (
    ExecutionPreference.FAST_SINGLE_ANSWER,
    ExecutionPreference.LOW_POWER,
    ExecutionPreference.SUSTAINED_SPEED,
)
FLOAT_TYPES = (T.FLOAT32, T.TENSOR_FLOAT32)
QUANT_TYPES = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
FP32_ATOL, FP32_RTOL = 1e-5, 5 * 2**-23

# ---------------------------------------------------------------- fake drivers


def caps(
    float_perf: tuple[float, float] | None = None,
    quant_perf: tuple[float, float] | None = None,
    relaxed: tuple[float, float] = (1.0, 1.0),
) -> Capabilities:
    """Capabilities listing only the float32 and/or quant8 types (every other type counts as FLT_MAX)."""
    entries = []
    for types, perf in ((FLOAT_TYPES, float_perf), (QUANT_TYPES, quant_perf)):
        if perf is not None:
            entries += [OperandPerformance(int(t), PerformanceInfo(*perf)) for t in types]
    entries.sort(key=lambda e: e.type)
    unused = PerformanceInfo(1.0, 1.0)
    return Capabilities(PerformanceInfo(*relaxed), PerformanceInfo(*relaxed), tuple(entries), unused, unused)


def first_input_in(*types: int):
    """Support rule: the operation's first input has one of `types`."""
    return lambda model, op: model.main.operands[op.inputs[0]].type in types


def ops_of(*op_types: int):
    """Support rule: float32 operations of the given types only."""
    return lambda model, op: op.type in op_types and model.main.operands[op.inputs[0]].type in FLOAT_TYPES


def device(name: str, rule, capabilities: Capabilities, base: type = SampleAll):
    """An in-process sample driver named `name` with the given support rule and capabilities."""
    cls = type(f"Fake_{name.replace('-', '_')}", (base,), {"variant": Variant(name, rule, capabilities)})
    return cls()


class Refusing(SampleAll):
    """A driver that claims support but cannot prepare anything."""

    def prepareModel(self, model, *args, **kwargs):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "out of accelerator memory")


class RecordedPrepared(PreparedModel):
    """A prepared model that notes when it is closed."""

    def __init__(self, inner: PreparedModel, log: list) -> None:
        self.inner, self.log = inner, log

    def executeSynchronously(self, *args, **kwargs):
        return self.inner.executeSynchronously(*args, **kwargs)

    def close(self) -> None:
        self.log.append("closed")
        self.inner.close()


class Recording(SampleAll):
    """A driver whose prepared models and own closing are logged in `log`."""

    log: list

    def prepareModel(self, model, *args, **kwargs):
        self.log.append("prepared")
        return RecordedPrepared(super().prepareModel(model, *args, **kwargs), self.log)

    def close(self) -> None:
        self.log.append("device closed")


def three_devices() -> dict:
    return {
        "fast": device("fast", first_input_in(*FLOAT_TYPES), caps(float_perf=(0.5, 2.0))),
        "slow": device("slow", first_input_in(*FLOAT_TYPES), caps(float_perf=(2.0, 0.5))),
        "quant": device("quant", first_input_in(*QUANT_TYPES), caps(quant_perf=(0.9, 0.9))),
    }


# ---------------------------------------------------------------- models and references


def chain_reference(model: Model, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, d) in float64: the convolution by hand, quantisation rounding half away from zero."""
    sub = model.main
    w, bias, k = (_constant(model, sub.operations[op].inputs[i]) for op, i in ((0, 1), (0, 2), (2, 1)))
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = np.zeros(Y_SHAPE)
    for kh in range(3):
        for kw in range(3):
            conv += np.einsum("nhwc,oc->nhwo", xp[:, kh : kh + 5, kw : kw + 5, :], w[:, kh, kw, :])
    m = (np.maximum(conv + bias, 0.0) + k) * y
    q = np.clip(Q_ZP + np.copysign(np.floor(np.abs(m / Q_SCALE) + 0.5), m), 0, 255)
    d = (q - Q_ZP) * Q_SCALE * 2  # q + q at twice the scale: the same real value
    return m, d


def _constant(model: Model, index: int) -> np.ndarray:
    return constant_array(model, model.main.operands[index]).astype(np.float64)


def branch_model() -> Model:
    """Two independent branches from x, interleaved in operation order, joined by ADD.

    0 RELU(x), 1 MUL(x, x), 2 RELU(op0) (also output 0), 3 MUL(op1, op1), 4 ADD(op2, op3) (output 1).
    """
    shape = (2, 3)
    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, shape)
    none = b.add_scalar(0, T.INT32)
    t = [b.add_operand(T.TENSOR_FLOAT32, shape) for _ in range(5)]
    b.add_operation(O.RELU, [x], [t[0]])
    b.add_operation(O.MUL, [x, x, none], [t[1]])
    b.add_operation(O.RELU, [t[0]], [t[2]])
    b.add_operation(O.MUL, [t[1], t[1], none], [t[3]])
    b.add_operation(O.ADD, [t[2], t[3], none], [t[4]])
    b.mark_outputs(t[2], t[4])
    return b.build()


def assert_bitwise_equal(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype
        assert a.tobytes() == e.tobytes()


# ---------------------------------------------------------------- device per operation


@pytest.mark.parametrize(
    "preference, float_device",
    [(FAST, "fast"), (SUSTAINED, "fast"), (LOW_POWER, "slow")],
)
def test_each_operation_goes_to_the_cheapest_supporting_device(preference, float_device):
    plan = plan_partition(chain_model(), three_devices(), preference)
    # QUANTIZE reads float32 (the float drivers' rule and price); quant ADD and DEQUANTIZE read quant8.
    assert plan.assignment == (float_device,) * 5 + ("quant", "quant")
    other = "slow" if float_device == "fast" else "fast"
    assert plan.coverage() == {float_device: 5, other: 0, "quant": 2, CPU: 0}


def test_ties_go_to_the_first_name_and_unsupported_operations_to_the_cpu_path():
    twins = {
        name: device(name, first_input_in(*FLOAT_TYPES), caps(float_perf=(0.7, 0.7)))
        for name in ("b-twin", "a-twin")
    }
    plan = plan_partition(chain_model(), twins, FAST)
    assert plan.assignment == ("a-twin",) * 5 + (CPU, CPU)
    assert plan.coverage() == {"a-twin": 5, "b-twin": 0, CPU: 2}


def test_a_type_missing_from_the_capabilities_counts_as_flt_max():
    unpriced = device("unpriced", first_input_in(*FLOAT_TYPES), caps(quant_perf=(0.1, 0.1)))
    dear = device("zz-dear", first_input_in(*FLOAT_TYPES), caps(float_perf=(50.0, 50.0)))
    assert (
        plan_partition(chain_model(), {"unpriced": unpriced, "zz-dear": dear}).assignment[:5]
        == ("zz-dear",) * 5
    )
    # Even at FLT_MAX a supporting driver is preferred to the CPU path.
    assert plan_partition(chain_model(), {"unpriced": unpriced}).assignment[:5] == ("unpriced",) * 5


def test_relaxed_models_are_priced_by_the_relaxed_entries():
    devices = {
        "plain": device(
            "plain", first_input_in(*FLOAT_TYPES), caps(float_perf=(0.5, 0.5), relaxed=(3.0, 3.0))
        ),
        "relax": device(
            "relax", first_input_in(*FLOAT_TYPES), caps(float_perf=(1.0, 1.0), relaxed=(0.2, 0.2))
        ),
    }
    assert plan_partition(chain_model(), devices).assignment[:5] == ("plain",) * 5
    assert plan_partition(chain_model(relax=True), devices).assignment[:5] == ("relax",) * 5
    # The whole-model choice prices operations the same way.
    assert model_cost(devices["relax"], chain_model(relax=True), FAST) == pytest.approx(
        5 * 0.2 + 2 * 3.4028234663852886e38
    )


def test_a_driver_that_cannot_answer_is_left_out_with_its_reason():
    class Mute(SampleAll):
        variant = Variant("mute", lambda model, op: True, caps(float_perf=(0.1, 0.1)))

        def getSupportedOperations(self, model):
            raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, "driver process is gone")

    plan = plan_partition(chain_model(), {"mute": Mute(), **three_devices()})
    assert plan.assignment == ("fast",) * 5 + ("quant", "quant")
    assert plan.unavailable == {"mute": "DEVICE_UNAVAILABLE: driver process is gone"}
    assert plan.coverage()["mute"] == 0


def test_a_driver_may_not_take_the_cpu_paths_name():
    with pytest.raises(HalError, match="may not be named 'cpu'"):
        plan_partition(chain_model(), {CPU: SampleAll()})


# ---------------------------------------------------------------- steps and sub-models


def test_steps_have_valid_self_contained_sub_models():
    model = chain_model()
    plan = plan_partition(model, three_devices())
    sub = model.main
    x, y = sub.input_indexes
    m, d = sub.output_indexes
    q = sub.operations[4].outputs[0]
    assert [(s.device, s.operations) for s in plan.steps] == [("fast", (0, 1, 2, 3, 4)), ("quant", (5, 6))]
    assert (plan.steps[0].inputs, plan.steps[0].outputs) == ((x, y), (m, q))
    assert (plan.steps[1].inputs, plan.steps[1].outputs) == ((q,), (d,))
    for step in plan.steps:
        validate_model(step.model)
        assert len(step.model.main.operations) == len(step.operations)
        assert [o.type for o in step.model.main.operations] == [
            sub.operations[k].type for k in step.operations
        ]
    # The filter (a pooled constant) is copied into step 0 with its values.
    step0 = plan.steps[0].model
    np.testing.assert_array_equal(
        _constant(step0, step0.main.operations[0].inputs[1]), _constant(model, sub.operations[0].inputs[1])
    )
    # The intermediate keeps its quantisation across the cut.
    q_in = plan.steps[1].model.main.operands[plan.steps[1].model.main.input_indexes[0]]
    assert (q_in.type, q_in.scale, q_in.zero_point) == (T.TENSOR_QUANT8_ASYMM, Q_SCALE, Q_ZP)


def test_unsupported_operations_make_cpu_steps_between_driver_steps():
    minimal = {"minimal": device("minimal", ops_of(O.ADD, O.CONV_2D), caps(float_perf=(0.4, 0.5)))}
    plan = plan_partition(chain_model(), minimal)
    assert plan.assignment == ("minimal", CPU, "minimal", CPU, CPU, CPU, CPU)
    assert [(s.device, s.operations) for s in plan.steps] == [
        ("minimal", (0,)),
        (CPU, (1,)),
        ("minimal", (2,)),
        (CPU, (3, 4, 5, 6)),
    ]
    assert plan.coverage() == {"minimal": 2, CPU: 5}
    for step in plan.steps:
        validate_model(step.model)


def test_independent_branches_are_grouped_by_device_in_dependency_order():
    model = branch_model()
    devices = {"relu": device("relu", ops_of(O.RELU, O.ADD), caps(float_perf=(0.5, 0.5)))}
    plan = plan_partition(model, devices)
    assert plan.assignment == ("relu", CPU, "relu", CPU, "relu")
    # Operation order alone would give five steps; ready operations of the current device come first.
    assert [(s.device, s.operations) for s in plan.steps] == [("relu", (0, 2)), (CPU, (1, 3)), ("relu", (4,))]
    t2, t4 = model.main.output_indexes
    assert plan.steps[0].outputs == (t2,)  # a model output the last step also reads
    assert t2 in plan.steps[2].inputs
    x = np.array([[-1.5, 0.0, 2.0], [3.0, -0.25, 0.5]], np.float32)
    with PartitionedSession(model, devices) as session:
        outputs, info = session.run([x])
    assert_bitwise_equal(outputs, run_model(model, [x]))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(outputs[0], np.maximum(x64, 0), rtol=0, atol=0)
    np.testing.assert_allclose(outputs[1], np.maximum(x64, 0) + x64**4, rtol=FP32_RTOL, atol=FP32_ATOL)
    assert [r.device for r in info.steps] == ["relu", CPU, "relu"]


def test_a_step_whose_results_nobody_reads_still_has_a_valid_sub_model():
    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, (3,))
    out, dead = b.add_operand(T.TENSOR_FLOAT32, (3,)), b.add_operand(T.TENSOR_FLOAT32, (3,))
    b.add_operation(O.RELU, [x], [out])
    b.add_operation(O.MUL, [x, x, b.add_scalar(0, T.INT32)], [dead])
    b.mark_outputs(out)
    model = b.build()
    devices = {"relu": device("relu", ops_of(O.RELU), caps(float_perf=(0.5, 0.5)))}
    plan = plan_partition(model, devices)
    assert [(s.device, s.operations, s.outputs) for s in plan.steps] == [
        ("relu", (0,), (out,)),
        (CPU, (1,), (dead,)),
    ]
    validate_model(plan.steps[1].model)
    x_value = np.array([-2.0, 0.5, 3.0], np.float32)
    with PartitionedSession(model, devices) as session:
        (result,), _ = session.run([x_value])
    np.testing.assert_array_equal(result, np.maximum(x_value, 0))


def test_describe_is_json_ready():
    plan = plan_partition(chain_model(), three_devices())
    doc = json.loads(json.dumps(plan.describe()))
    assert [(o["index"], o["type"], o["device"], o["step"]) for o in doc["operations"]] == [
        (0, "CONV_2D", "fast", 0),
        (1, "RELU", "fast", 0),
        (2, "ADD", "fast", 0),
        (3, "MUL", "fast", 0),
        (4, "QUANTIZE", "fast", 0),
        (5, "ADD", "quant", 1),
        (6, "DEQUANTIZE", "quant", 1),
    ]
    assert [(s["device"], s["operations"]) for s in doc["steps"]] == [
        ("fast", [0, 1, 2, 3, 4]),
        ("quant", [5, 6]),
    ]
    assert doc["coverage"] == {"fast": 5, "slow": 0, "quant": 2, CPU: 0}
    assert doc["preference"] == "FAST_SINGLE_ANSWER"


def if_model() -> Model:
    """out = IF(cond, then: RELU, else: RELU)(x): a valid model with control flow."""

    def branch() -> Subgraph:
        operands = (
            Operand(T.TENSOR_FLOAT32, (2,), 1, lifetime=L.SUBGRAPH_INPUT),
            Operand(T.TENSOR_FLOAT32, (2,), 0, lifetime=L.SUBGRAPH_OUTPUT),
        )
        return Subgraph(operands, (Operation(O.RELU, (0,), (1,)),), (0,), (1,))

    operands = (
        Operand(T.TENSOR_BOOL8, (1,), 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.TENSOR_FLOAT32, (2,), 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0)),
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 1, 0)),
        Operand(T.TENSOR_FLOAT32, (2,), 0, lifetime=L.SUBGRAPH_OUTPUT),
    )
    main = Subgraph(operands, (Operation(O.IF, (0, 2, 3, 1), (4,)),), (0, 1), (4,))
    return Model(main, (branch(), branch()))


def test_control_flow_models_stay_whole_on_the_cpu_path_when_no_driver_takes_all():
    model = if_model()
    validate_model(model)
    # IF's first input is TENSOR_BOOL8, which none of the three float/quant devices supports.
    plan = plan_partition(model, three_devices())
    assert [(s.device, s.operations) for s in plan.steps] == [(CPU, (0,))]
    assert plan.steps[0].model is model
    x = np.array([-1.0, 2.0], np.float32)
    with open_partitioned(three_devices(), model) as session:
        for cond in (True, False):
            outputs, _ = session.run([np.array([cond]), x])
            np.testing.assert_array_equal(outputs[0], np.maximum(x, 0))


@pytest.mark.parametrize(
    "preference, chosen",
    [(ExecutionPreference.FAST_SINGLE_ANSWER, "all-fast"), (ExecutionPreference.LOW_POWER, "all-frugal")],
)
def test_control_flow_models_go_whole_to_the_cheapest_driver_that_supports_all(preference, chosen):
    devices = {
        "all-fast": device("all-fast", lambda m, op: True, Capabilities.uniform(PerformanceInfo(0.5, 2.0))),
        "all-frugal": device(
            "all-frugal", lambda m, op: True, Capabilities.uniform(PerformanceInfo(2.0, 0.5))
        ),
        **three_devices(),
    }
    plan = plan_partition(if_model(), devices, preference)
    assert [(s.device, s.operations) for s in plan.steps] == [(chosen, (0,))]
    assert plan.assignment == (chosen,)


# ---------------------------------------------------------------- running


def test_partitioned_results_equal_the_single_device_run_and_the_float64_reference():
    model = chain_model()
    inputs = chain_inputs()
    with open_partitioned(three_devices(), model) as session:
        outputs, info = session.run(inputs)
        again, _ = session.run(inputs)
    expected = run_model(model, inputs)
    assert_bitwise_equal(outputs, expected)
    assert_bitwise_equal(again, expected)
    m_ref, d_ref = chain_reference(model, *inputs)
    np.testing.assert_allclose(outputs[0], m_ref, rtol=FP32_RTOL, atol=FP32_ATOL)
    assert np.abs(m_ref).max() < 6.0  # inside the quantised range: no saturation to excuse
    np.testing.assert_allclose(outputs[1], d_ref, rtol=0, atol=Q2_SCALE + 1e-6)  # one quant8 unit
    assert [r.device for r in info.steps] == ["fast", "quant"]
    assert [s.dimensions for s in info.output_shapes] == [Y_SHAPE, Y_SHAPE]
    assert info.timing.time_on_device == sum(r.result.timing.time_on_device for r in info.steps)


def test_no_driver_at_all_runs_everything_on_the_cpu_path():
    model = chain_model()
    inputs = chain_inputs()
    with PartitionedSession(model, {}) as session:
        outputs, _ = session.run(inputs)
        assert session.plan.coverage() == {CPU: 7}
        assert [(s.device, s.operations) for s in session.plan.steps] == [(CPU, tuple(range(7)))]
        assert session.fallbacks == []
    assert_bitwise_equal(outputs, run_model(model, inputs))


def test_a_driver_failing_to_prepare_its_step_sends_the_whole_model_to_the_cpu_path():
    model = chain_model()
    inputs = chain_inputs()
    devices = three_devices()
    devices["quant"] = device("quant", first_input_in(*QUANT_TYPES), caps(quant_perf=(0.9, 0.9)), Refusing)
    with PartitionedSession(model, devices) as session:
        outputs, info = session.run(inputs)
        assert session.plan.coverage() == {"fast": 5, "slow": 0, "quant": 2, CPU: 0}
        # The step before it had prepared on "fast": released, the whole model is one CPU step.
        assert session.whole_model_fallback
        assert session.coverage() == {"fast": 0, "slow": 0, "quant": 0, CPU: 7}
        assert session.step_devices == [CPU] and len(session.steps) == 1
        assert session.steps[0].model is model
        assert len(session.fallbacks) == 1
        fallback = session.fallbacks[0]
        assert (fallback.step, fallback.device) == (1, "quant")
        assert fallback.reason == "GENERAL_FAILURE: out of accelerator memory"
        assert len(session.prepare_seconds) == 1 and session.prepare_seconds[0] >= 0
        doc = json.loads(json.dumps(session.describe()))
        assert doc["fallbacks"] == [{"step": 1, "device": "quant", "reason": fallback.reason}]
        assert doc["whole_model_fallback"] is True
        assert [s["ran_on"] for s in doc["steps"]] == [CPU, CPU]
        assert doc["operations"][0]["device"] == "fast" and doc["operations"][0]["ran_on"] == CPU
        assert doc["driver_buffers"] is None
        assert "whole model on the CPU path: step 1 failed on quant" in session.summary()
        again, _ = session.run(inputs)
    assert [r.device for r in info.steps] == [CPU]
    assert_bitwise_equal(outputs, run_model(model, inputs))
    assert_bitwise_equal(again, outputs)


class RefusingBadData(SampleAll):
    """A driver that claims support, then calls the model invalid."""

    def prepareModel(self, model, *args, **kwargs):
        raise HalError(ErrorStatus.INVALID_ARGUMENT, "operand 3 is not what I expected")


def test_invalid_argument_from_a_driver_is_not_recovered_from():
    devices = three_devices()
    devices["fast"] = device(
        "fast", first_input_in(*FLOAT_TYPES), caps(float_perf=(0.5, 2.0)), RefusingBadData
    )
    with pytest.raises(HalError) as e:
        PartitionedSession(chain_model(), devices)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "step 0 on fast failed to prepare: operand 3" in e.value.message


def test_close_releases_every_prepared_model_and_the_cpu_device():
    log: list = []
    recording = type(
        "RecordingFast",
        (Recording,),
        {"log": log, "variant": Variant("rec", ops_of(O.RELU, O.ADD), caps(float_perf=(0.5, 0.5)))},
    )
    cpu_log: list = []
    cpu_cls = type("RecordingCpu", (Recording,), {"log": cpu_log})
    session = PartitionedSession(branch_model(), {"rec": recording()}, cpu_factory=cpu_cls)
    session.run([np.ones((2, 3), np.float32)])
    assert log == ["prepared", "prepared"] and cpu_log == ["prepared"]
    session.close()
    session.close()
    assert log == ["prepared", "prepared", "closed", "closed"]
    assert cpu_log == ["prepared", "closed", "device closed"]
    with pytest.raises(HalError, match="closed"):
        session.run([np.ones((2, 3), np.float32)])


def test_inputs_are_checked_against_the_model():
    with PartitionedSession(chain_model(), three_devices()) as session:
        with pytest.raises(HalError, match="2 inputs, 1 arrays"):
            session.run([np.zeros(X_SHAPE, np.float32)])
        with pytest.raises(HalError, match="input 1 has dtype float64"):
            session.run([np.zeros(X_SHAPE, np.float32), np.zeros(Y_SHAPE)])


def test_the_cpu_path_is_loaded_by_spec_and_a_bad_spec_is_one_line():
    cpu = load_cpu_device()
    assert cpu.name == "sample-all"
    for spec in ("no.such.module:Driver", "driver.variants:Nothing", "not-a-spec"):
        with pytest.raises(HalError) as e:
            PartitionedSession(chain_model(), {}, cpu_factory=spec)
        assert e.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert "CPU path" in str(e.value) and "\n" not in str(e.value)


def test_a_step_the_cpu_path_cannot_prepare_is_an_error_naming_the_step():
    class Nothing(SampleAll):
        variant = Variant("nothing", lambda model, op: False, caps())

    with pytest.raises(HalError, match=r"step 0 \(operations \[0, 1, 2, 3, 4, 5, 6\]\) cannot be prepared"):
        PartitionedSession(chain_model(), {}, cpu_factory=Nothing)


# ---------------------------------------------------------------- the whole-model choice


def test_choose_device_refuses_a_model_no_single_driver_supports():
    with pytest.raises(HalError) as e:
        choose_device(three_devices(), chain_model())
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "no single driver supports every operation" in str(e.value)
    everything = {"all": SampleAll(), **three_devices()}
    assert choose_device(everything, chain_model()).name == "all"
