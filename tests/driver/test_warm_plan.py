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
from tests.driver.bindkit import _conv, _depthwise, _inputs, _model

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")

OUT = (1, 3, 3, 8)


def _bound_model():
    """x [1,12,12,3] -> conv 3x3/2 -> depthwise -> depthwise/2 -> conv 1x1: every step bindable,
    one chunk."""
    rng = np.random.default_rng(11)
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (1, 12, 12, 3))
    c1 = _conv(bld, rng, x, 3, 8, 3, 2, 1, 3, (6, 6))
    d1 = _depthwise(bld, rng, c1, 8, 1, 1, 1, (6, 6))
    d2 = _depthwise(bld, rng, d1, 8, 1, 2, 0, (3, 3))
    y = _conv(bld, rng, d2, 8, 8, 1, 1, 2, 0, (3, 3))
    bld.mark_outputs([y])
    return bld.build()


def _reference(x: np.ndarray) -> np.ndarray:
    """The same model with float64 NumPy, from the operations' definitions (NHWC, NNAPI padding)."""
    rng = np.random.default_rng(11)

    def conv(a, cin, cout, k, stride, pad_same, act):
        w = rng.standard_normal((cout, k, k, cin)).astype(np.float32).astype(np.float64)
        b = rng.standard_normal(cout).astype(np.float32).astype(np.float64)
        return _window(a, w.transpose(1, 2, 3, 0), b, k, stride, pad_same, act, depthwise=False)

    def depthwise(a, cin, stride, act):
        w = rng.standard_normal((1, 3, 3, cin)).astype(np.float32).astype(np.float64)
        b = rng.standard_normal(cin).astype(np.float32).astype(np.float64)
        return _window(a, w[0], b, 3, stride, True, act, depthwise=True)

    a = x.astype(np.float64)
    a = conv(a, 3, 8, 3, 2, True, 3)
    a = depthwise(a, 8, 1, 1)
    a = depthwise(a, 8, 2, 0)
    return conv(a, 8, 8, 1, 1, False, 0)


def _window(a, w, b, k, stride, same, act, depthwise):
    n, h, wd, c = a.shape
    if same:
        out_h, out_w = -(-h // stride), -(-wd // stride)
        ph = max((out_h - 1) * stride + k - h, 0)
        pw = max((out_w - 1) * stride + k - wd, 0)
        a = np.pad(a, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        out_h, out_w = (h - k) // stride + 1, (wd - k) // stride + 1
    cout = c if depthwise else w.shape[3]
    y = np.zeros((n, out_h, out_w, cout))
    for i in range(out_h):
        for j in range(out_w):
            patch = a[:, i * stride : i * stride + k, j * stride : j * stride + k, :]
            if depthwise:
                y[:, i, j, :] = np.einsum("nhwc,hwc->nc", patch, w)
            else:
                y[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, w)
    y += b
    lo, hi = {0: (-np.inf, np.inf), 1: (0, np.inf), 2: (-1, 1), 3: (0, 6)}[act]
    return np.clip(y, lo, hi)


def test_warm_allocates_and_binds_what_the_first_execution_would() -> None:
    plan = Plan(_bound_model())
    assert plan.warm()
    assert plan.workspaces.created == 1 and len(plan.workspaces) == 1
    ws = plan.workspaces._free[0]
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
    ws = plan.workspaces._free[0]
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
        assert pool.created == 1 and len(pool) == 1 and len(pool._free[0].bound) == 1
        allocated = pool._free[0].allocations
        x = _inputs(1)[0]
        request, host = _request(x)
        prepared.executeSynchronously(request)
        first = _output(host, x)
        prepared.executeSynchronously(request)
        assert first.tobytes() == _output(host, x).tobytes()
        assert pool.created == 1 and pool._free[0].allocations == allocated
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
