"""A service that does not pre-validate hands the driver priorities, deadlines and driver buffers
unjudged on every path, so the driver's own handling is what answers; a hung fenced execution is
reported within the device's call timeout."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, Priority
from mlts.hal.errors import HalError
from mlts.runtime.execution import EXECUTION_MODES, execute
from mlts.runtime.process import DriverProcess
from mlts.runtime.remote import RemoteDevice
from tests.runtime.models import add_model
from tests.runtime.servicekit import shared_request as _shared_request

RAW = ["--no-prevalidate"]
FAULTY = "driver.faulty:SampleFaulty"


def _device(spec: str, tmp_path, options=None, service_args=RAW, **timeouts) -> RemoteDevice:
    process = DriverProcess.start(
        spec, options=options, log_path=str(tmp_path / "svc.log"), service_args=service_args
    )
    return RemoteDevice(process, **timeouts)


def _add_request():
    a = np.arange(3, dtype=np.float32)
    return _shared_request([a, a], [12])


def test_a_bad_priority_is_the_drivers_to_refuse(tmp_path) -> None:
    for args, says in ((RAW, "is not a Priority"), ([], "is not a valid Priority")):
        with _device("driver.variants:SampleAll", tmp_path, service_args=args) as device:
            with pytest.raises(HalError) as info:
                device.prepareModel(add_model((3,)), priority=7)  # type: ignore[arg-type]
            assert info.value.status == ErrorStatus.INVALID_ARGUMENT and says in info.value.message
    # A driver that ignores priorities takes it: nothing in between refused it.
    with _device(FAULTY, tmp_path, {"ignore_priority": "1"}) as device:
        device.prepareModel(add_model((3,)), priority=7).close()  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", EXECUTION_MODES)
def test_a_passed_deadline_reaches_the_driver_on_every_path(tmp_path, mode) -> None:
    request, pool = _add_request()
    past = time.monotonic_ns() - 1_000_000
    try:
        with _device("driver.variants:SampleAll", tmp_path) as device:
            prepared = device.prepareModel(add_model((3,)), priority=Priority.MEDIUM)
            with pytest.raises(HalError) as info:
                execute(prepared, request, mode=mode, deadline=past)
            assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
            assert "the deadline had already passed" in info.value.message
            assert not info.value.message.startswith(("burst:", "executeFenced:"))  # the driver's words
        with _device(FAULTY, tmp_path, {"ignore_deadlines": "1"}) as device:
            prepared = device.prepareModel(add_model((3,)))
            execute(prepared, request, mode=mode, deadline=past)  # the driver ignored it: it ran
            assert np.frombuffer(pool.buffer, np.float32, 3, 128).tolist() == [0.0, 2.0, 4.0]
    finally:
        pool.close()


def test_a_hung_fenced_execution_is_reported_within_the_call_timeout(tmp_path) -> None:
    request, pool = _add_request()
    device = _device(
        FAULTY, tmp_path, {"hang": "executeSynchronously:1"}, service_args=[], execute_timeout=1.0
    )
    try:
        prepared = device.prepareModel(add_model((3,)))
        start = time.monotonic()
        with pytest.raises(HalError) as info:
            execute(prepared, request, mode="fenced")
        assert "did not signal its fence within 1 s" in info.value.message
        assert time.monotonic() - start < 10
    finally:
        device.close()
        pool.close()
