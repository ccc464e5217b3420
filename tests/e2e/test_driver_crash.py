"""The sample driver's process killed in the middle of executions: the client gets a clean error, fast."""

from __future__ import annotations

import os
import signal
import threading
import time

import onnx
import pytest

from mlts.bench.inputs import make_inputs
from mlts.convert import convert
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.models import zoo
from mlts.runtime.discovery import discover, open_device
from mlts.runtime.remote import DEFAULT_EXECUTE_TIMEOUT
from mlts.runtime.session import Session


def test_killed_driver_gives_device_unavailable_and_no_leftover_process():
    conv = convert(onnx.load(str(zoo.model_path("mobilenet_v1_0.25_128"))))
    feed = make_inputs([(t.shape, t.dtype) for t in conv.inputs], 1)[0]
    device = open_device(discover()["sample-all"])
    pid = device.process.pid
    session = Session(device, conv.model)
    session.run(feed)  # alive and working

    started = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while True:
                started.set()
                session.run(feed)
        except BaseException as e:  # the loop must end with the driver's death
            errors.append(e)

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    assert started.wait(5)
    time.sleep(0.05)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    worker.join(5)
    assert not worker.is_alive(), "the execution hung after the driver died"
    # Noticed, not waited out: well inside the 60 s execution timeout, however busy the machine.
    assert time.monotonic() - killed_at < DEFAULT_EXECUTE_TIMEOUT / 2
    assert len(errors) == 1 and isinstance(errors[0], HalError)
    err = errors[0]
    assert err.status == ErrorStatus.DEVICE_UNAVAILABLE
    assert "signal 9" in str(err) or "SIGKILL" in str(err)
    # Later calls fail fast with the same kind of error.
    t0 = time.monotonic()
    with pytest.raises(HalError) as again:
        session.run(feed)
    assert again.value.status == ErrorStatus.DEVICE_UNAVAILABLE
    assert time.monotonic() - t0 < DEFAULT_EXECUTE_TIMEOUT / 2  # at once: no timeout waited
    session.close()
    device.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie left behind
