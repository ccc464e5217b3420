"""Preparation does what a static plan's first execution did (driver.executor.Plan.warm): the
straight-line function compiled, its runs of compiled calls bound into a workspace whose buffers are
allocated then; the first execution allocates nothing more and its results equal the second's and
those of a plan never warmed, bit for bit. Plans whose shapes are not all fixed are left alone."""

from __future__ import annotations

import numpy as np
import pytest

from driver import native
from driver.executor import Plan
from driver.variants import SampleAll
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O
from mlts.hal.memory import HostMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from tests.driver import bindkit
from tests.driver.bindkit import _inputs, _model
from tests.driver.warmkit import OUT, _bound_model, _reference

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


def test_warm_allocates_and_binds_what_the_first_execution_would() -> None:
    plan = Plan(_bound_model())
    assert plan.warm()
    assert plan.workspaces.created == 1 and len(plan.workspaces) == 1
    ws = plan.workspaces.free[0]
    assert len(ws.bound) == 1 and ws.allocations > 0 and ws.nbytes > 0
    allocated = ws.allocations
    x = _inputs(1)[0]
    first = plan.run([x], checked=True)
    second = plan.run([x], checked=True)
    # The first execution took the warmed workspace and allocated nothing in it.
    assert plan.workspaces.created == 1 and ws.allocations == allocated and len(ws.bound) == 1
    assert first[0].tobytes() == second[0].tobytes()
    cold = Plan(_bound_model())
    assert cold.run([x], checked=True)[0].tobytes() == first[0].tobytes()
    np.testing.assert_allclose(first[0], _reference(x), rtol=1e-4, atol=1e-4)


def test_a_warmed_plan_with_unbound_steps_equals_the_steps_called_one_by_one() -> None:
    plan, unbound = Plan(_model()), bindkit.unbound(Plan(_model()))
    assert plan.warm()
    ws = plan.workspaces.free[0]
    assert len(ws.bound) == 2  # both chunks bound at preparation
    for x in _inputs(2):
        for _ in range(2):
            got, want = plan.run([x], checked=True), unbound.run([x], checked=True)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()
    assert plan.workspaces.created == 1


def test_a_plan_without_fixed_shapes_is_not_warmed() -> None:
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (0, 4))  # the batch is given by each request
    y = bld.add_operand(T.TENSOR_FLOAT32, (0, 4))
    bld.add_operation(O.RELU, [x], [y])
    bld.mark_outputs([y])
    prepared = SampleAll().prepareModel(bld.build())
    assert not prepared.plan.warm()
    assert prepared.plan.workspaces.created == 0 and prepared.plan._straight is None


def _request(x: np.ndarray) -> tuple[Request, HostMemory]:
    out_bytes = int(np.prod(OUT)) * 4
    host = HostMemory(bytearray(x.nbytes + out_bytes))
    np.frombuffer(host.buffer, np.float32, x.size, 0)[:] = x.ravel()
    request = Request(
        (RequestArgument(False, DataLocation(0, 0, x.nbytes), ()),),
        (RequestArgument(False, DataLocation(0, x.nbytes, out_bytes), ()),),
        (host,),
    )
    return request, host


def _output(host: HostMemory, x: np.ndarray) -> np.ndarray:
    return np.frombuffer(host.buffer, np.float32, int(np.prod(OUT)), x.nbytes).reshape(OUT).copy()


def test_prepare_model_and_a_burst_leave_their_workspaces_ready() -> None:
    prepared = SampleAll().prepareModel(_bound_model())
    try:
        pool = prepared.plan.workspaces
        assert pool.created == 1 and len(pool) == 1 and len(pool.free[0].bound) == 1
        allocated = pool.free[0].allocations
        x = _inputs(1)[0]
        request, host = _request(x)
        prepared.executeSynchronously(request)
        first = _output(host, x)
        prepared.executeSynchronously(request)
        assert first.tobytes() == _output(host, x).tobytes()
        assert pool.created == 1 and pool.free[0].allocations == allocated
        burst = prepared.configureExecutionBurst(polling_us=0)
        assert burst.workspace is not None and len(burst.workspace.bound) == 1
        kept = burst.kept_bytes()
        assert kept > 0
        burst.execute(request)
        assert _output(host, x).tobytes() == first.tobytes() and burst.kept_bytes() == kept
        burst.close()
        np.testing.assert_allclose(first, _reference(x), rtol=1e-4, atol=1e-4)
    finally:
        prepared.close()
