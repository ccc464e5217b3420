"""Per-operation times end to end: asked for by the request, measured by the sample driver, carried on
every execution path (sync, async, fenced, burst), absent when not asked, refused when malformed."""

from __future__ import annotations

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.runtime.execution import EXECUTION_MODES
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session
from tests.driver.timingkit import chain_model
from tests.runtime.conftest import FAKE_FILE
from tests.runtime.models import add_model

TIMING_SPEC = FAKE_FILE.replace("fake_drivers.py", "fake_timing_drivers.py") + ":TimingAddDevice"
X = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    log = tmp_path_factory.mktemp("optimes") / "driver.log"
    device = RemoteDevice.start("driver.variants:SampleAll", name="sample-all", log_path=str(log))
    yield device
    device.close()


def _check_record(result, n_ops: int) -> None:
    times = result.operation_times
    assert times is not None
    assert sorted(e.operation for e in times) == list(range(n_ops))  # every executed operation, once
    # The kernels ran inside the on-device window (µs, truncated): their sum cannot exceed it.
    assert sum(e.duration_ns for e in times) <= (result.timing.time_on_device + 1) * 1000


@pytest.mark.parametrize("mode", EXECUTION_MODES)
def test_record_on_every_path_when_asked_and_absent_when_not(sample, mode):
    model = chain_model()
    with Session(sample, model, mode=mode, profile=True) as session:
        out, result = session.run([X])
        _check_record(result, len(model.main.operations))
        session.profile = False
        again, plain = session.run([X])
        assert plain.operation_times is None
        np.testing.assert_array_equal(again[0], out[0])  # profiling changes no result


def test_in_process_driver_fills_the_record_too():
    device = SampleAll()
    try:
        for mode in EXECUTION_MODES:
            with Session(device, chain_model(), mode=mode, profile=True) as session:
                _, result = session.run([X])
                _check_record(result, 4)
                session.profile = False
                assert session.run([X])[1].operation_times is None
    finally:
        device.close()


def _add_inputs():
    a = np.ones((2, 3), np.float32)
    return [a, a]


def test_a_record_nobody_asked_for_is_dropped_by_the_service(tmp_path):
    device = RemoteDevice.start(TIMING_SPEC, name="fake-timing", log_path=str(tmp_path / "d.log"))
    try:
        for mode in EXECUTION_MODES:
            with Session(device, add_model(), mode=mode) as session:
                assert session.run(_add_inputs())[1].operation_times is None
            with Session(device, add_model(), mode=mode, profile=True) as session:
                assert [e.operation for e in session.run(_add_inputs())[1].operation_times] == [0]
    finally:
        device.close()


@pytest.mark.parametrize(
    "record, message",
    [
        ("twice", "the driver returned malformed operation times[1]: operation 0 is reported twice"),
        ("out-of-range", "returned malformed operation times[0]: operation index 7 is not an operation"),
        ("too-long", "returned malformed operation times[0]: duration 3600000000000 ns"),
    ],
)
def test_hostile_records_are_refused_with_a_clear_error(tmp_path, record, message):
    device = RemoteDevice.start(
        TIMING_SPEC, name="fake-timing", options={"record": record}, log_path=str(tmp_path / "d.log")
    )
    try:
        for mode in EXECUTION_MODES:
            with Session(device, add_model(), mode=mode, profile=True) as session:
                with pytest.raises(HalError) as e:
                    session.run(_add_inputs())
            assert e.value.status == ErrorStatus.GENERAL_FAILURE, mode
            assert message in e.value.message, mode
            assert "\n" not in e.value.message
            with Session(device, add_model(), mode=mode) as session:  # the driver still serves
                assert session.run(_add_inputs())[1].operation_times is None
    finally:
        device.close()
