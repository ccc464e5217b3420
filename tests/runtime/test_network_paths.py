"""Every execution path of a driver service over loopback TCP with TLS and a bearer token: the results are
the sample driver's, computed on inputs that travelled inside frames, as float64 NumPy says they must be."""

from __future__ import annotations

import os

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.fence import FenceState, SyncFence
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import BufferDesc, BufferRole, DataLocation, Request, RequestArgument
from mlts.runtime.remote import RemoteDevice
from tests.ipc.netkit import TOKEN, NetService, make_certs, token_file
from tests.runtime.models import add_model

SHAPE = (2, 3)
N = 4 * 6


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def service(certs, tmp_path):
    svc = NetService(
        SampleAll(),
        cert=certs.server_cert,
        key=certs.server_key,
        token_file=token_file(tmp_path, f"tests {TOKEN}"),
    )
    yield svc
    svc.close()


@pytest.fixture
def device(service, certs, tmp_path):
    dev = RemoteDevice.connect(
        service.url(ca=certs.ca, **{"token-file": token_file(tmp_path, TOKEN, "mine")})
    )
    yield dev
    dev.close()


def _args(pool: int, *offsets: int) -> tuple[RequestArgument, ...]:
    return tuple(RequestArgument(False, DataLocation(pool, o, N), SHAPE) for o in offsets)


def _put(pool: SharedMemory, offset: int, values: np.ndarray) -> None:
    np.frombuffer(pool.buffer, np.float32, 6, offset)[:] = values.ravel()


def _get(pool: SharedMemory, offset: int) -> np.ndarray:
    return np.frombuffer(pool.buffer, np.float32, 6, offset).reshape(SHAPE).astype(np.float64)


def test_the_hello_says_how_the_client_was_let_in(device):
    hello = device.connection.endpoint.hello
    assert hello["transport"] == "tcp+tls" and hello["tensors"] == "inline"
    assert hello["peer"].endswith("(token tests)")
    assert device.ping() > 0
    status = device.service_status()
    assert status["clients"] == 1


def test_sync_async_fenced_and_burst_over_tls(device):
    rng = np.random.default_rng(7)
    prepared = device.prepareModel(add_model())
    pool = SharedMemory.create(256)
    request = Request(_args(0, 0, 64), _args(0, 128), (pool,))
    for _ in range(3):  # new inputs each time: they travel with every call
        a, b = rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)
        _put(pool, 0, a), _put(pool, 64, b)
        want = a.astype(np.float32).astype(np.float64) + b.astype(np.float32).astype(np.float64)
        result = prepared.executeSynchronously(request, MeasureTiming.YES)
        assert result.output_shapes[0].dimensions == SHAPE
        np.testing.assert_allclose(_get(pool, 128), want, rtol=1e-6)
        _put(pool, 128, np.zeros(SHAPE))
        prepared.execute(request).result()
        np.testing.assert_allclose(_get(pool, 128), want, rtol=1e-6)
        _put(pool, 128, np.zeros(SHAPE))
        fence, callback = prepared.executeFenced(request, measure=MeasureTiming.YES)
        assert fence.wait(10) and fence.state() == FenceState.SIGNALED
        assert callback.getExecutionInfo().status == ErrorStatus.NONE
        np.testing.assert_allclose(_get(pool, 128), want, rtol=1e-6)
        _put(pool, 128, np.zeros(SHAPE))
        with prepared.configureExecutionBurst() as burst:
            for _ in range(2):
                burst.execute(request)
                np.testing.assert_allclose(_get(pool, 128), want, rtol=1e-6)
                _put(pool, 128, np.zeros(SHAPE))
    # Host memory crosses as a copy, and comes back.
    host = HostMemory(bytearray(256))
    np.frombuffer(host.buffer, np.float32, 6, 0)[:] = 1.5
    np.frombuffer(host.buffer, np.float32, 6, 64)[:] = 2.0
    prepared.executeSynchronously(Request(_args(0, 0, 64), _args(0, 128), (host,)))
    np.testing.assert_array_equal(np.frombuffer(host.buffer, np.float32, 6, 128), np.full(6, 3.5))
    prepared.close()


def test_a_fenced_chain_waits_on_the_clients_fence_and_feeds_the_next_link(device):
    prepared = device.prepareModel(add_model())
    pool = SharedMemory.create(256)
    a, b = np.arange(6.0).reshape(SHAPE), np.full(SHAPE, 10.0)
    _put(pool, 0, a), _put(pool, 64, b)
    gate = SyncFence.create()
    first = Request(_args(0, 0, 64), _args(0, 128), (pool,))
    # The second link adds b to what the first wrote: its input is the first's output, still being made.
    second = Request(_args(0, 128, 64), _args(0, 192), (pool,))
    fence1, cb1 = prepared.executeFenced(first, wait_for=(gate,))
    fence2, cb2 = prepared.executeFenced(second, wait_for=(fence1,))
    assert not fence1.wait(0.2), "the execution ran before the client's fence was signalled"
    gate.signal()
    assert fence2.wait(10)
    assert cb1.getExecutionInfo().status == ErrorStatus.NONE
    assert cb2.getExecutionInfo().status == ErrorStatus.NONE
    np.testing.assert_array_equal(_get(pool, 128), a + b)
    np.testing.assert_array_equal(_get(pool, 192), a + 2 * b)
    # A client fence signalled with error fails the execution that waits on it.
    bad = SyncFence.create()
    fence3, cb3 = prepared.executeFenced(first, wait_for=(bad,))
    bad.signal(ok=False)
    assert fence3.wait(10) and fence3.state() == FenceState.ERROR
    assert cb3.getExecutionInfo().status == ErrorStatus.GENERAL_FAILURE


def test_driver_buffers_and_burst_memories_over_tls(device):
    prepared = device.prepareModel(add_model())
    buffer = device.allocate(BufferDesc(SHAPE), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
    x = np.arange(6, dtype=np.float32) * 3
    buffer.copyFrom(x.tobytes())
    pool = SharedMemory.create(128)
    _put(pool, 0, np.ones(SHAPE))
    request = Request(
        (RequestArgument(False, DataLocation(1, 0, 0), SHAPE), *_args(0, 0)),
        _args(0, 64),
        (pool, buffer),
    )
    prepared.executeSynchronously(request)
    np.testing.assert_array_equal(_get(pool, 64), x.reshape(SHAPE) + 1)
    out = bytearray(N)
    buffer.copyTo(out)
    np.testing.assert_array_equal(np.frombuffer(out, np.float32), x)
    # A burst asks for memories it has not seen; two pools, inputs changed between executions.
    other = SharedMemory.create(64)
    with prepared.configureExecutionBurst() as burst:
        for k in range(3):
            _put(pool, 0, np.full(SHAPE, float(k)))
            _put(other, 0, np.full(SHAPE, 100.0))
            burst.execute(Request((*_args(0, 0), *_args(1, 0)), _args(0, 64), (pool, other)))
            np.testing.assert_array_equal(_get(pool, 64), np.full(SHAPE, 100.0 + k))
        assert burst.memories_sent == 2
    buffer.close()


def test_errors_travel_back_as_on_a_unix_socket(device):
    prepared = device.prepareModel(add_model())
    pool = SharedMemory.create(64)
    small = Request(_args(0, 0, 0), (RequestArgument(False, DataLocation(0, 32, 8), ()),), (pool,))
    with pytest.raises(HalError) as info:
        prepared.executeSynchronously(small)
    assert info.value.status in (ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, ErrorStatus.INVALID_ARGUMENT)
    with pytest.raises(HalError, match="unknown prepared model handle"):
        device.call(
            "executeSynchronously", {"prepared": 999, "request": {"inputs": [], "outputs": [], "pools": []}}
        )
    # The connection goes on.
    assert device.ping() > 0


def test_compilation_cache_files_travel_both_ways(device, tmp_path):
    needed = device.getNumberOfCacheFilesNeeded()
    if needed.num_model_cache + needed.num_data_cache == 0:
        pytest.skip("the driver keeps no compilation cache")
    token = bytes(range(32))
    paths = [tmp_path / f"cache{i}" for i in range(needed.num_model_cache + needed.num_data_cache)]
    fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in paths]
    try:
        models, data = fds[: needed.num_model_cache], fds[needed.num_model_cache :]
        device.prepareModel(add_model(), model_cache=models, data_cache=data, token=token).close()
        assert all(p.stat().st_size > 0 for p in paths), (
            "the driver's cache did not come back to this machine"
        )
        prepared = device.prepareModelFromCache(models, data, token)
        pool = SharedMemory.create(256)
        _put(pool, 0, np.ones(SHAPE)), _put(pool, 64, np.full(SHAPE, 2.0))
        prepared.executeSynchronously(Request(_args(0, 0, 64), _args(0, 128), (pool,)))
        np.testing.assert_array_equal(_get(pool, 128), np.full(SHAPE, 3.0))
    finally:
        for fd in fds:
            os.close(fd)


def test_bursts_released_without_an_execution_leave_nothing_behind(device):
    prepared = device.prepareModel(add_model())
    for _ in range(70):  # more than a connection's 64 burst streams: each one released ends its stream
        prepared.configureExecutionBurst().close()
    pool = SharedMemory.create(256)
    _put(pool, 0, np.ones(SHAPE)), _put(pool, 64, np.ones(SHAPE))
    with prepared.configureExecutionBurst() as burst:
        burst.execute(Request(_args(0, 0, 64), _args(0, 128), (pool,)))
    np.testing.assert_array_equal(_get(pool, 128), np.full(SHAPE, 2.0))
    assert device.service_status()["burst_listeners"] == 0


def test_deadlines_move_to_the_services_clock(service, certs, tmp_path, monkeypatch):
    import time

    from mlts.ipc.net import connect

    monkeypatch.setattr(connect, "boot_id", lambda: "another machine")  # as if the clocks were not shared
    url = service.url(ca=certs.ca, **{"token-file": token_file(tmp_path, TOKEN, "clock")})
    with RemoteDevice.connect(url) as dev:
        assert abs(dev.connection.endpoint.bridge.offset_ns) < 50_000_000  # the same clock, measured
        prepared = dev.prepareModel(add_model())
        pool = SharedMemory.create(256)
        request = Request(_args(0, 0, 64), _args(0, 128), (pool,))
        for _ in range(2):  # the second call travels compact: its deadline is in its bytes
            prepared.executeSynchronously(request, deadline=time.monotonic_ns() + 10**10)
            with pytest.raises(HalError) as info:
                prepared.executeSynchronously(request, deadline=time.monotonic_ns() - 10**9)
            assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
