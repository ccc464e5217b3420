"""One shared driver service, many clients: isolation, release on disconnect or death, the three paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.fence import FenceState, SyncFence
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.execution import execute
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request

SAMPLE_ALL = "driver.variants:SampleAll"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def service(tmp_path):
    svc = SharedService.start(
        fake_spec("SlowDevice"),
        name="fake-slow",
        options={"delay": "0.05"},
        log_path=str(tmp_path / "svc.log"),
        service_args=["--max-prepared", "3", "--fence-wait-limit", "5"],
    )
    yield svc
    assert svc.stop() == 0
    assert not os.path.exists(svc.path)


def _handles(status: dict, pid: int | None = None) -> int:
    return sum(
        sum(c["handles"].values()) for c in status["visible_clients"] if pid is None or c["pid"] == pid
    )


def test_clients_cannot_see_or_use_each_others_handles(service):
    a, b = service.connect(), service.connect()
    try:
        prepared = a.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        fence, callback = prepared.executeFenced(_request(pool))
        assert fence.wait(5)
        # B names A's handles: the same answer as for a handle that never existed.
        for method, args in (
            ("releasePreparedModel", {"prepared": prepared.handle}),
            ("getExecutionInfo", {"execution": callback.handle}),
            ("releaseExecution", {"execution": callback.handle}),
        ):
            with pytest.raises(HalError) as info:
                b.call(method, args)
            assert info.value.status == ErrorStatus.INVALID_ARGUMENT
            assert "unknown" in info.value.message
            with pytest.raises(HalError) as never:
                b.call(method, {k: 10**12 for k in args})
            assert never.value.message.replace(str(10**12), "N") == info.value.message.replace(
                str(list(args.values())[0]), "N"
            )
        request = {"inputs": [], "outputs": [], "pools": []}
        with pytest.raises(HalError, match="unknown prepared model handle"):
            b.call("executeSynchronously", {"prepared": prepared.handle, "request": request})
        # A's things still work, and B's status shows only B's nothing.
        assert callback.getExecutionInfo().status == ErrorStatus.NONE
        np.testing.assert_array_equal(_out(pool), 2 * x)
        status = b.service_status()
        assert status["clients"] == 2 and status["shared"] is True
        assert sum(status["you"]["handles"].values()) == 0
        assert _handles(status) >= 2  # A's prepared model and pool
        fence.close()
        pool.close()
    finally:
        a.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        b.service_status()["clients"] != 1 or _handles(b.service_status())
    ):
        time.sleep(0.05)
    status = b.service_status()
    assert status["clients"] == 1 and _handles(status) == 0
    b.close()


def test_async_and_fenced_results_equal_sync(service):
    dev = service.connect()
    try:
        prepared = dev.prepareModel(add_model())
        rng = np.random.default_rng(3)
        for _ in range(3):
            x = rng.standard_normal((2, 3)).astype(np.float32)
            y = rng.standard_normal((2, 3)).astype(np.float32)
            pool = _pool(x, y)
            outs = {}
            for mode in ("sync", "async", "fenced"):
                result = execute(prepared, _request(pool), MeasureTiming.YES, mode)
                outs[mode] = _out(pool)
                np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = np.nan
                assert result.timing.time_on_device == 1
                if mode != "fenced":
                    assert result.output_shapes[0].dimensions == (2, 3)
            for mode in ("async", "fenced"):
                np.testing.assert_array_equal(outs[mode], outs["sync"])
            np.testing.assert_array_equal(outs["sync"], x + y)
            pool.close()
        # Deadlines behave as on the synchronous path.
        x = np.ones((2, 3), np.float32)
        pool = _pool(x, x)
        passed = time.monotonic_ns() - 1
        for mode in ("sync", "async", "fenced"):
            with pytest.raises(HalError) as info:
                execute(prepared, _request(pool), MeasureTiming.NO, mode, deadline=passed)
            assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT, mode
        soon = time.monotonic_ns() + 10_000_000  # the work takes 50 ms
        with pytest.raises(HalError) as info:
            prepared.execute(_request(pool), deadline=soon).result()
        assert info.value.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        pool.close()
    finally:
        dev.close()


def test_fence_chain_runs_without_a_round_trip(service):
    dev = service.connect()
    try:
        prepared = dev.prepareModel(add_model())
        x = np.full((2, 3), 1.5, np.float32)
        pool = _pool(x, x)
        # out1 = x + x at 128; out2 = out1 + x written at 192 by the second execution (inputs 128 and 64).
        first = _request(pool)
        second = Request(
            (
                RequestArgument(False, DataLocation(0, 128, 24), (2, 3)),
                RequestArgument(False, DataLocation(0, 64, 24), (2, 3)),
            ),
            (RequestArgument(False, DataLocation(0, 192, 24), ()),),
            (pool,),
        )
        gate = SyncFence.create()
        f1, c1 = prepared.executeFenced(first, [gate], MeasureTiming.YES)
        f2, c2 = prepared.executeFenced(second, [f1], MeasureTiming.YES)
        time.sleep(0.2)
        assert f1.state() == FenceState.ACTIVE and f2.state() == FenceState.ACTIVE
        calls = dev.service_status()["you"]["calls"]
        gate.signal()
        assert f2.wait(5)
        # Nothing was sent between the gate opening and the chain's end.
        assert dev.service_status()["you"]["calls"] == calls + 1
        np.testing.assert_array_equal(_out(pool, 192), 3 * x)
        info1, info2 = c1.getExecutionInfo(), c2.getExecutionInfo()
        assert info1.status == info2.status == ErrorStatus.NONE
        for info in (info1, info2):
            assert info.timing_launched.time_in_driver >= info.timing_fenced.time_in_driver
            assert info.timing_fenced.time_in_driver >= info.timing_fenced.time_on_device
        assert info2.timing_launched.time_in_driver >= 200_000  # launched before the gate opened
        for f in (gate, f1, f2):
            f.close()
        pool.close()
    finally:
        dev.close()


def test_fence_errors_and_deadlines_never_stick(service):
    dev = service.connect()
    try:
        prepared = dev.prepareModel(add_model())
        x = np.ones((2, 3), np.float32)
        pool = _pool(x, x)
        # An input fence that never signals, with a deadline: MISSED_DEADLINE and an error fence.
        never = SyncFence.create()
        deadline = time.monotonic_ns() + 200_000_000
        fence, callback = prepared.executeFenced(_request(pool), [never], deadline=deadline)
        assert fence.wait(5) and fence.state() == FenceState.ERROR
        assert callback.getExecutionInfo().status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        # An input fence signalled with an error fails the execution that waits for it.
        bad = SyncFence.create()
        bad.signal(ok=False)
        fence2, callback2 = prepared.executeFenced(_request(pool), [bad])
        assert fence2.wait(5) and fence2.state() == FenceState.ERROR
        assert callback2.getExecutionInfo().status == ErrorStatus.GENERAL_FAILURE
        # timeoutDurationAfterFence shorter than the work (50 ms).
        fence3, callback3 = prepared.executeFenced(_request(pool), timeout_after_fence=5_000_000)
        assert fence3.wait(5)
        assert callback3.getExecutionInfo().status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
        # Nothing is left waiting or running in the service: the timed-out execution's own work (50 ms,
        # which cannot be interrupted) may still be ending when its error report arrives, but not for long.
        limit = time.monotonic() + 30  # a bound on a busy machine; on a quiet one it takes milliseconds
        while True:
            status = dev.service_status()
            if status["fence_waits"] == 0 and status["execute_pool"]["busy"] == 0:
                break
            assert time.monotonic() < limit, status
            time.sleep(0.01)
        for f in (never, bad, fence, fence2, fence3):
            f.close()
        pool.close()
    finally:
        dev.close()


def test_limits_are_resource_exhausted(service):
    dev = service.connect()
    try:
        held = [dev.prepareModel(add_model()) for _ in range(3)]
        with pytest.raises(HalError) as info:
            dev.prepareModel(add_model())
        assert info.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
        held.pop().close()
        held.append(dev.prepareModel(add_model()))  # room again
        for p in held:
            p.close()
    finally:
        dev.close()


def test_in_flight_limit(tmp_path):
    with SharedService.start(
        fake_spec("SlowDevice"),
        options={"delay": "0.2"},
        log_path=str(tmp_path / "l"),
        service_args=["--max-in-flight", "2", "--workers", "1"],
    ) as svc:
        with svc.connect() as dev:
            prepared = dev.prepareModel(add_model())
            x = np.ones((2, 3), np.float32)
            pool = _pool(x, x)
            runs = [prepared.execute(_request(pool)) for _ in range(4)]
            statuses = []
            for run in runs:
                try:
                    run.result()
                    statuses.append(ErrorStatus.NONE)
                except HalError as e:
                    statuses.append(e.status)
            assert statuses[:2] == [ErrorStatus.NONE, ErrorStatus.NONE]
            assert ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT in statuses[2:]
            prepared.execute(_request(pool)).result()  # fine once the others are done
            pool.close()


_CLIENT = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    sys.path.insert(0, {root!r})
    from mlts.runtime.remote import RemoteDevice
    from tests.runtime.models import add_model
    from tests.runtime.servicekit import _pool, _request
    dev = RemoteDevice.connect({path!r})
    prepared = dev.prepareModel(add_model())
    x = np.ones((2, 3), np.float32)
    pool = _pool(x, x)
    runs = [prepared.execute(_request(pool)) for _ in range(3)]
    print("running", flush=True)
    time.sleep(60)
    """
)


def test_client_killed_mid_execution_frees_its_handles(tmp_path):
    with SharedService.start(
        fake_spec("SlowDevice"), options={"delay": "0.5"}, log_path=str(tmp_path / "l")
    ) as svc:
        code = _CLIENT.format(root=ROOT, path=svc.path)
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=ROOT)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == b"running"
            with svc.connect() as watcher:
                status = watcher.service_status()
                assert _handles(status, child.pid) >= 2
                assert [c["in_flight"] for c in status["visible_clients"] if c["pid"] == child.pid] == [3]
                os.kill(child.pid, signal.SIGKILL)
                child.wait(5)
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and watcher.service_status()["clients"] > 1:
                    time.sleep(0.05)
                status = watcher.service_status()
                assert status["clients"] == 1 and _handles(status) == 0
                # The service and its other clients go on.
                prepared = watcher.prepareModel(add_model())
                x = np.ones((2, 3), np.float32)
                pool = _pool(x, x)
                prepared.executeSynchronously(_request(pool))
                np.testing.assert_array_equal(_out(pool), 2 * x)
                pool.close()
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
        assert svc.alive()


def test_a_long_prepare_does_not_delay_executions_of_another_client(tmp_path):
    with SharedService.start(
        fake_spec("SlowDevice"),
        options={"delay": "0", "prepare_delay": "1.0"},
        log_path=str(tmp_path / "l"),
    ) as svc:
        fast, slow = svc.connect(), svc.connect()
        try:
            prepared = fast.prepareModel(add_model())  # 1 s
            x = np.ones((2, 3), np.float32)
            pool = _pool(x, x)
            from mlts.hal import nnfile

            data = nnfile.encode(add_model())
            mem = SharedMemory.frozen(data)
            pending = slow.connection.send(
                "prepareModel", {"model": {"fd": 0, "size": len(data)}}, [mem.fd], 10.0
            )
            ran = 0
            # While the slow client's preparation runs, the fast client's executions are answered.
            while pending.reply is None and ran < 1000:
                prepared.executeSynchronously(_request(pool))
                ran += 1
                if ran == 5:
                    assert pending.reply is None
            assert ran >= 5
            mem.close()
            pool.close()
        finally:
            fast.close()
            slow.close()


def test_a_served_driver_is_discovered_by_its_socket(service):
    from mlts.runtime.discovery import discover, open_device, select

    specs = discover(sockets=[service.path])
    spec = specs["fake-slow"]
    assert spec.socket == service.path and spec.source == f"service {service.path}"
    assert [s.name for s in select(specs, None)] == ["fake-slow"]  # served drivers are the default
    assert "sample-all" in specs  # the others can still be named
    with open_device(spec) as dev:
        assert dev.shared and dev.getVersionString() == "fake-1.0"


def test_a_fence_that_never_signals_ends_at_the_services_wait_limit(tmp_path):
    with SharedService.start(
        fake_spec("AddDevice"), log_path=str(tmp_path / "l"), service_args=["--fence-wait-limit", "0.3"]
    ) as svc:
        with svc.connect() as dev:
            prepared = dev.prepareModel(add_model())
            x = np.ones((2, 3), np.float32)
            pool = _pool(x, x)
            never = SyncFence.create()
            fence, callback = prepared.executeFenced(_request(pool), [never])  # no deadline
            assert fence.wait(5) and fence.state() == FenceState.ERROR
            info = callback.getExecutionInfo()
            assert info.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "within 0.3 s" in info.message
            # The service is not stuck: it runs the next execution, and nothing waits any more.
            prepared.executeSynchronously(_request(pool))
            np.testing.assert_array_equal(_out(pool), 2 * x)
            assert dev.service_status()["fence_waits"] == 0
            for f in (never, fence):
                f.close()
            pool.close()


def _thread_nices(pid: int) -> list[int]:
    """The nice value of each thread of process `pid` (field 19 of /proc/PID/task/TID/stat)."""
    nices = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                nices.append(int(f.read().rsplit(")", 1)[1].split()[16]))
        except FileNotFoundError:  # the thread ended since the listing
            continue
    return nices


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_the_shared_service_prepares_below_its_executions(tmp_path):
    from mlts.ipc.service.background import PREPARE_NICE
    from mlts.ipc.service.host import DEFAULT_PREPARE_WORKERS
    from mlts.runtime.remote import RemoteDevice

    service = SharedService.start(SAMPLE_ALL, name="sample-all", log_path=str(tmp_path / "svc.log"))
    try:
        with RemoteDevice.connect(service.path) as device:
            status = device.service_status()
            nices = _thread_nices(service.pid)
    finally:
        service.stop()
    assert status["prepare_pool"]["nice"] == PREPARE_NICE > 0
    assert 0 < status["prepare_pool"]["switch_interval_ms"] < 5
    # The preparation workers run PREPARE_NICE steps below; the main, execution and client threads do not.
    base = min(nices)
    assert nices.count(base + PREPARE_NICE) == DEFAULT_PREPARE_WORKERS
    assert nices.count(base) == len(nices) - DEFAULT_PREPARE_WORKERS
