"""A shared service under hostile clients: wrong handles, wrong fds, floods, silence, half frames.

Each gets an error reply or a closed connection for that client only; the
service keeps serving others and leaks neither fds nor memory.
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.fence import SyncFence
from mlts.hal.memory import SharedMemory
from mlts.ipc import wire
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request


class RawClient:
    """A client speaking frames by hand."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.hello = self.recv()
        self.next_id = 1

    def recv(self) -> dict:
        def wait(partial: bool) -> None:
            if not wire.wait_readable(self.sock, 5.0):
                raise AssertionError("the service did not answer within 5 s")

        frame = wire.recv_frame(self.sock, wait)
        frame.close_fds()
        return frame.message

    def send(self, method: str, args: dict | None = None, fds=()) -> int:
        msg_id = self.next_id
        self.next_id += 1
        wire.send_frame(
            self.sock, {"kind": "call", "id": msg_id, "method": method, "args": args or {}}, fds=fds
        )
        return msg_id

    def call(self, method: str, args: dict | None = None, fds=()) -> dict:
        msg_id = self.send(method, args, fds)
        reply = self.recv()
        assert reply["kind"] == "reply" and reply["id"] == msg_id, reply
        return reply

    def error(self, method: str, args: dict | None = None, fds=()) -> tuple[ErrorStatus, str]:
        reply = self.call(method, args, fds)
        assert reply["ok"] is False, reply
        return ErrorStatus(reply["error"]["status"]), reply["error"]["message"]

    def close(self) -> None:
        self.sock.close()


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def service(tmp_path):
    svc = SharedService.start(
        fake_spec("AddDevice"),
        name="fake-add",
        log_path=str(tmp_path / "svc.log"),
        service_args=["--frame-timeout", "0.5"],
    )
    yield svc
    assert svc.stop() == 0
    with open(svc.log_path) as f:
        assert "Traceback" not in f.read()


def _prepare(client: RawClient) -> int:
    data = nnfile.encode(add_model())
    mem = SharedMemory.frozen(data)
    reply = client.call("prepareModel", {"model": {"fd": 0, "size": len(data)}}, [mem.fd])
    mem.close()
    return reply["result"]["prepared"]


def test_wrong_fds_and_released_handles(service):
    c = RawClient(service.path)
    handle = _prepare(c)
    pool = SharedMemory.create(256)
    arg = {"hasNoValue": False, "location": {"poolIndex": 0, "offset": 0, "length": 24}, "dimensions": [2, 3]}
    out = {**arg, "location": {"poolIndex": 0, "offset": 128, "length": 24}}
    request = {"inputs": [arg, arg], "outputs": [out], "pools": [{"fd": 1, "size": 256}]}
    r, w = os.pipe()
    memfd = SharedMemory.create(8)
    sock_a, sock_b = socket.socketpair()
    event = SyncFence.create()
    # Things that are not fences, as fences.
    for fd in (r, memfd.fd, sock_a.fileno()):
        status, message = c.error(
            "executeFenced", {"prepared": handle, "request": request, "wait_for": [0]}, [fd, pool.fd]
        )
        assert status == ErrorStatus.INVALID_ARGUMENT and "not a sync fence" in message
    # A fence (or a pipe) where memory is expected.
    for fd in (event.fd, r):
        status, _ = c.error("getSupportedOperations", {"model": {"fd": 0, "size": 8}}, [fd])
        assert status == ErrorStatus.INVALID_ARGUMENT
    # Unknown and released handles.
    assert c.call("releasePreparedModel", {"prepared": handle})["ok"] is True
    for method, args in (
        ("releasePreparedModel", {"prepared": handle}),
        (
            "executeSynchronously",
            {"prepared": handle, "request": {**request, "pools": [{"fd": 0, "size": 256}]}},
        ),
        ("getExecutionInfo", {"execution": 77}),
        ("releaseExecution", {"execution": 0}),
        ("getExecutionInfo", {"execution": True}),
    ):
        fds = [pool.fd] if method == "executeSynchronously" else []
        status, _ = c.error(method, args, fds)
        assert status == ErrorStatus.INVALID_ARGUMENT, method
    for fd in (r, w):
        os.close(fd)
    sock_a.close()
    sock_b.close()
    for thing in (memfd, pool, event):
        thing.close()
    assert c.call("ping")["ok"] is True
    c.close()


def test_ten_thousand_hostile_calls_leak_nothing(service):
    c = RawClient(service.path)
    pid = service.pid
    handle = _prepare(c)
    r, w = os.pipe()
    pool = SharedMemory.create(256)
    arg = {"hasNoValue": False, "location": {"poolIndex": 0, "offset": 0, "length": 24}, "dimensions": [2, 3]}
    request = {"inputs": [arg, arg], "outputs": [arg], "pools": [{"fd": 1, "size": 256}]}
    calls = [
        ("executeFenced", {"prepared": handle, "request": request, "wait_for": [0]}, [r, pool.fd]),
        ("executeSynchronously", {"prepared": handle + 1000, "request": request}, [pool.fd, pool.fd]),
        ("getSupportedOperations", {"model": {"fd": 0, "size": 1 << 40}}, [pool.fd]),
        ("releasePreparedModel", {"prepared": -5}, []),
        ("freeMemory", {"ids": ["x", *range(50)]}, []),
        ("execute", {"prepared": handle, "request": {"pools": [{"memory": 99}]}}, []),
        ("no-such-method", {}, [r]),
    ]

    def burst(n: int) -> None:
        sent = []
        for k in range(n):
            method, args, fds = calls[k % len(calls)]
            sent.append(c.send(method, args, fds))
        for msg_id in sent:
            reply = c.recv()
            assert reply["id"] == msg_id and reply["ok"] is False, reply

    # Bursts stay small: a client that sends without reading its replies is cut off by the send timeout.
    for _ in range(14):
        burst(50)  # warm up allocator and caches before measuring
    fds_before, rss_before = _fd_count(pid), _rss_kb(pid)
    for _ in range(10_000 // 50):
        burst(50)
    # A leak is an fd that stays: the last calls' fences and pools may still be being released.
    deadline = time.monotonic() + 5.0
    while _fd_count(pid) > fds_before and time.monotonic() < deadline:
        time.sleep(0.05)
    fds_after, rss_after = _fd_count(pid), _rss_kb(pid)
    assert fds_after <= fds_before  # (a connection of the start-up probe may close meanwhile)
    assert rss_after - rss_before < 8 * 1024, (rss_before, rss_after)
    os.close(r)
    os.close(w)
    pool.close()
    c.close()


def test_silent_and_half_frame_clients_harm_only_themselves(service):
    silent = RawClient(service.path)  # connects and never sends anything
    half = RawClient(service.path)
    half.sock.sendall(wire.encode_frame({"kind": "call", "id": 1, "method": "ping"})[:20])
    half.close()  # disconnects mid-frame
    broken = RawClient(service.path)
    broken.sock.sendall(b"XXXX" + bytes(40))  # not a frame at all: error reply, then closed
    reply = broken.recv()
    assert reply["ok"] is False and "bad magic" in reply["error"]["message"]
    with pytest.raises(wire.ConnectionClosed):
        broken.recv()
    broken.close()
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        prepared.executeSynchronously(_request(pool))
        np.testing.assert_array_equal(_out(pool), 2 * x)
        pool.close()
        status = dev.service_status()
        assert status["clients"] == 2  # this one and the silent one
    silent.close()


def test_a_protocol_1_0_client_is_still_served(service):
    c = RawClient(service.path)
    body = wire.dumps({"kind": "call", "id": 5, "method": "getVersionString", "args": {}})
    c.sock.sendall(wire.FIXED_HEADER.pack(wire.MAGIC, 1, 0, len(body), 0) + body)
    reply = c.recv()
    assert reply == {"kind": "reply", "id": 5, "ok": True, "result": {"version": "fake-1.0"}}
    c.close()
