"""Protocol 1.6: every execution travels as a binary (compact) call; new pools and host memory's
temporary copies are mapped by a mapMemories call first; a 1.5 service still gets JSON for them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.ipc import compact_calls as cc
from mlts.ipc import wire
from mlts.runtime.execution import ExecutionMode, Executor, burst_for
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session
from mlts.runtime.shared import SharedEndpoint, SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("binary") / "svc.log"
    svc = SharedService.start(
        fake_spec("AddDevice"), name="fake-add", log_path=str(log), service_args=["--max-mapped-mib", "1"]
    )
    yield svc
    assert svc.stop() == 0
    assert "Traceback" not in log.read_text()


class _Recorder:
    """The client's socket, recording every byte sent (frames are split out by `frames`)."""

    def __init__(self, sock) -> None:
        self._sock = sock
        self.sent = bytearray()

    def send(self, data, *flags):
        n = self._sock.send(data, *flags)
        self.sent += bytes(data)[:n]
        return n

    def sendall(self, data, *flags):
        self._sock.sendall(data, *flags)
        self.sent += bytes(data)

    def sendmsg(self, buffers, *rest):
        n = self._sock.sendmsg(buffers, *rest)
        self.sent += b"".join(bytes(b) for b in buffers)[:n]
        return n

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def frames(self) -> list[tuple[str, object]]:
        """("json", message) or ("compact", body) of each frame sent so far; the record is emptied."""
        out = []
        data, at = bytes(self.sent), 0
        while at < len(data):
            magic, _major, _minor, header_len, payload_len = wire.FIXED_HEADER.unpack_from(data, at)
            at += wire.FIXED_HEADER.size
            body = data[at : at + header_len]
            at += header_len + payload_len
            out.append(("compact", body) if magic == wire.MAGIC_COMPACT else ("json", json.loads(body)))
        self.sent.clear()
        return out


def _recording(dev: RemoteDevice) -> _Recorder:
    recorder = _Recorder(dev.connection.sock)
    dev.connection.sock = recorder
    return recorder


def _methods(frames) -> list[str]:
    return [m["method"] if kind == "json" else cc.METHODS[m[0]] + "/compact" for kind, m in frames]


def _memory_handles(dev: RemoteDevice) -> int:
    return dev.service_status()["you"]["handles"]["memory"]


def test_new_pools_are_mapped_by_map_memories_then_run_by_binary_calls(service):
    with service.connect() as dev:
        assert dev.binary_calls and dev.process.hello["protocol"] == [1, 6]
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        recorder = _recording(dev)
        for path in ("sync", "async", "fenced"):
            pool = _pool(x, 2 * x)
            request = _request(pool)
            for _ in range(2):
                np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
                if path == "sync":
                    prepared.executeSynchronously(request, MeasureTiming.YES)
                elif path == "async":
                    prepared.execute(request).result()
                else:
                    fence, callback = prepared.executeFenced(request)
                    assert callback.getExecutionInfo().status == ErrorStatus.NONE
                    fence.close()
                np.testing.assert_array_equal(_out(pool), 3 * x)
            frames = recorder.frames()
            name = {"sync": "executeSynchronously", "async": "execute", "fenced": "executeFenced"}[path]
            # The first call maps the new pool, then runs binary; the repeat is binary at once.
            assert _methods(frames) == ["mapMemories", f"{name}/compact", f"{name}/compact"]
            mapped = frames[0][1]["args"]["memories"]
            assert len(mapped) == 1 and mapped[0]["size"] == pool.size and mapped[0]["fd"] == 0
            pool_refs = cc.CallDecoder().decode(frames[1][1]).pools
            assert [ref.value for ref in pool_refs] == [mapped[0]["memory"]]
            dev.freeMemory([pool])
            assert _methods(recorder.frames()) == ["freeMemory"]
            pool.close()


def test_host_memory_round_trips_in_a_temporary_pool_whose_id_is_freed(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        before = _memory_handles(dev)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        host = HostMemory(bytearray(256))
        np.frombuffer(host.buffer, np.float32, 6, 0)[:] = x.ravel()
        np.frombuffer(host.buffer, np.float32, 6, 64)[:] = (10 * x).ravel()
        recorder = _recording(dev)
        for run in (
            lambda r: prepared.executeSynchronously(r),
            lambda r: prepared.execute(r).result(),
        ):
            np.frombuffer(host.buffer, np.float32, 6, 128)[:] = 0
            run(_request(host))
            np.testing.assert_array_equal(np.frombuffer(host.buffer, np.float32, 6, 128), (11 * x).ravel())
        frames = recorder.frames()
        methods = _methods(frames)
        assert methods == [
            "mapMemories",
            "executeSynchronously/compact",
            "freeMemory",
            "mapMemories",
            "execute/compact",
            "freeMemory",
        ]
        for k in (0, 3):
            temporary = frames[k][1]["args"]["memories"][0]["memory"]
            assert frames[k + 2][1]["args"] == {"ids": [temporary]}  # the very id is freed after its call
        assert _memory_handles(dev) == before  # answered after the frees: nothing is left mapped


def test_a_failed_map_memories_is_the_error_and_the_pool_is_not_taken_as_mapped(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.ones((2, 3), np.float32)
        big = SharedMemory.create(2 << 20)  # over the service's budget of 1 MiB
        np.frombuffer(big.buffer, np.float32, 6, 0)[:] = 1
        np.frombuffer(big.buffer, np.float32, 6, 64)[:] = 1
        for _ in range(2):  # refused each time: the client did not count it as mapped
            with pytest.raises(HalError) as refused:
                prepared.executeSynchronously(_request(big))
            assert refused.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
            assert (
                "mapMemories: mapping" in refused.value.message
                and "budget of 1048576" in refused.value.message
            )
        assert _memory_handles(dev) == 0
        pool = _pool(x, x)
        prepared.executeSynchronously(_request(pool))  # the connection goes on
        np.testing.assert_array_equal(_out(pool), 2 * x)
        big.close()
        pool.close()


def test_values_beyond_the_binary_format(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.ones((2, 3), np.float32)
        pool = _pool(x, x)
        good = _request(pool)
        prepared.executeSynchronously(good)
        recorder = _recording(dev)
        # NNAPI's offsets and lengths are uint32: refused here, as the driver would, and nothing is sent.
        far = Request(good.inputs, (RequestArgument(False, DataLocation(0, 1 << 32, 24), ()),), good.pools)
        for run in (lambda: prepared.executeSynchronously(far), lambda: prepared.execute(far).result()):
            with pytest.raises(HalError) as e:
                run()
            assert e.value.status == ErrorStatus.INVALID_ARGUMENT
            assert "request.outputs[0].location.offset" in e.value.message
        assert recorder.frames() == []
        # A deadline of 2**63 ns or more is never reached: no deadline; a negative one is refused.
        prepared.executeSynchronously(good, deadline=1 << 63)
        prepared.executeSynchronously(good, deadline=(1 << 64) - 1, loop_timeout_duration=(1 << 64) - 1)
        assert _methods(recorder.frames()) == ["executeSynchronously/compact"] * 2
        with pytest.raises(HalError, match="must be a nanosecond count") as e:
            prepared.executeSynchronously(good, deadline=-1)
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT
        # Call ids stay below 2**32: they wrap round.
        dev.connection._next_id = cc.MAX_U32
        for _ in range(3):
            prepared.executeSynchronously(good)
        assert _methods(recorder.frames()) == ["executeSynchronously/compact"] * 3
        assert dev.connection._next_id < 10
        np.testing.assert_array_equal(_out(pool), 2 * x)
        pool.close()


def test_a_1_5_service_still_gets_json_for_new_pools_and_host_memory(service):
    endpoint = SharedEndpoint.connect(service.path)
    endpoint.hello["protocol"] = [1, 5]  # what a 1.5 service announces
    with RemoteDevice(endpoint) as dev:
        assert dev.compact_calls and not dev.binary_calls
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        host = HostMemory(bytearray(256))
        np.frombuffer(host.buffer, np.float32, 12, 0)[:] = 1
        recorder = _recording(dev)
        prepared.executeSynchronously(_request(pool))
        prepared.executeSynchronously(_request(pool))
        prepared.executeSynchronously(_request(host))
        frames = recorder.frames()
        assert _methods(frames) == [
            "executeSynchronously",
            "executeSynchronously/compact",
            "executeSynchronously",
        ]
        assert "fd" in frames[0][1]["args"]["request"]["pools"][0]
        np.testing.assert_array_equal(_out(pool), 2 * x)
        pool.close()


@pytest.mark.parametrize("mode", ["sync", "burst"])
def test_a_session_runs_through_the_seam(service, mode):
    with service.connect() as dev:
        with Session(dev, add_model(), mode=mode, measure=False) as session:
            executor = session.executor
            assert isinstance(executor, Executor) and executor.prepared is session.prepared
            assert executor.mode is ExecutionMode(mode) and session.mode is executor.mode
            session.measure = MeasureTiming.YES
            assert executor.measure == MeasureTiming.YES
            x = np.arange(6, dtype=np.float32).reshape(2, 3)
            for _ in range(3):
                outs, _ = session.run([x, x])
                np.testing.assert_array_equal(outs[0], 2 * x)
            if mode == "burst":
                # The runs went through this thread's burst of the seam: it sent the pool once.
                assert burst_for(session.prepared).memories_sent == 1


def test_map_memories_checks_every_reference_and_maps_all_or_nothing(service):
    with service.connect() as dev:
        a, b = SharedMemory.create(4096), SharedMemory.create(4096)
        bad = [
            ({"memories": 3}, [], "argument 'memories' must be list"),
            ({"memories": [7]}, [a.fd], "memories[0] must be an object"),
            ({"memories": [{"memory": 1 << 32, "fd": 0, "size": 4096}]}, [a.fd], "not in [0, 2**32)"),
            ({"memories": [{"memory": 5, "fd": 0, "size": 4096}] * 2}, [a.fd], "but the frame carries 1 fds"),
            # The second reference fails: the first, mapped already, is dropped again.
            (
                {"memories": [{"memory": 5, "fd": 0, "size": 4096}, {"memory": 6, "fd": 0, "size": 4096}]},
                [a.fd, b.fd],
                "reuses fd 0",
            ),
            ({"memories": [{"memory": 5, "fd": 0, "size": 1 << 21}]}, [a.fd], "budget of 1048576"),
        ]
        for args, fds, text in bad:
            with pytest.raises(HalError) as e:
                dev.call("mapMemories", args, fds)
            assert text in e.value.message, e.value.message
            assert _memory_handles(dev) == 0
        assert dev.call("mapMemories", {"memories": []}) == {"mapped": 0}
        both = [{"memory": 5, "fd": 0, "size": 4096}, {"memory": 6, "fd": 1, "size": 4096}]
        assert dev.call("mapMemories", {"memories": both}, [a.fd, b.fd]) == {"mapped": 2}
        assert _memory_handles(dev) == 2
        assert dev.call("freeMemory", {"ids": [5, 6]}) == {"freed": 2}
        a.close()
        b.close()
