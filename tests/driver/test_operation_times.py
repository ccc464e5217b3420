"""Plan.run's per-operation times (`op_times`): one entry per executed operation of the plan's subgraph,
IF and WHILE counted once with their subgraphs inside, nothing collected when not asked."""

from __future__ import annotations

import numpy as np

from driver.executor import Plan
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as Op
from mlts.hal.validate import validate_model
from tests.driver import cfkit


def chain_model():
    """y = relu((x + c) * c) - c: four operations on [2, 3] float32."""
    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, (2, 3))
    c = b.add_constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    none = b.add_scalar(0, T.INT32)
    t1 = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    t2 = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    t3 = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    y = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    b.add_operation(Op.ADD, (x, c, none), (t1,))
    b.add_operation(Op.MUL, (t1, c, none), (t2,))
    b.add_operation(Op.RELU, (t2,), (t3,))
    b.add_operation(Op.SUB, (t3, c, none), (y,))
    b.mark_outputs(y)
    return b.build()


def test_every_operation_is_timed_once_in_order():
    model = chain_model()
    validate_model(model)
    plan = Plan(model)
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    times: list[tuple[int, int]] = []
    (out,) = plan.run([x], op_times=times)
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(out, np.maximum((x + c) * c, 0) - c)
    assert [i for i, _ in times] == [0, 1, 2, 3]
    assert all(type(ns) is int and ns >= 0 for _, ns in times)
    (again,) = plan.run([x])  # not asked: the same result, nothing collected anywhere
    np.testing.assert_array_equal(again, out)
    assert len(times) == 4


def test_while_counts_once_with_its_iterations_inside():
    model = cfkit.while_model()
    step = np.array([0.1, 0.2, 0.3], np.float32)
    args = [
        np.array([0.0, 0.0, 0.5], np.float32),
        np.array([0], np.float32),
        np.array([100.0], np.float32),
        step,
    ]
    times: list[tuple[int, int]] = []
    _, count = Plan(model).run(args, op_times=times)
    assert count[0] > 3  # several iterations of a three-operation body ran
    assert [i for i, _ in times] == [0]


def test_if_counts_once():
    a = np.ones((2, 3), np.float32)
    times: list[tuple[int, int]] = []
    (out,) = Plan(cfkit.if_model()).run([np.array([True]), a, a], op_times=times)
    np.testing.assert_array_equal(out, a + a)
    assert [i for i, _ in times] == [0]
