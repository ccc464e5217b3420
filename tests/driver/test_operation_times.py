"""Plan.run's per-operation times (`op_times`): one entry per executed operation of the plan's subgraph,
IF and WHILE counted once with their subgraphs inside, nothing collected when not asked."""

from __future__ import annotations

import numpy as np

from driver.executor import Plan
from mlts.hal.validate import validate_model
from tests.driver import cfkit
from tests.driver.timingkit import chain_model


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
