"""Driver-owned bursts: the service calls the prepared model's configureExecutionBurst for each burst
a client creates, runs the burst's executions through the burst object the driver returned, tells it
of freed slots and closes it when the burst or its client goes; the sample driver's burst keeps a
workspace and request layouts of its own; sample-faulty's burst_error proves the hook is used."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from driver import native
from driver.burst import SampleBurst
from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.runtime.execution import execute
from mlts.runtime.process import DriverProcess
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.shared import SharedService
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request

PROBE = f"{Path(__file__).with_name('burst_probe_driver.py')}:BurstProbe"
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _mark(pool) -> float:
    """What the driver added to the first output element."""
    return float(_out(pool)[0, 0] - 2 * X[0, 0])


def test_the_service_hands_each_burst_its_freed_slots_and_its_end_to_the_driver(tmp_path) -> None:
    with SharedService.start(PROBE, name="fake-burst-probe", log_path=str(tmp_path / "s.log")) as service:
        device = service.connect()
        prepared = device.prepareModel(add_model())
        pool, other = _pool(X, X), _pool(X, X)
        prepared.executeSynchronously(_request(pool))
        assert _mark(pool) == 0  # a plain execution, no burst closed yet
        with prepared.configureExecutionBurst(polling_us=0) as burst:
            burst.execute(_request(pool))
            assert _mark(pool) == 1000  # through the driver's burst number 1
            burst.freeMemory(pool)  # the service forgets the slot and tells the driver
            burst.execute(_request(other))
            assert _mark(other) == 1010
            second = prepared.configureExecutionBurst(polling_us=0)
            second.execute(_request(pool))
            assert _mark(pool) == 2000
        prepared.executeSynchronously(_request(pool))
        assert _mark(pool) == 100  # the first burst's end reached the driver
        device.close()  # with the second burst still open: the client's end closes it
        again = service.connect()
        try:
            prepared = again.prepareModel(add_model())
            prepared.executeSynchronously(_request(pool))
            assert _mark(pool) == 200
        finally:
            again.close()
            pool.close()
            other.close()


def test_sample_faulty_burst_error_fails_only_what_comes_through_the_drivers_burst(tmp_path) -> None:
    process = DriverProcess.start(
        "driver.faulty:SampleFaulty",
        options={"burst_error": "GENERAL_FAILURE"},
        log_path=str(tmp_path / "s.log"),
    )
    pool = _pool(X, X)
    try:
        with RemoteDevice(process) as device:
            prepared = device.prepareModel(add_model())
            for mode in ("sync", "async", "fenced"):
                execute(prepared, _request(pool), mode=mode)
            with pytest.raises(HalError) as info:
                execute(prepared, _request(pool), mode="burst")
            assert info.value.status == ErrorStatus.GENERAL_FAILURE
            assert "through the driver's burst" in info.value.message
    finally:
        pool.close()


def _host_request():
    host = HostMemory(bytearray(256))
    np.frombuffer(host.buffer, np.float32, 6, 0)[:] = X.ravel()
    np.frombuffer(host.buffer, np.float32, 6, 64)[:] = X.ravel()
    return _request(host), host


def test_the_sample_burst_keeps_its_own_workspace_and_layouts() -> None:
    prepared = SampleAll().prepareModel(add_model())
    request, host = _host_request()
    burst = prepared.configureExecutionBurst(polling_us=0)
    assert isinstance(burst, SampleBurst) and set(prepared.bursts) == {burst}
    for _ in range(3):
        burst.execute(request)
        np.testing.assert_array_equal(_out(host), 2 * X)
    assert prepared.plan.workspaces.created == 0  # the model's pool of workspaces was never used
    assert len(burst.io) == 1 and len(prepared._io) == 0  # its layout, not the model's
    assert burst.kept_bytes() > 0 and burst.executions == 3
    prepared.executeSynchronously(request)  # a plain execution uses the model's own
    assert prepared.plan.workspaces.created == 1 and len(prepared._io) == 1
    burst.freeMemory(host)
    assert len(burst.io) == 0
    burst.execute(request)
    assert burst.kept_bytes() > 0 and len(burst.io) == 1
    with burst._busy:  # in use: an idle watchdog's call leaves it alone
        assert not burst.release_kept()
    assert burst.release_kept() and burst.kept_bytes() == 0 and len(burst.io) == 0
    burst.execute(request)  # made again
    np.testing.assert_array_equal(_out(host), 2 * X)
    burst.close()
    assert burst.workspace is None and not prepared.bursts
    with pytest.raises(HalError, match="burst was released"):
        burst.execute(request)
    kept = prepared.configureExecutionBurst()
    prepared.close()  # the model's end closes its bursts
    assert kept.closed
    with pytest.raises(HalError, match="released"):
        prepared.configureExecutionBurst()


def test_a_busy_sample_burst_runs_a_second_execution_as_a_plain_one() -> None:
    prepared = SampleAll().prepareModel(add_model())
    request, host = _host_request()
    burst = prepared.configureExecutionBurst()
    with burst._busy:  # one of its executions is running
        result = burst.execute(request)
    assert result.output_shapes[0].dimensions == (2, 3) and prepared.plan.workspaces.created == 1
    np.testing.assert_array_equal(_out(host), 2 * X)
    done = []
    threads = [threading.Thread(target=lambda: done.append(burst.execute(request))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(done) == 4
    np.testing.assert_array_equal(_out(host), 2 * X)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_idle_watchdog_lets_an_idle_bursts_resources_go() -> None:
    device = SampleAll(idle_release_ms="50")
    assert device.idle is not None
    device.idle.close()  # this test drives the watchdog itself, on a fake clock
    clock = _Clock()
    device.idle.clock = clock
    prepared = device.prepareModel(add_model())
    request, host = _host_request()
    burst = prepared.configureExecutionBurst()
    burst.execute(request)  # an execution of the model: the watchdog's clock starts again
    assert burst.kept_bytes() > 0 and len(burst.io) == 1
    clock.now += 0.06
    assert device.idle.sweep() == 1
    assert burst.kept_bytes() == 0 and len(burst.io) == 0 and not burst.closed  # let go, still usable
    burst.execute(request)
    np.testing.assert_array_equal(_out(host), 2 * X)
    assert burst.kept_bytes() > 0
    burst.close()
    prepared.close()
    device.close()


@pytest.mark.skipif(not native.available(), reason=f"compiled kernels: {native.WHY_NOT}")
def test_a_burst_execution_sends_the_kernels_idle_workers_to_sleep() -> None:
    """After each execution of the sample driver's burst the kernels' idle workers sleep at once
    (`native.rest()`) instead of spinning on a core while the result goes back: with a 10 s spin
    window, a worker spinning after a split job uses no CPU once a burst execution has ended."""
    import time

    from driver.ops import _fast

    a, bias = np.ones((196, 256), np.float32), np.zeros(256, np.float32)
    w = _fast.GemmWeights(np.ones((256, 256), np.float32))
    out = np.empty((196, 256), np.float32)
    prepared = SampleAll().prepareModel(add_model())
    pool = _pool(X, X)
    threads, spin = native.threads(), native.spin()
    backoffs = native.pool_backoffs()
    time.sleep(0.11)  # past a back-off an earlier stall may have started (100 ms)
    native.set_threads(2)
    native.set_spin(10_000_000)
    try:
        with prepared.configureExecutionBurst(polling_us=0) as burst:
            burst.execute(_request(pool))
            native.LIB.mk_gemm_packed_bias_act_f32(
                a.ctypes.data, w.panels_ptr, out.ctypes.data, 196, 256, 256, bias.ctypes.data, -1.0, 1.0
            )  # a job the workers take part in; they spin after it
            rests = native.pool_stats()["rests"]
            burst.execute(_request(pool))
            # (a worker that stalled the job turns splitting off: no job, nothing to rest after)
            assert native.pool_stats()["rests"] == rests + 1 or native.pool_backoffs() > backoffs
            np.testing.assert_array_equal(_out(pool), 2 * X)
            time.sleep(0.01)
            cpu = time.process_time()
            time.sleep(0.3)
            assert time.process_time() - cpu < 0.05
    finally:
        native.set_spin(spin)
        native.set_threads(threads)
