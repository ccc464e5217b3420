"""RemoteDevice over a real driver process: round trips, errors, crashes, hangs and start failures."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from mlts.hal.enums import DeviceType, ErrorStatus, MeasureTiming, OperandType
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import CacheFilesNeeded, DataLocation, Model, Request, RequestArgument, Subgraph
from mlts.runtime.process import DEFAULT_START_TIMEOUT, DriverProcess, describe_returncode
from mlts.runtime.remote import DEFAULT_EXECUTE_TIMEOUT, RemoteDevice
from tests.runtime.conftest import fake_spec
from tests.runtime.fake_drivers import AddDevice
from tests.runtime.models import add_model


def _assert_reaped(pid: int) -> None:
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _add_request(pool, a: np.ndarray, b: np.ndarray, out_len: int | None = None) -> Request:
    n = a.nbytes
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, n), a.shape),
            RequestArgument(False, DataLocation(0, 64, n), b.shape),
        ),
        (RequestArgument(False, DataLocation(0, 128, n if out_len is None else out_len), ()),),
        (pool,),
    )


def test_queries_round_trip(add_device):
    local = AddDevice()
    assert add_device.process.hello["device"] == "fake-add"
    assert add_device.process.hello["protocol"] == [1, 6]
    assert add_device.getCapabilities() == local.getCapabilities()
    assert add_device.getType() == DeviceType.ACCELERATOR
    assert add_device.getVersionString() == "fake-1.0"
    assert add_device.getSupportedExtensions() == ()
    assert add_device.getNumberOfCacheFilesNeeded() == CacheFilesNeeded(0, 0)
    assert add_device.getSupportedOperations(add_model()) == (True,)
    assert add_device.ping() < 1.0


def test_factory_options_reach_the_driver(tmp_path):
    with RemoteDevice.start(
        fake_spec("AddDevice"), options={"version": "v9"}, log_path=str(tmp_path / "l")
    ) as dev:
        assert dev.getVersionString() == "v9"


def test_prepare_and_execute_exact(add_device):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    prepared = add_device.prepareModel(add_model())
    pool = SharedMemory.create(256)
    try:
        for scale in (1.0, -3.5):  # the second run reuses the cached pool mapping
            np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = (a * scale).ravel()
            np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = b.ravel()
            result = prepared.executeSynchronously(_add_request(pool, a, b), MeasureTiming.YES)
            out = np.frombuffer(pool.buffer, np.float32, 6, 128).reshape(2, 3).copy()
            np.testing.assert_array_equal(out, a * scale + b)
            assert result.output_shapes[0].dimensions == (2, 3)
            assert (result.timing.time_on_device, result.timing.time_in_driver) == (1, 2)
        assert len(add_device._memories) == 1
        add_device.freeMemory([pool])
        assert not add_device._memories
    finally:
        prepared.close()
        pool.close()


def test_host_memory_is_copied_transparently(add_device):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = bytearray(256)
    np.frombuffer(buf, np.float32, 6, 0)[:] = a.ravel()
    np.frombuffer(buf, np.float32, 6, 64)[:] = a.ravel()
    prepared = add_device.prepareModel(add_model())
    prepared.executeSynchronously(_add_request(HostMemory(buf), a, a))
    np.testing.assert_array_equal(np.frombuffer(buf, np.float32, 6, 128), (2 * a).ravel())
    prepared.close()
    prepared.close()  # idempotent


def test_hal_error_travels_back_with_output_shapes(add_device):
    a = np.ones((2, 3), np.float32)
    prepared = add_device.prepareModel(add_model())
    pool = SharedMemory.create(256)
    with pytest.raises(HalError) as info:
        prepared.executeSynchronously(_add_request(pool, a, a, out_len=8))
    assert info.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert info.value.message == "output 0 needs 24 bytes, has 8"
    assert info.value.output_shapes[0].dimensions == (2, 3) and not info.value.output_shapes[0].is_sufficient
    with pytest.raises(HalError, match="INVALID_ARGUMENT: fake-add prepares only"):
        add_device.prepareModel(add_model(type=OperandType.TENSOR_INT32))
    assert add_device.getSupportedOperations(add_model(type=OperandType.TENSOR_INT32)) == (False,)
    # The service validates every model before the driver sees it.
    empty = Model(Subgraph((), (), (), ()))
    with pytest.raises(HalError, match="INVALID_ARGUMENT: main subgraph: no outputs"):
        add_device.prepareModel(empty)
    assert add_device.ping() >= 0  # still serving
    pool.close()


def test_driver_bug_becomes_general_failure_and_service_survives(tmp_path):
    with RemoteDevice.start(fake_spec("BuggyDevice"), name="fake-buggy", log_path=str(tmp_path / "l")) as dev:
        prepared = dev.prepareModel(add_model())
        pool = SharedMemory.create(256)
        with pytest.raises(HalError) as info:
            prepared.executeSynchronously(
                _add_request(pool, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
            )
        assert info.value.status == ErrorStatus.GENERAL_FAILURE
        assert "ZeroDivisionError: fake driver bug" in info.value.message
        assert dev.getVersionString() == "fake-1.0"
        pool.close()


def test_killed_driver_is_device_unavailable(tmp_path):
    dev = RemoteDevice.start(fake_spec("KillingDevice"), name="sample-all", log_path=str(tmp_path / "l"))
    pid = dev.process.pid
    prepared = dev.prepareModel(add_model())
    pool = SharedMemory.create(256)
    a = np.ones((2, 3), np.float32)
    t0 = time.monotonic()
    with pytest.raises(HalError) as info:
        prepared.executeSynchronously(_add_request(pool, a, a))
    # The death is noticed, not waited out: well inside the 60 s execution timeout, however busy the machine.
    assert time.monotonic() - t0 < DEFAULT_EXECUTE_TIMEOUT / 2
    assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
    expected = "driver 'sample-all' died: killed by signal 9 (SIGKILL) during executeSynchronously"
    assert info.value.message == expected
    _assert_reaped(pid)
    assert dev.process.returncode == -signal.SIGKILL
    for call in (dev.getCapabilities, lambda: prepared.executeSynchronously(_add_request(pool, a, a))):
        t0 = time.monotonic()
        with pytest.raises(HalError) as later:
            call()
        assert time.monotonic() - t0 < DEFAULT_EXECUTE_TIMEOUT / 2  # answered at once, no timeout waited
        assert (later.value.status, later.value.message) == (ErrorStatus.DEVICE_UNAVAILABLE, expected)
    prepared.close()  # ignored when dead
    dev.close()
    pool.close()


def test_hanging_driver_times_out_and_is_killed(tmp_path):
    dev = RemoteDevice.start(fake_spec("HangingDevice"), name="fake-hang", log_path=str(tmp_path / "l"))
    pid = dev.process.pid
    prepared = dev.prepareModel(add_model())
    pool = SharedMemory.create(256)
    a = np.ones((2, 3), np.float32)
    t0 = time.monotonic()
    with pytest.raises(HalError) as info:
        prepared.executeSynchronously(_add_request(pool, a, a), timeout=0.5)
    assert 0.5 <= time.monotonic() - t0 < 30.0  # at its timeout, then stopped (not hung)
    assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
    assert (
        info.value.message
        == "driver 'fake-hang': no reply within 0.5 s to executeSynchronously; driver stopped"
    )
    _assert_reaped(pid)
    assert dev.process.describe_exit() == "killed by signal 9 (SIGKILL)"
    with pytest.raises(HalError, match="no reply within 0.5 s"):
        dev.ping()
    dev.close()
    pool.close()


def test_constructor_failure_reports_the_log_tail(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(HalError) as info:
        DriverProcess.start(
            fake_spec("BrokenDevice"), name="fake-broken", log_path=str(tmp_path / "broken.log")
        )
    assert time.monotonic() - t0 < DEFAULT_START_TIMEOUT * 0.8  # its exit noticed, not the 30 s start timeout
    msg = info.value.message
    assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
    assert "driver 'fake-broken' failed to start: exited with status 1 before its hello" in msg
    assert "RuntimeError: no fake accelerator found on this machine" in msg
    assert str(tmp_path / "broken.log") in msg


def test_bad_factory_spec_fails_to_start(tmp_path):
    with pytest.raises(HalError, match="has no attribute 'Nope'"):
        DriverProcess.start(fake_spec("Nope"), log_path=str(tmp_path / "l"))


def test_stop_and_sigterm_exit_cleanly(tmp_path):
    proc = DriverProcess.start(fake_spec("AddDevice"), log_path=str(tmp_path / "a"))
    assert proc.alive()
    assert proc.stop(timeout=5) == 0
    _assert_reaped(proc.pid)
    proc = DriverProcess.start(fake_spec("AddDevice"), log_path=str(tmp_path / "b"))
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(5) and proc.returncode == 0
    assert "stopped by SIGTERM" in "\n".join(proc.tail(5))
    proc.stop()


def test_sigterm_during_a_call_exits_cleanly(tmp_path):
    dev = RemoteDevice.start(fake_spec("HangingDevice"), log_path=str(tmp_path / "l"))
    prepared = dev.prepareModel(add_model())
    pool = SharedMemory.create(256)
    a = np.ones((2, 3), np.float32)
    threading.Timer(0.3, os.kill, (dev.process.pid, signal.SIGTERM)).start()
    with pytest.raises(HalError, match="died: exited with status 0 during executeSynchronously"):
        prepared.executeSynchronously(_add_request(pool, a, a), timeout=5)
    assert "stopped by SIGTERM" in "\n".join(dev.process.tail(5))
    dev.close()
    pool.close()


def test_unencodable_result_is_reported(tmp_path):
    with RemoteDevice.start(fake_spec("NanDevice"), log_path=str(tmp_path / "l")) as dev:
        with pytest.raises(HalError, match="GENERAL_FAILURE: the driver's result cannot be encoded"):
            dev.getCapabilities()
        assert dev.getVersionString() == "fake-1.0"


def test_describe_returncode():
    assert describe_returncode(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_returncode(3) == "exited with status 3"
    assert describe_returncode(None) == "still running"
