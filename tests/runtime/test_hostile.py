"""Hostile frames sent straight to a running service: error replies or a closed connection, never a crash."""

from __future__ import annotations

import array
import os
import socket
import struct

import pytest

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.memory import SharedMemory
from mlts.ipc import wire
from mlts.runtime.process import DriverProcess
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model


@pytest.fixture
def service(tmp_path):
    proc = DriverProcess.start(
        fake_spec("AddDevice"),
        name="fake-add",
        log_path=str(tmp_path / "svc.log"),
        service_args=["--frame-timeout", "0.5"],
    )
    yield proc
    proc.kill()


def _reply(proc: DriverProcess) -> dict:
    def wait(partial: bool) -> None:
        if not wire.wait_readable(proc.sock, 5.0):
            raise AssertionError("the service did not answer within 5 s")

    frame = wire.recv_frame(proc.sock, wait)
    frame.close_fds()
    return frame.message


def _call(proc, method, args=None, fds=(), msg_id=1) -> dict:
    wire.send_frame(proc.sock, {"kind": "call", "id": msg_id, "method": method, "args": args or {}}, fds=fds)
    reply = _reply(proc)
    assert reply["kind"] == "reply" and reply["id"] == msg_id
    return reply


def _error(reply: dict) -> tuple[ErrorStatus, str]:
    assert reply["ok"] is False, reply
    return ErrorStatus(reply["error"]["status"]), reply["error"]["message"]


def _raw(fields=(b"MLTW", 1, 0), header: bytes = b"{}", header_len=None, payload_len=0) -> bytes:
    hl = len(header) if header_len is None else header_len
    return wire.FIXED_HEADER.pack(*fields, hl, payload_len) + header


def _no_traceback(proc: DriverProcess) -> None:
    with open(proc.log_path) as f:
        assert "Traceback" not in f.read()


def test_recoverable_garbage_gets_error_replies_and_service_survives(service):
    sock = service.sock
    # Non-object JSON, broken JSON, not UTF-8: no id can be read, so the reply's id is null.
    for header, text in (
        (b"[1, 2]", "must be a JSON object"),
        (b"{nope", "not valid UTF-8 JSON"),
        (b"\xff{}", "UTF-8"),
    ):
        sock.sendall(_raw(header=header))
        reply = _reply(service)
        assert reply["id"] is None
        status, message = _error(reply)
        assert status == ErrorStatus.INVALID_ARGUMENT and text in message
    # Calls malformed at the message level.
    for message, text in (
        ({"kind": "call", "method": "ping"}, "call id must be an integer"),
        ({"kind": "call", "id": True, "method": "ping"}, "call id must be an integer"),
        ({"kind": "reply", "id": 4}, "expected 'call'"),
        ({"kind": "call", "id": 5, "method": 42}, "method must be a string"),
        ({"kind": "call", "id": 6, "method": "ping", "args": [1]}, "args must be a JSON object"),
    ):
        wire.send_frame(sock, message)
        assert text in _error(_reply(service))[1]
    assert _call(service, "ping")["ok"] is True
    assert service.alive()
    _no_traceback(service)


def test_bad_arguments_are_rejected(service):
    cases = [
        ("releasePreparedModel", {"prepared": "x"}, "argument 'prepared' must be int, got str"),
        ("releasePreparedModel", {"prepared": True}, "must be int, got bool"),
        ("releasePreparedModel", {"prepared": 12345}, "unknown prepared model handle 12345"),
        ("releasePreparedModel", {}, "missing argument 'prepared'"),
        ("executeSynchronously", {"prepared": 1, "request": 5}, "argument 'request' must be dict"),
        (
            "executeSynchronously",
            {"prepared": 99, "request": {"inputs": [], "outputs": [], "pools": []}},
            "unknown prepared model handle 99",
        ),
        ("executeSynchronously", {"prepared": 1, "request": {"pools": [{"memory": 7}]}}, "memory id 7"),
        (
            "executeSynchronously",
            {"prepared": 1, "request": {"pools": [{"fd": 0, "size": 8}]}},
            "frame carries 0 fds",
        ),
        ("getSupportedOperations", {"model": {"fd": 3, "size": 10}}, "refers to fd 3"),
        ("getSupportedOperations", {"model": "abc"}, "argument 'model' must be dict"),
        (
            "prepareModel",
            {"model": {"fd": 0, "size": 1}, "preference": 9},
            "preference=9 is not a valid ExecutionPreference",
        ),
        ("prepareModel", {"model": {"fd": 0, "size": 1}, "token": "zz"}, "token must be 64 hex digits"),
        ("prepareModel", {"model": {"fd": 0, "size": 1}, "deadline": -1}, "deadline=-1"),
        ("freeMemory", {"ids": ["a"]}, "'ids' must hold integers"),
    ]
    for n, (method, args, text) in enumerate(cases):
        status, message = _error(_call(service, method, args, msg_id=100 + n))
        assert status == ErrorStatus.INVALID_ARGUMENT, (method, message)
        assert text in message, (text, message)
    assert service.alive()
    _no_traceback(service)


def test_unknown_and_reserved_methods(service):
    for method in ("format_disk", "burstExecute"):
        status, message = _error(_call(service, method))
        assert status == ErrorStatus.GENERAL_FAILURE and "not implemented" in message
    # allocate is served (memory domains): without arguments it is invalid, not unknown.
    status, message = _error(_call(service, "allocate"))
    assert status == ErrorStatus.INVALID_ARGUMENT and "desc" in message
    assert service.alive()


def test_hostile_memories(service):
    fd_count = len(os.listdir("/proc/self/fd"))
    # An fd whose claimed size exceeds its memfd.
    small = SharedMemory.frozen(bytes(100))
    status, message = _error(
        _call(service, "getSupportedOperations", {"model": {"fd": 0, "size": 1 << 20}}, [small.fd])
    )
    assert (
        status == ErrorStatus.INVALID_ARGUMENT and "claims 1048576 bytes but its memory holds 100" in message
    )
    # An fd that is not a memfd at all.
    r, w = os.pipe()
    status, _ = _error(_call(service, "getSupportedOperations", {"model": {"fd": 0, "size": 10}}, [r]))
    assert status == ErrorStatus.INVALID_ARGUMENT
    os.close(r)
    os.close(w)
    # Garbage model bytes, then a bit-flipped real model.
    status, message = _error(
        _call(service, "getSupportedOperations", {"model": {"fd": 0, "size": 100}}, [small.fd])
    )
    assert status == ErrorStatus.INVALID_ARGUMENT and "model" in message
    data = bytearray(nnfile.encode(add_model()))
    data[40] ^= 0xFF
    corrupt = SharedMemory.frozen(data)
    status, message = _error(
        _call(service, "prepareModel", {"model": {"fd": 0, "size": len(data)}}, [corrupt.fd])
    )
    assert status == ErrorStatus.INVALID_ARGUMENT
    # The same fd referenced twice in one call.
    args = {"model": {"fd": 0, "size": 1}, "model_cache": [0]}
    assert "reuses fd 0" in _error(_call(service, "prepareModel", args, [small.fd]))[1]
    small.close()
    corrupt.close()
    assert len(os.listdir("/proc/self/fd")) == fd_count
    assert service.alive()


def test_requests_are_validated_against_the_model(service):
    model = add_model()
    data = nnfile.encode(model)
    mem = SharedMemory.frozen(data)
    prepared = _call(service, "prepareModel", {"model": {"fd": 0, "size": len(data)}}, [mem.fd])["result"][
        "prepared"
    ]
    pool = SharedMemory.create(64)
    arg = {"hasNoValue": False, "location": {"poolIndex": 0, "offset": 0, "length": 24}, "dimensions": [2, 3]}
    outside = {**arg, "location": {"poolIndex": 0, "offset": 48, "length": 24}}
    request = {"inputs": [arg, arg], "outputs": [outside], "pools": [{"memory": 1, "fd": 0, "size": 64}]}
    status, _ = _error(
        _call(service, "executeSynchronously", {"prepared": prepared, "request": request}, [pool.fd])
    )
    assert status == ErrorStatus.INVALID_ARGUMENT
    # The pool was cached even though the call failed; later calls may name it by id alone.
    request = {"inputs": [arg, arg], "outputs": [arg], "pools": [{"memory": 1}]}
    reply = _call(service, "executeSynchronously", {"prepared": prepared, "request": request})
    assert reply["ok"] is True and reply["result"]["outputShapes"][0]["dimensions"] == [2, 3]
    assert _call(service, "freeMemory", {"ids": [1, 2]})["result"] == {"freed": 1}
    assert _call(service, "releasePreparedModel", {"prepared": prepared})["ok"] is True
    mem.close()
    pool.close()


def test_too_many_fds_keeps_the_connection(service):
    r, w = os.pipe()
    data = wire.encode_frame({"kind": "call", "id": 9, "method": "ping", "args": {}})
    service.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r] * 80))])
    reply = _reply(service)
    assert reply["id"] == 9 and "too many file descriptors" in _error(reply)[1]
    os.close(r)
    os.close(w)
    assert _call(service, "ping")["ok"] is True


@pytest.mark.parametrize(
    "data, text",
    [
        (bytes.fromhex("5b17c3e0a9d24f") + b"\x00" * 40, "bad magic"),
        (_raw((b"ABCD", 1, 0)), "bad magic"),
        (_raw((b"MLTW", 7, 0)), "version 7.0 is not supported"),
        (_raw(header_len=2**31), "header_len 2147483648 exceeds"),
        (_raw(payload_len=2**32 - 1), "payload_len 4294967295 exceeds"),
        (_raw(header=b'{"kind": "call"}', header_len=100), "frame not completed within 0.5 s"),
        (struct.pack("<4sH", b"MLTW", 1), "frame not completed within 0.5 s"),
    ],
)
def test_unrecoverable_frames_close_the_connection_cleanly(service, data, text):
    service.sock.sendall(data)
    reply = _reply(service)
    assert reply["id"] is None and text in _error(reply)[1]
    with pytest.raises(wire.ConnectionClosed):
        _reply(service)
    assert service.wait(5) and service.returncode == 0
    with open(service.log_path) as f:
        log = f.read()
    assert text in log and "Traceback" not in log


def test_truncated_frame_then_eof(service):
    service.sock.sendall(_raw(header=b'{"kind": "call"}')[:20])
    service.sock.shutdown(socket.SHUT_WR)
    assert service.wait(5) and service.returncode == 0
    _no_traceback(service)
