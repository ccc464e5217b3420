"""Compact execution calls against a real service: same results as JSON, hostile compact frames refused."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.fence import SyncFence
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.ipc import compact_calls as cc
from mlts.ipc import wire
from mlts.ipc.burst_messages import PoolRef
from mlts.runtime.remote import _speaks_compact
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("compact") / "svc.log"
    svc = SharedService.start(fake_spec("AddDevice"), name="fake-add", log_path=str(log))
    yield svc
    assert svc.stop() == 0
    assert "Traceback" not in log.read_text()


def _compact_count(device) -> int:
    return device.service_status()["you"]["compact_calls"]


def test_every_path_gives_the_json_results_and_repeats_travel_compact(service):
    with service.connect() as dev:
        assert dev.compact_calls
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        for k in range(3):
            pool = _pool(x + k, 2 * x)
            request = _request(pool)
            expected = 3 * x + k
            results = []
            for compact in (False, True, True):
                dev.compact_calls = compact
                np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
                results.append(prepared.executeSynchronously(request, MeasureTiming.YES))
                np.testing.assert_array_equal(_out(pool), expected)
                np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
                execution = prepared.execute(request, MeasureTiming.YES)
                results.append(execution.result())
                np.testing.assert_array_equal(_out(pool), expected)
                np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
                fence, callback = prepared.executeFenced(request, measure=MeasureTiming.YES)
                info = callback.getExecutionInfo()
                assert info.status == ErrorStatus.NONE
                fence.close()
                np.testing.assert_array_equal(_out(pool), expected)
            assert len({r.output_shapes for r in results}) == 1
            assert results[0].output_shapes[0].dimensions == (2, 3)
            dev.freeMemory([pool])
            pool.close()
        # Each pool's first call maps it (JSON); the 3 paths x 2 compact rounds x 3 pools are compact.
        assert _compact_count(dev) == 18
        # Host memory travels in a temporary shared copy: mapped by mapMemories, then a compact call (1.6).
        host = HostMemory(bytearray(256))
        np.frombuffer(host.buffer, np.float32, 6, 0)[:] = x.ravel()
        np.frombuffer(host.buffer, np.float32, 6, 64)[:] = x.ravel()
        for _ in range(2):
            prepared.executeSynchronously(_request(host))
        assert np.frombuffer(host.buffer, np.float32, 6, 128).tolist() == (2 * x).ravel().tolist()
        assert _compact_count(dev) == 20


def test_errors_of_compact_calls_are_the_json_errors(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.ones((2, 3), np.float32)
        pool = _pool(x, x)
        good = _request(pool)
        prepared.executeSynchronously(good)  # maps the pool (mapMemories), then a compact call
        small = _request(pool, shape=(2, 3))
        small = type(small)(
            small.inputs,
            (type(small.outputs[0])(False, type(small.outputs[0].location)(0, 128, 8), ()),),
            small.pools,
        )
        errors = {}
        for compact in (False, True):
            dev.compact_calls = compact
            with pytest.raises(HalError) as e:
                prepared.executeSynchronously(small)
            errors[compact] = (e.value.status, e.value.message, e.value.output_shapes)
            with pytest.raises(HalError) as e:
                prepared.execute(small).result()
            assert e.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert errors[True] == errors[False]
        assert errors[True][0] == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert _compact_count(dev) == 3
        pool.close()


def test_a_1_3_hello_means_json_calls():
    assert _speaks_compact({"protocol": [1, 4]}) and _speaks_compact({"protocol": [1, 9]})
    for hello in ({"protocol": [1, 3]}, {"protocol": [2, 4]}, {"protocol": "1.4"}, {}, None):
        assert not _speaks_compact(hello)


class CompactClient:
    """A client writing compact frames by hand."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        assert self.recv().message["protocol"] == [1, 6]

    def recv(self) -> wire.Frame:
        def wait(partial: bool) -> None:
            if not wire.wait_readable(self.sock, 5.0):
                raise AssertionError("the service did not answer within 5 s")

        return wire.recv_frame(self.sock, wait)

    def json(self, msg_id: int, method: str, args: dict, fds=()) -> dict:
        wire.send_frame(self.sock, {"kind": "call", "id": msg_id, "method": method, "args": args}, fds=fds)
        frame = self.recv()
        frame.close_fds()
        return frame.message

    def compact(self, body: bytes, fds=()) -> wire.Frame:
        wire.send_data(self.sock, wire.compact_frame_bytes(body), fds)
        return self.recv()

    def error(self, body: bytes, fds=()) -> tuple[int | None, ErrorStatus, str]:
        frame = self.compact(body, fds)
        frame.close_fds()
        reply = frame.message
        assert reply.get("kind") == "reply" and reply["ok"] is False, (reply, frame.compact)
        return reply["id"], ErrorStatus(reply["error"]["status"]), reply["error"]["message"]


def test_hostile_compact_frames_get_errors_and_the_connection_goes_on(service):
    c = CompactClient(service.path)
    other = CompactClient(service.path)
    data = nnfile.encode(add_model())
    model = SharedMemory.frozen(data)
    handle = c.json(1, "prepareModel", {"model": {"fd": 0, "size": len(data)}}, [model.fd])["result"][
        "prepared"
    ]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    pool = _pool(x, x)
    request = _request(pool)
    args = {
        "prepared": handle,
        "request": {
            "inputs": [
                {
                    "hasNoValue": False,
                    "location": {"poolIndex": 0, "offset": o, "length": 24},
                    "dimensions": [2, 3],
                }
                for o in (0, 64)
            ],
            "outputs": [
                {
                    "hasNoValue": False,
                    "location": {"poolIndex": 0, "offset": 128, "length": 24},
                    "dimensions": [],
                }
            ],
            "pools": [{"memory": 5, "fd": 0, "size": pool.size}],
        },
    }
    assert c.json(2, "executeSynchronously", args, [pool.fd])["ok"] is True  # maps memory id 5
    made = cc.template(request, (PoolRef.slot(5),))

    np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
    frame = c.compact(made.call(cc.SYNC, 3, handle, 1, None, None))
    assert cc.answer_head(frame.compact) == (cc.RESULT, 3)
    assert cc.ResultDecoder().decode(frame.compact).output_shapes[0].dimensions == (2, 3)
    np.testing.assert_array_equal(_out(pool), 2 * x)

    # Undecodable: short, a bad method, counts beyond the message.
    assert c.error(b"\x01\x00")[1] == ErrorStatus.INVALID_ARGUMENT
    msg_id, status, text = c.error(bytes([7, 0, 0, 0]) + made.call(cc.SYNC, 4, handle, 0, None, None)[4:])
    assert (msg_id, status) == (4, ErrorStatus.INVALID_ARGUMENT) and "method code 7" in text
    body = bytearray(made.call(cc.SYNC, 5, handle, 0, None, None))
    body[cc.CALL.size + 28 : cc.CALL.size + 32] = (10**6).to_bytes(4, "little")  # pools
    assert "bad compact call" in c.error(bytes(body))[2]
    # Unknown, released or another client's handles and ids.
    assert "unknown prepared model handle" in c.error(made.call(cc.SYNC, 6, handle + 999, 0, None, None))[2]
    unknown_pool = cc.template(request, (PoolRef.slot(6),))
    assert "has not mapped" in c.error(unknown_pool.call(cc.SYNC, 7, handle, 0, None, None))[2]
    # Another client names this one's memory id and model: unknown in its own table.
    assert "has not mapped" in other.error(made.call(cc.SYNC, 8, handle, 0, None, None))[2]
    token = cc.template(request, (PoolRef.token(1234),))
    assert "not a live buffer of this client" in c.error(token.call(cc.ASYNC, 9, handle, 0, None, None))[2]
    # Fences: only eventfds, at most 32.
    memfd = SharedMemory.create(8)
    assert "not a sync fence" in c.error(made.call(cc.FENCED, 10, handle, 0, None, None), [memfd.fd])[2]
    fences = [SyncFence.create() for _ in range(33)]
    assert "at most 32" in c.error(made.call(cc.FENCED, 11, handle, 0, None, None), [f.fd for f in fences])[2]
    # An input fence chain runs; the answer carries the execution handle and its fence.
    fences[0].signal(ok=True)
    frame = c.compact(made.call(cc.FENCED, 12, handle, 1, None, None, 10**9), [fences[0].fd])
    assert cc.answer_head(frame.compact)[0] == cc.FENCED_LAUNCHED and len(frame.fds) == 1
    execution = cc.fenced_handle(frame.compact)
    out = SyncFence.from_fd(frame.fds[0], "fence")
    # The report comes unasked, before the fence signals, and the service releases the record.
    done = c.recv()
    assert cc.answer_head(done.compact) == (cc.FENCED_DONE, 12)
    info = cc.fenced_done(done.compact)
    assert (
        info.status == ErrorStatus.NONE
        and info.timing_fenced.time_in_driver <= info.timing_launched.time_in_driver
    )
    assert out.wait(5.0)
    reply = c.json(13, "getExecutionInfo", {"execution": execution})
    assert "unknown fenced execution handle" in reply["error"]["message"]
    out.close()
    # A deadline already passed: launched, then reported as failed.
    frame = c.compact(made.call(cc.FENCED, 15, handle, 0, 1, None))
    assert cc.answer_head(frame.compact)[0] == cc.FENCED_LAUNCHED
    frame.close_fds()
    info = cc.fenced_done(c.recv().compact)
    assert info.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT and "deadline" in info.message
    # The connection and the cached request still serve.
    frame = c.compact(made.call(cc.SYNC, 14, handle, 0, None, None))
    assert cc.answer_head(frame.compact) == (cc.RESULT, 14)
    for thing in (*fences, memfd, pool, model):
        thing.close()
    c.sock.close()
    other.sock.close()


def test_a_freed_pool_is_mapped_again_and_a_closed_one_is_refused(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        request = _request(pool)
        prepared.executeSynchronously(request)  # mapMemories maps the pool, then a compact call
        prepared.executeSynchronously(request)  # compact
        dev.freeMemory([pool])
        np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = 5
        prepared.executeSynchronously(request)  # mapped again: the service has no mapping now
        np.testing.assert_array_equal(_out(pool), 5 + x)
        prepared.executeSynchronously(request)  # compact again
        assert _compact_count(dev) == 4
        pool.close()
        with pytest.raises(HalError, match="is closed") as e:
            prepared.executeSynchronously(request)
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT
