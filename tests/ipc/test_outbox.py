"""The per-connection outbox: sends never wait for the client; a client that does not read is dropped."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from mlts.ipc import wire
from mlts.ipc.service.outbox import Outbox


def _pair(buffer: int = 4096) -> tuple[socket.socket, socket.socket]:
    service, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for s in (service, client):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    return service, client


class Drops:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.event = threading.Event()

    def __call__(self, why: str) -> None:
        self.reasons.append(why)
        self.event.set()


def _frames(n: int, size: int = 1000) -> list[bytes]:
    return [wire.encode_frame({"kind": "reply", "id": k, "pad": "x" * size}) for k in range(n)]


def _read_all(sock: socket.socket, count: int) -> list[wire.Frame]:
    sock.settimeout(5.0)
    return [wire.recv_frame(sock) for _ in range(count)]


def test_posts_never_block_and_arrive_in_order_once_the_client_reads():
    service, client = _pair()
    drops = Drops()
    box = Outbox(service, stall_timeout=30.0, on_drop=drops, max_bytes=1 << 20)
    frames = _frames(200)
    start = time.monotonic()
    for data in frames:
        assert box.post(data)  # far more than the socket holds: the rest waits in the queue
    assert time.monotonic() - start < 2.0
    assert box.queued > 0
    got = _read_all(client, len(frames))
    assert [f.message["id"] for f in got] == list(range(200))
    assert not drops.reasons
    box.close()
    service.close()
    client.close()


def test_a_client_over_its_queue_bound_is_dropped_at_once():
    service, client = _pair()
    drops = Drops()
    box = Outbox(service, stall_timeout=30.0, on_drop=drops, max_bytes=64 << 10)
    posted = 0
    start = time.monotonic()
    for data in _frames(500):
        if not box.post(data):
            break
        posted += 1
    assert time.monotonic() - start < 2.0  # dropped, never waited on
    assert box.closed and box.dropped is not None and "does not read its replies" in box.dropped
    assert drops.reasons == [box.dropped]
    assert 0 < posted < 500
    assert box.queued == 0
    assert not box.post(b"more")  # and nothing more is taken
    service.close()
    client.close()


def test_a_client_that_takes_nothing_within_the_stall_timeout_is_dropped():
    service, client = _pair()
    drops = Drops()
    box = Outbox(service, stall_timeout=0.3, on_drop=drops, max_bytes=1 << 20)
    for data in _frames(100):
        assert box.post(data)
    assert drops.event.wait(10.0)
    assert "took no data for 0.3 s" in drops.reasons[0]
    assert box.wait_for_room() is False  # the reader learns the connection is gone
    service.close()
    client.close()


def test_file_descriptors_of_a_queued_frame_travel_with_it():
    service, client = _pair()
    box = Outbox(service, stall_timeout=30.0, on_drop=Drops(), max_bytes=1 << 20)
    for data in _frames(50):
        box.post(data)
    r, w = os.pipe()
    os.write(w, b"fence")
    assert box.post(wire.encode_frame({"kind": "reply", "id": 999}), [r])
    os.close(r)  # the caller's copy goes at once: the queue holds its own
    os.close(w)
    frames = _read_all(client, 51)
    last = frames[-1]
    assert last.message["id"] == 999 and len(last.fds) == 1
    assert os.read(last.fds[0], 5) == b"fence"
    last.close_fds()
    box.close()
    service.close()
    client.close()


def test_the_reader_waits_for_room_until_the_client_reads():
    service, client = _pair()
    box = Outbox(service, stall_timeout=30.0, on_drop=Drops(), max_bytes=1 << 20, pause_bytes=8 << 10)
    for data in _frames(100):
        box.post(data)
    assert box.wait_for_room(timeout=0.05) is False  # more than pause_bytes wait
    reader = threading.Thread(target=_read_all, args=(client, 100))
    reader.start()
    assert box.wait_for_room(timeout=10.0) is True
    reader.join()
    box.close()
    service.close()
    client.close()


def test_closing_discards_what_waits_and_closes_its_descriptors():
    service, client = _pair()
    box = Outbox(service, stall_timeout=30.0, on_drop=Drops(), max_bytes=1 << 20)
    for data in _frames(50):
        box.post(data)
    r, w = os.pipe()
    box.post(wire.encode_frame({"kind": "reply", "id": 1}), [r])
    os.close(r)
    box.close()
    assert box.queued == 0 and not box.post(b"x")
    # The duplicate of the read end is gone: the pipe has no reader left.
    with pytest.raises(BrokenPipeError):
        os.write(w, b"x")
    os.close(w)
    service.close()
    client.close()
