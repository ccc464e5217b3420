"""The frame timeout bounds a whole frame: a client dribbling one byte at a time is cut off."""

from __future__ import annotations

import socket
import time

import pytest

from mlts.ipc import wire
from mlts.runtime.process import DriverProcess
from tests.runtime.conftest import fake_spec

FRAME_TIMEOUT = 0.5
BYTE_INTERVAL = 0.1  # well inside the frame timeout, so a per-read timeout never fires


@pytest.fixture
def service(tmp_path):
    proc = DriverProcess.start(
        fake_spec("AddDevice"),
        name="fake-add",
        log_path=str(tmp_path / "svc.log"),
        service_args=["--frame-timeout", str(FRAME_TIMEOUT)],
    )
    yield proc
    proc.kill()


def test_dribbled_frame_is_cut_off_by_the_frame_deadline(service):
    frame = wire.encode_frame({"kind": "call", "id": 1, "method": "ping", "args": {}, "pad": "x" * 64})
    sent = 0
    for byte in frame:
        if wire.wait_readable(service.sock, 0):
            break  # the service answered (or hung up) before the frame was complete
        try:
            service.sock.send(bytes([byte]))
        except OSError:
            break
        sent += 1
        time.sleep(BYTE_INTERVAL)
    assert sent < len(frame), "the service waited for the whole dribbled frame"
    reply = wire.recv_frame(service.sock, lambda partial: None)
    assert reply.message["ok"] is False
    assert "frame not completed within 0.5 s" in reply.message["error"]["message"]
    with pytest.raises(wire.ConnectionClosed):
        wire.recv_frame(service.sock, lambda partial: None)


def test_frame_timer_bounds_the_frame_not_each_read():
    a, b = socket.socketpair()
    try:
        timer = wire.FrameTimer(b, frame_timeout=0.3)
        a.send(wire.encode_frame({"kind": "call", "id": 1})[:5])
        calls = 0
        with pytest.raises(wire.WireError, match="frame not completed within 0.3 s") as info:
            timer(False)  # between frames: returns once bytes are there
            b.recv(5)
            while True:  # every further read of the frame shares one deadline
                calls += 1
                a.send(b"\0")
                timer(True)
                b.recv(1)
                time.sleep(0.05)
        assert info.value.fatal and calls > 1
    finally:
        a.close()
        b.close()
