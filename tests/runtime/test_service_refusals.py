"""What a shared service does with a client that keeps being refused: buffer token guesses are slowed
to a trickle and logged in aggregate, and a frame header over the limits closes the connection (after
an error reply), as the limits table says."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from mlts.ipc import wire
from mlts.ipc.service.refusals import GUESS_BURST, GUESS_RATE
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec

GUESSES = GUESS_BURST + 16


@pytest.fixture
def service(tmp_path):
    svc = SharedService.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "svc.log"))
    yield svc
    assert svc.stop() == 0


def _raw(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(path)
    wire.recv_frame(sock)  # the hello
    return sock


def test_token_guesses_are_slowed_and_logged_in_aggregate(service):
    guesser = _raw(service.path)
    other_waits: list[float] = []
    stop = threading.Event()

    def other_client() -> None:
        with service.connect() as device:
            while not stop.is_set():
                t0 = time.perf_counter()
                device.ping()
                other_waits.append(time.perf_counter() - t0)
                time.sleep(0.05)

    thread = threading.Thread(target=other_client)
    thread.start()
    start = time.monotonic()
    for n in range(GUESSES):
        wire.send_frame(
            guesser, {"kind": "call", "id": n, "method": "releaseBuffer", "args": {"token": 1000 + n}}
        )
        reply = wire.recv_frame(guesser).message
        assert reply["ok"] is False and "is not a live buffer of this client" in reply["error"]["message"]
    took = time.monotonic() - start
    stop.set()
    thread.join()
    guesser.close()
    # After the burst, one guess per 1/GUESS_RATE s at most: the service held the guesser back.
    assert took >= (GUESSES - GUESS_BURST) / GUESS_RATE * 0.9
    assert other_waits and max(other_waits) < 1.0  # nobody else waited with it
    deadline = time.monotonic() + 5
    while True:
        with open(service.log_path) as f:
            lines = [line for line in f if "not a live buffer" in line]
        if len(lines) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # The first refusal in full, then one line for all of them when the guesser left.
    assert len(lines) == 2, lines
    assert f"{GUESSES} refusals from pid" in lines[1]


@pytest.mark.parametrize(
    ("header_len", "payload_len", "needle"),
    [(wire.MAX_HEADER_BYTES + 1, 0, "header_len"), (16, wire.MAX_PAYLOAD_BYTES + 1, "payload_len")],
)
def test_a_frame_header_over_the_limits_closes_the_connection(service, header_len, payload_len, needle):
    sock = _raw(service.path)
    sock.sendall(wire.FIXED_HEADER.pack(wire.MAGIC, 1, 5, header_len, payload_len) + b"x" * 64)
    reply = wire.recv_frame(sock).message
    assert reply["ok"] is False and needle in reply["error"]["message"] and reply["id"] is None
    with pytest.raises(wire.ConnectionClosed):  # closed: nothing more is read or answered
        wire.recv_frame(sock)
    sock.close()
    with service.connect() as device:
        device.ping()
