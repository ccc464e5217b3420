"""Driver buffers bound once: in-place reads and writes, reuse while unchanged, fresh binding when not."""

from __future__ import annotations

import numpy as np
import pytest

import driver.device as sample_device
from driver.buffers import BufferTracker
from driver.request_io import MAX_PINNED_LAYOUTS, PINNED, RequestIo
from driver.variants import SampleAll
from mlts.hal.buffer_use import bind_buffers, bound_state, buffer_state
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import BufferDesc, BufferRole, DataLocation, Request, RequestArgument
from mlts.runtime.discovery import discover
from mlts.runtime.execution import EXECUTION_MODES, Executor, execute
from mlts.runtime.session import Session
from mlts.runtime.shared import SharedService
from tests.runtime.models import add_model

F = np.float32


def _step_request(state: int, nxt: int, pool: SharedMemory) -> Request:
    """nxt = state + pool[0:6] (ADD): input 0 and the output are driver buffers."""
    token_arg = RequestArgument(False, DataLocation(1, 0, 0), ())
    return Request(
        (token_arg, RequestArgument(False, DataLocation(0, 0, 24), (2, 3))),
        (RequestArgument(False, DataLocation(2, 0, 0), ()),),
        (pool, state, nxt),
    )


def _pool(value: np.ndarray) -> SharedMemory:
    pool = SharedMemory.create(64)
    np.frombuffer(pool.buffer, F, 6)[:] = value.ravel()
    return pool


def _pair(device, prepared, dims=()):
    return [
        device.allocate(BufferDesc(dims), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        for _ in range(2)
    ]


@pytest.fixture
def counted(monkeypatch):
    """How many requests the sample driver validated (a cached layout is not validated again)."""
    calls = []
    real = sample_device.validate.validate_request

    def counting(request, model):
        calls.append(request)
        return real(request, model)

    monkeypatch.setattr(sample_device.validate, "validate_request", counting)
    return calls


def test_alternating_buffers_are_bound_once_and_written_in_place(counted):
    device = SampleAll()
    prepared = device.prepareModel(add_model())
    a, b = _pair(device, prepared)
    x = np.arange(6, dtype=F).reshape(2, 3)
    a.copyFrom(memoryview(x.tobytes()), (2, 3))
    pool = _pool(np.full(6, 0.5, F))
    forward, back = _step_request(a.token, b.token, pool), _step_request(b.token, a.token, pool)
    # The arrays the buffers hold: an execution writes into them in place, so these views see it.
    view_a, view_b = a.read(np.dtype(F), (2, 3)), b.destination(np.dtype(F))[0]
    for step in range(8):
        prepared.executeSynchronously(forward if step % 2 == 0 else back)
    np.testing.assert_array_equal(view_a, x + 8 * 0.5)
    np.testing.assert_array_equal(view_b, x + 7 * 0.5)
    out = bytearray(24)
    a.copyTo(memoryview(out))
    np.testing.assert_array_equal(np.frombuffer(out, F).reshape(2, 3), x + 4)
    # Bound and validated: each request once, and once more after b's first write initialised it.
    assert len(counted) == 3
    prepared.close()
    pool.close()


def test_a_changed_buffer_is_bound_again():
    device = SampleAll()
    prepared = device.prepareModel(add_model())
    a, b = _pair(device, prepared)
    pool = _pool(np.ones(6, F))
    request = _step_request(a.token, b.token, pool)
    # Uninitialised input: refused on the first use and on every later one.
    for _ in range(2):
        with pytest.raises(HalError) as e:
            prepared.executeSynchronously(request)
        assert e.value.status == ErrorStatus.GENERAL_FAILURE
    a.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))
    prepared.executeSynchronously(request)
    prepared.executeSynchronously(request)
    # Freed between two executions of the same request object: the cached layout is not used.
    b.close()
    with pytest.raises(HalError) as e:
        prepared.executeSynchronously(request)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert "names no live buffer" in e.value.message
    a.close()
    with pytest.raises(HalError):
        prepared.executeSynchronously(request)
    prepared.close()
    pool.close()


def test_a_layout_whose_buffers_changed_while_it_was_validated_is_not_kept(monkeypatch):
    # out = a + s: `a` a driver buffer of any shape, `s` [1] from a pool.
    device = SampleAll()
    prepared = device.prepareModel(add_model(dims=(0, 0), dims_b=(1,), out_dims=(0, 0)))
    a, b = _pair(device, prepared)
    a.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))
    b.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))  # the first execution's write changes nothing
    pool = _pool(np.ones(6, F))
    token_arg = RequestArgument(False, DataLocation(1, 0, 0), ())
    request = Request(
        (token_arg, RequestArgument(False, DataLocation(0, 0, 4), (1,))),
        (RequestArgument(False, DataLocation(2, 0, 0), ()),),
        (pool, a.token, b.token),
    )
    real = sample_device.validate.validate_request
    validated = []

    def racing(req, model):
        real(req, model)
        validated.append(req)
        if len(validated) == 1:  # another client's copy gives `a` other dimensions meanwhile
            a.copyFrom(memoryview(np.full(6, 2, F).tobytes()), (3, 2))

    monkeypatch.setattr(sample_device.validate, "validate_request", racing)
    prepared.executeSynchronously(request)
    # That layout was not kept: the next execution binds `a` as it is now, 3 x 2.
    result = prepared.executeSynchronously(request)
    assert len(validated) == 2
    assert tuple(result.output_shapes[0].dimensions) == (3, 2) and b.dimensions == (3, 2)
    out = bytearray(24)
    b.copyTo(memoryview(out))
    np.testing.assert_array_equal(np.frombuffer(out, F), np.full(6, 3, F))
    prepared.close()
    pool.close()


def test_an_unsized_buffer_is_sized_by_its_first_write_then_written_in_place():
    device = SampleAll()
    model = add_model((0, 3), out_dims=(0, 3))
    prepared = device.prepareModel(model)
    a, b = _pair(device, prepared)
    assert b.destination(np.dtype(F)) is None  # no size yet: nowhere to write in place
    a.copyFrom(memoryview(np.arange(6, dtype=F).tobytes()), (2, 3))
    pool = _pool(np.ones(6, F))
    forward, back = _step_request(a.token, b.token, pool), _step_request(b.token, a.token, pool)
    prepared.executeSynchronously(forward)
    assert b.dimensions == (2, 3) and b.initialized
    stamp = b.stamp
    dest = b.destination(np.dtype(F))[0]
    prepared.executeSynchronously(back)
    prepared.executeSynchronously(forward)
    assert b.stamp == stamp  # same size: the same array, written in place
    np.testing.assert_array_equal(dest, np.arange(6, dtype=F).reshape(2, 3) + 3)
    prepared.close()
    pool.close()


def test_request_io_reads_driver_buffers_without_a_copy():
    device = SampleAll()
    prepared = device.prepareModel(add_model())
    a, b = _pair(device, prepared)
    a.copyFrom(memoryview(np.arange(6, dtype=F).tobytes()), (2, 3))
    pool = _pool(np.ones(6, F))
    request = _step_request(a.token, b.token, pool)
    tracker: BufferTracker = device.buffers
    bound = bind_buffers(request, prepared, tracker.lookup)
    io = RequestIo(prepared.model, bound, tracker, request)
    assert io.cacheable and io.key is request and io.fresh()
    first, second = io.read_inputs(tracker)
    assert np.shares_memory(first, a.read(np.dtype(F), (2, 3)))
    assert not first.flags.writeable
    np.testing.assert_array_equal(second, np.ones((2, 3), F))
    a.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))  # in place, same dimensions: still fresh
    assert io.fresh()
    np.testing.assert_array_equal(io.read_inputs(tracker)[0], np.zeros((2, 3), F))
    b.close()
    assert not io.fresh()
    # Without a tracker a request naming buffers is not bound, and never cached.
    assert not RequestIo(prepared.model, bound).cacheable
    prepared.close()
    pool.close()


def test_a_buffer_change_moves_the_device_epoch_and_layouts_compare_stamps_only_then():
    device = SampleAll()
    prepared = device.prepareModel(add_model())
    tracker: BufferTracker = device.buffers
    a, b = _pair(device, prepared)
    start = tracker.epoch
    a.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))  # initialised: a change
    assert tracker.epoch != start
    settled = tracker.epoch
    a.copyFrom(memoryview(np.ones(6, F).tobytes()), (2, 3))  # the same size and dimensions: none
    assert tracker.epoch == settled
    pool = _pool(np.ones(6, F))
    request = _step_request(a.token, b.token, pool)
    io = RequestIo(prepared.model, bind_buffers(request, prepared, tracker.lookup), tracker, request)
    assert io.epoch == tracker.epoch and io.fresh()
    # Another buffer changes: the epoch moves on; this layout's own buffers did not change, so it is
    # fresh, and it compares one number again from now on.
    other = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
    other.copyFrom(memoryview(np.ones(6, F).tobytes()), (2, 3))
    assert tracker.epoch != io.epoch
    assert io.fresh() and io.epoch == tracker.epoch
    other.close()
    assert io.fresh()
    # Its own output buffer written for the first time, then freed: stale both times.
    prepared.executeSynchronously(request)
    assert b.initialized and not io.fresh()
    io = RequestIo(prepared.model, bind_buffers(request, prepared, tracker.lookup), tracker, request)
    assert io.fresh()
    b.close()
    assert not io.fresh()
    a.close()
    prepared.close()
    pool.close()


def test_driver_buffer_inputs_are_pinned_in_the_workspace_that_runs_them():
    device = SampleAll()
    prepared = device.prepareModel(add_model())
    tracker: BufferTracker = device.buffers
    a, b = _pair(device, prepared)
    x = np.arange(6, dtype=F).reshape(2, 3)
    a.copyFrom(memoryview(x.tobytes()), (2, 3))
    pool = _pool(np.ones(6, F))
    forward, back = _step_request(a.token, b.token, pool), _step_request(b.token, a.token, pool)
    burst = prepared.configureExecutionBurst()
    for step in range(4):
        burst.execute(forward if step % 2 == 0 else back)
    ws = burst.workspace
    # Each layout's driver-buffer input (the view it reads in place) has its address in the workspace,
    # which kernels look up before asking NumPy; the pool's input (a new view every time) has not.
    # (Three layouts ran: the forward one was bound again after b's first write changed b.)
    layouts = list(burst.io.entries.values())
    assert len(layouts) == 2 and set(layouts) < set(ws.bound[PINNED]) and len(ws.bound[PINNED]) == 3
    for io in layouts:
        view, from_pool = io.read_inputs(tracker)
        assert ws.addresses[id(view)] == (view, view.ctypes.data)
        assert id(from_pool) not in ws.addresses
    np.testing.assert_array_equal(a.read(np.dtype(F), (2, 3)), x + 4)
    # Many layouts: the workspace keeps the views of the last MAX_PINNED_LAYOUTS only.
    requests = [_step_request(a.token, b.token, pool) for _ in range(MAX_PINNED_LAYOUTS + 4)]
    for request in requests:
        burst.execute(request)
    pinned = ws.bound[PINNED]
    assert len(pinned) == MAX_PINNED_LAYOUTS
    kept = {id(v) for views in pinned.values() for v in views}
    for io in layouts:  # the oldest: gone from the workspace
        assert id(io.read_inputs(tracker)[0]) not in kept
    ours = {k for k, (arr, _) in ws.addresses.items() if not ws.owns(arr)}
    assert ours == kept
    burst.close()
    for buf in (a, b):
        buf.close()
    prepared.close()
    pool.close()


def test_bound_state_tells_what_binding_depends_on():
    device = SampleAll()
    prepared = device.prepareModel(add_model((0, 3), out_dims=(0, 3)))
    a, b = _pair(device, prepared)
    pool = _pool(np.ones(6, F))
    buffers = {a.token: a, b.token: b}
    ident, state = bound_state([pool, a.token, b.token], buffers.__getitem__)
    assert ident == [pool, None, None] and state == buffer_state([a, b])
    assert bound_state([pool], buffers.__getitem__) == ([pool], ())
    a.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))  # initialised, dimensions set
    assert bound_state([pool, a.token, b.token], buffers.__getitem__)[1] != state
    prepared.close()
    pool.close()


class _Recorder:
    """A prepared model that remembers the request objects it was given."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seen: list[int] = []

    def executeSynchronously(self, request, *args):
        self.seen.append(id(request))
        return self.inner.executeSynchronously(request, *args)

    def close(self) -> None:
        self.inner.close()


def test_a_session_sends_one_request_object_per_token_set():
    device = SampleAll()
    model = add_model()
    with Session(device, model, mode="sync") as session:
        a, b = _pair(device, session.prepared)
        a.copyFrom(memoryview(np.zeros(6, F).tobytes()), (2, 3))
        recorder = _Recorder(session.prepared)
        session.prepared = recorder
        # The seam bound to the recorder instead (what a Session runs through).
        session.executor = Executor(recorder, session.mode, session.measure, session.loop_timeout_ns)
        ones = np.ones((2, 3), F)
        placeholder = np.zeros((2, 3), F)
        current, nxt = a, b
        for step in range(6):
            outs, _ = session.run(
                [placeholder, ones * (step + 1)], in_tokens={0: current.token}, out_tokens={0: nxt.token}
            )
            assert outs == [None]
            current, nxt = nxt, current
        assert len(set(recorder.seen)) == 2
        assert recorder.seen[0::2] == [recorder.seen[0]] * 3
        out = bytearray(24)
        current.copyTo(memoryview(out))
        np.testing.assert_array_equal(np.frombuffer(out, F), np.full(6, 21, F))  # 1 + 2 + ... + 6
        # A plain run in between and the token runs go on with the same objects.
        plain, _ = session.run([ones, ones])
        np.testing.assert_array_equal(plain[0], ones * 2)
        session.run([placeholder, ones], in_tokens={0: current.token}, out_tokens={0: nxt.token})
        assert recorder.seen[-1] == recorder.seen[0]
        a.close()
        b.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("mdb") / "svc.log"
    svc = SharedService.start(discover()["sample-all"].factory, name="sample-all", log_path=str(log))
    yield svc
    assert svc.stop() == 0


@pytest.mark.parametrize("mode", EXECUTION_MODES)
def test_through_the_service_reused_requests_see_every_buffer_change(service, mode):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        a, b = _pair(dev, prepared)
        x = np.arange(6, dtype=F).reshape(2, 3)
        a.copyFrom(x.tobytes(), (2, 3))
        pool = _pool(np.ones(6, F))
        forward, back = _step_request(a.token, b.token, pool), _step_request(b.token, a.token, pool)
        for step in range(6):
            execute(prepared, forward if step % 2 == 0 else back, mode=mode)
        out = bytearray(24)
        a.copyTo(memoryview(out))
        np.testing.assert_array_equal(np.frombuffer(out, F).reshape(2, 3), x + 6)
        # A copy between executions of the same request objects is what the next one reads.
        a.copyFrom(np.zeros(6, F).tobytes(), (2, 3))
        execute(prepared, forward, mode=mode)
        b.copyTo(memoryview(out))
        np.testing.assert_array_equal(np.frombuffer(out, F), np.ones(6, F))
        # Checked once: the service bound each direction's first run, and the forward run once more
        # after b's first write initialised it; it reused the other four (every path, bursts too: one
        # request cache per prepared model).
        hits = dev.service_status()["you"]["request_cache_hits"]
        assert hits == 4
        # Another buffer of the client allocated and released: each request is looked up and bound
        # once more, then reused again.
        other = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
        other.close()
        for step in range(4):
            execute(prepared, back if step % 2 == 0 else forward, mode=mode)
        b.copyTo(memoryview(out))
        np.testing.assert_array_equal(np.frombuffer(out, F), np.full(6, 5, F))
        assert dev.service_status()["you"]["request_cache_hits"] == hits + 2
        # A released buffer, as an output or as an input: the reused request is refused, by the
        # service (its message), on every path.
        b.close()
        for request in (_step_request(a.token, b.token, pool), back):
            with pytest.raises(HalError) as e:
                execute(prepared, request, mode=mode)
            assert e.value.status == ErrorStatus.INVALID_ARGUMENT
            assert f"buffer token {b.token} is not a live buffer of this client" in e.value.message
        c = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        execute(prepared, _step_request(a.token, c.token, pool), mode=mode)
        c.copyTo(memoryview(out))
        np.testing.assert_array_equal(np.frombuffer(out, F), np.full(6, 5, F))  # a (4) + 1
        for buf in (a, c):
            buf.close()
        prepared.close()
        pool.close()
