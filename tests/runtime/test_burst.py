"""Burst executions through a driver service: results, slot cache, freeMemory, idle cost, hostile rings,
and the death of either side mid-burst."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.ipc import burst_messages as msg
from mlts.runtime.execution import execute
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _pool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = "driver.variants:SampleAll"


def _request(pool, out_length: int = 24) -> Request:
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, 24), (2, 3)),
            RequestArgument(False, DataLocation(0, 64, 24), (2, 3)),
        ),
        (RequestArgument(False, DataLocation(0, 128, out_length), ()),),
        (pool,),
    )


def _out(pool) -> np.ndarray:
    return np.frombuffer(pool.buffer, np.float32, 6, 128).reshape(2, 3).copy()


def _burst_status(device: RemoteDevice) -> dict[str, int]:
    """The client's handle counts, once every released burst's listener has ended (or 5 s passed)."""
    limit = time.monotonic() + 5
    while True:
        status = device.service_status()
        if status["burst_listeners"] == status["you"]["handles"]["burst"] or time.monotonic() > limit:
            return {**status["you"]["handles"], "listeners": status["burst_listeners"]}
        time.sleep(0.02)


@pytest.fixture
def sample(tmp_path):
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "driver.log"))
    yield device
    device.close()


def test_burst_results_equal_sync_bit_for_bit(sample):
    prepared = sample.prepareModel(add_model())
    rng = np.random.default_rng(17)
    with prepared.configureExecutionBurst() as burst:
        for _ in range(5):
            x = rng.standard_normal((2, 3)).astype(np.float32) * 1e3
            y = rng.standard_normal((2, 3)).astype(np.float32)
            pool = _pool(x, y)
            sync = prepared.executeSynchronously(_request(pool), MeasureTiming.YES)
            expected = _out(pool)
            np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = np.nan
            result = burst.execute(_request(pool), MeasureTiming.YES)
            assert _out(pool).tobytes() == expected.tobytes() == (x + y).tobytes()
            assert result.output_shapes == sync.output_shapes
            t = result.timing
            assert t.time_on_device <= t.time_in_driver < 10**7
            unmeasured = burst.execute(_request(pool))
            assert unmeasured.timing.time_in_driver == 2**64 - 1
            burst.freeMemory(pool)
            pool.close()
    # The seam's burst mode gives the same, and a Session runs in burst mode.
    pool = _pool(np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32))
    execute(prepared, _request(pool), mode="burst")
    np.testing.assert_array_equal(_out(pool), np.full((2, 3), 3, np.float32))
    with Session(sample, add_model(), mode="burst") as session:
        x = rng.standard_normal((2, 3)).astype(np.float32)
        outputs, _ = session.run([x, x])
        np.testing.assert_array_equal(outputs[0], x + x)
    prepared.close()
    left = _burst_status(sample)
    assert (left["prepared"], left["burst"], left["listeners"]) == (0, 0, 0)


def test_second_execution_maps_nothing_and_free_memory(sample):
    prepared = sample.prepareModel(add_model())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    pool, other = _pool(x, x), _pool(x, 2 * x)
    with prepared.configureExecutionBurst() as burst:
        burst.execute(_request(pool))
        assert burst.memories_sent == 1
        before = sample.service_status()["you"]["calls"]
        for _ in range(3):
            burst.execute(_request(pool))
        # No socket call at all: the driver used its cached mapping.
        assert burst.memories_sent == 1
        assert sample.service_status()["you"]["calls"] == before + 1  # the status call itself
        burst.execute(_request(other))
        assert burst.memories_sent == 2
        np.testing.assert_array_equal(_out(other), 3 * x)
        burst.freeMemory(pool)
        assert burst.cached_slots == 1
        burst.execute(_request(pool))  # asked for again under a new slot
        assert burst.memories_sent == 3
        np.testing.assert_array_equal(_out(pool), 2 * x)
    assert _burst_status(sample)["burst"] == 0 == _burst_status(sample)["listeners"]
    for p in (pool, other):
        p.close()


def test_burst_errors_are_the_sync_errors(sample):
    prepared = sample.prepareModel(add_model())
    x = np.ones((2, 3), np.float32)
    pool = _pool(x, x)
    with prepared.configureExecutionBurst(polling_us=0) as burst:
        with pytest.raises(HalError) as small:
            burst.execute(_request(pool, out_length=8))
        assert small.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert (
            small.value.output_shapes[0].dimensions == (2, 3)
            and not small.value.output_shapes[0].is_sufficient
        )
        with pytest.raises(HalError) as late:
            burst.execute(_request(pool), deadline=time.monotonic_ns() - 1)
        assert late.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
        bad = Request(_request(pool).inputs, (RequestArgument(False, DataLocation(0, 250, 24), ()),), (pool,))
        with pytest.raises(HalError) as outside:
            burst.execute(bad)
        assert outside.value.status == ErrorStatus.INVALID_ARGUMENT
        with pytest.raises(HalError, match="SharedMemory pools or driver buffer tokens"):
            burst.execute(Request(bad.inputs, bad.outputs, (HostMemory(bytearray(256)),)))
        # The burst goes on after every error.
        burst.execute(_request(pool))
        np.testing.assert_array_equal(_out(pool), 2 * x)
    pool.close()


def _raw(burst, payload: bytes) -> None:
    assert burst.requests.write(payload)


def test_hostile_ring_contents_end_only_that_burst(sample):
    prepared = sample.prepareModel(add_model())
    x = np.ones((2, 3), np.float32)
    pool = _pool(x, x)
    good = prepared.configureExecutionBurst(polling_us=0)
    good.execute(_request(pool))
    # Garbage messages and unknown slots: error results, the burst goes on.
    with prepared.configureExecutionBurst(polling_us=0) as burst:
        # A message that is no execute request is answered under sequence number 0; a request that
        # fails to decode under its own, so its client does not wait for a result that never comes.
        for seq, payload in (
            (0, b"\xff" * 40),
            (1, msg.encode_request(msg.BurstRequest(1, (msg.PoolRef.slot(999),), (), ()))[:-1]),
        ):
            _raw(burst, payload)
            with pytest.raises(HalError) as info:
                burst._await(seq, 5)
            assert info.value.status == ErrorStatus.INVALID_ARGUMENT
        _raw(burst, msg.encode_request(msg.BurstRequest(9, (msg.PoolRef.slot(999),), (), ())))
        with pytest.raises(HalError, match="slot 999"):
            burst._await(9, 10)
        burst.execute(_request(pool))
    # A counter moving backwards ends the burst; the driver and the other burst live on.
    for corrupt in ((0, 2**63), (0, 3)):
        burst = prepared.configureExecutionBurst(polling_us=0)
        burst.execute(_request(pool))
        struct.pack_into("<Q", burst.requests._view, *corrupt)
        burst.requests.signal()
        with pytest.raises(HalError) as ended:
            burst._await(1, 5)
        assert "ended the burst" in ended.value.message
        with pytest.raises(HalError):
            burst.execute(_request(pool))
        burst.close()
    # A burst of another client's model, or of a released one.
    other = RemoteDevice.start(SAMPLE, name="sample-all")
    try:
        from mlts.runtime.burst import RemoteBurst

        with pytest.raises(HalError, match="unknown prepared model handle"):
            RemoteBurst(other, prepared.handle)
    finally:
        other.close()
    doomed = sample.prepareModel(add_model())
    burst = doomed.configureExecutionBurst()
    sample.call("releasePreparedModel", {"prepared": doomed.handle})
    with pytest.raises(HalError, match="was released") as released:
        burst.execute(_request(pool))
    assert released.value.status == ErrorStatus.INVALID_ARGUMENT
    burst.close()
    good.execute(_request(pool))
    good.close()
    assert _burst_status(sample)["burst"] == 0 == _burst_status(sample)["listeners"]
    pool.close()


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_low_power_burst_uses_no_cpu(sample):
    prepared = sample.prepareModel(add_model())
    x = np.ones((2, 3), np.float32)
    pool = _pool(x, x)
    pid = sample.service_status()["pid"]
    with prepared.configureExecutionBurst(polling_us=0) as burst:
        burst.execute(_request(pool))
        before = _cpu_seconds(pid)
        time.sleep(1.0)
        idle = _cpu_seconds(pid) - before
        burst.execute(_request(pool))
    # A spinning listener would burn about a whole second here.
    assert idle < 0.1, idle
    pool.close()


CLIENT = textwrap.dedent(
    """
    import sys, numpy as np
    sys.path.insert(0, sys.argv[2])
    from mlts.runtime.remote import RemoteDevice
    from tests.runtime.models import add_model
    from tests.runtime.test_burst import _pool, _request
    device = RemoteDevice.connect(sys.argv[1])
    prepared = device.prepareModel(add_model())
    pool = _pool(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    burst = prepared.configureExecutionBurst()
    burst.execute(_request(pool))
    print("ready", flush=True)
    while True:
        burst.execute(_request(pool))
    """
)


def test_client_killed_mid_burst_frees_everything(tmp_path):
    with SharedService.start(
        fake_spec("SlowDevice"), name="fake-slow", options={"delay": "0.02"}, log_path=str(tmp_path / "s.log")
    ) as service:
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, service.path, ROOT], stdout=subprocess.PIPE, cwd=ROOT
        )
        try:
            assert child.stdout.readline().strip() == b"ready"
            # The child has run a step of its burst; the service's status shows it (wait for a busy machine).
            limit = time.monotonic() + 10
            while not any(c["handles"]["burst"] == 1 for c in service.status()["visible_clients"]):
                assert time.monotonic() < limit, service.status()
                time.sleep(0.05)
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait(10)
        limit = time.monotonic() + 10
        while time.monotonic() < limit:
            status = service.status()
            if status["clients"] == 1 and status["burst_listeners"] == 0:
                break
            time.sleep(0.05)
        status = service.status()
        assert status["clients"] == 1 and sum(status["visible_clients"][0]["handles"].values()) == 0
        assert status["burst_listeners"] == 0
        assert service.alive()


def test_driver_killed_mid_burst_is_reported_quickly(tmp_path):
    device = RemoteDevice.start(
        fake_spec("SlowDevice"), name="fake-slow", options={"delay": "60"}, log_path=str(tmp_path / "d.log")
    )
    try:
        prepared = device.prepareModel(add_model())
        pool = _pool(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
        burst = prepared.configureExecutionBurst()
        outcome: dict = {}

        def run() -> None:
            try:
                burst.execute(_request(pool))
            except HalError as e:
                outcome["error"] = e
            outcome["at"] = time.monotonic()

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.3)
        killed_at = time.monotonic()
        os.kill(device.process.popen.pid, signal.SIGKILL)
        # The execution takes 60 s: an end well before that is the death noticed (50 ms liveness steps),
        # not the call completing, however busy the machine.
        thread.join(30)
        assert not thread.is_alive()
        assert outcome["error"].status == ErrorStatus.DEVICE_UNAVAILABLE
        assert "SIGKILL" in outcome["error"].message or "signal 9" in outcome["error"].message
        assert outcome["at"] - killed_at < 30
        with pytest.raises(HalError) as again:
            burst.execute(_request(pool))
        assert again.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        burst.close()
        pool.close()
    finally:
        device.close()


def test_burst_executions_act_for_their_client(tmp_path):
    """The driver sees a burst execution's client as on the other paths (priorities and fair turns are
    per client): each connection's burst reports its own identity, the one its sync executions report."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with SharedService.start(
        fake_spec("ClientKeyDevice"), name="fake-client-key", log_path=str(tmp_path / "s.log")
    ) as service:
        keys = []
        for _ in range(2):
            device = service.connect()
            try:
                prepared = device.prepareModel(add_model())
                pool = _pool(x, x)
                prepared.executeSynchronously(_request(pool))
                sync_key = _out(pool) - 2 * x
                with prepared.configureExecutionBurst(polling_us=0) as burst:
                    np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = np.nan
                    burst.execute(_request(pool))
                    burst_key = _out(pool) - 2 * x
                    burst.freeMemory(pool)
                pool.close()
                prepared.close()
            finally:
                device.close()
            assert np.all(sync_key == sync_key.flat[0]) and sync_key.flat[0] > 0
            np.testing.assert_array_equal(burst_key, sync_key)
            keys.append(float(sync_key.flat[0]))
        assert keys[0] != keys[1]


def test_listener_stretches_its_window_over_the_clients_turn(sample):
    """A client that sends its next request a steady few hundred µs after each answer (an audio model
    step by step) finds the listener's window stretched over that gap (mlts.ipc.expected_wait), counted
    in serviceStatus; a low-power burst (no window) never stretches."""
    prepared = sample.prepareModel(add_model())
    pool = _pool(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    try:
        for polling_us, stretches in ((0, False), (None, True)):
            with prepared.configureExecutionBurst(polling_us=polling_us) as burst:
                for _ in range(60):
                    burst.execute(_request(pool))
                    time.sleep(0.0003)  # longer than the listener's 50 µs window, within its 1 ms
                planned = sample.service_status()["you"]["burst_stretches"]
            assert (planned > 0) is stretches, (polling_us, planned)
        np.testing.assert_array_equal(_out(pool), np.full((2, 3), 2, np.float32))
    finally:
        pool.close()
        prepared.close()
