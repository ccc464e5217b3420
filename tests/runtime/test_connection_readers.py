"""Threads sharing one service connection: who reads the socket.

The reader hands the reading over to a waiter whose call has a higher priority, so a HIGH
execution's reply is read by its own thread; waiters of the reader's priority leave it reading. The
service end is scripted over a socket pair, so every frame comes exactly when the test says.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from mlts.ipc import wire
from mlts.runtime.connection import ServiceConnection


class _Endpoint:
    name = "scripted"

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def alive(self) -> bool:
        return True

    def stop_for_hang(self) -> str:
        return "stopped"

    def death_message(self, method: str) -> str:
        return f"the scripted service went away during {method}"

    def close_socket(self) -> None:
        self.sock.close()


@pytest.fixture
def pair():
    client, service = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    conn = ServiceConnection(_Endpoint(client))
    readers: list[tuple[str, object]] = []  # (thread name, message id) of each frame read
    dispatch = conn._dispatch

    def recording(frame: wire.Frame) -> None:
        readers.append((threading.current_thread().name, frame.message.get("id")))
        dispatch(frame)

    conn._dispatch = recording  # type: ignore[method-assign]
    yield conn, service, readers
    conn.close("test over")
    service.close()


def _until(condition, what: str) -> None:
    limit = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < limit, f"timed out waiting until {what}"
        time.sleep(0.001)


def _caller(conn: ServiceConnection, name: str, priority: int, replies: dict) -> threading.Thread:
    slot = conn.send("executeSynchronously", {"who": name})
    slot.priority = priority

    def wait() -> None:
        replies[name] = conn.wait_reply(slot, 10)["result"]

    thread = threading.Thread(target=wait, name=name)
    thread.slot = slot  # type: ignore[attr-defined]
    thread.start()
    return thread


def _reply(service: socket.socket, slot, result: object) -> None:
    wire.send_frame(service, {"kind": "reply", "id": slot.id, "ok": True, "result": result})


def _notify_nobody(service: socket.socket) -> None:
    wire.send_frame(service, {"kind": "notify", "event": "executionComplete", "id": 10_000})


def test_a_high_priority_waiter_takes_the_reading_over_and_reads_its_own_reply(pair):
    conn, service, readers = pair
    replies: dict[str, object] = {}
    low = _caller(conn, "low", 0, replies)
    _until(lambda: conn._reading, "the LOW caller reads")
    high = _caller(conn, "high", 2, replies)
    _until(lambda: conn._waiters == 1, "the HIGH caller waits")
    _notify_nobody(service)  # the reader hands over after this frame
    _until(lambda: conn._reading and conn._reader_priority == 2, "the HIGH caller reads")
    _reply(service, high.slot, "for high")
    high.join(10)
    _reply(service, low.slot, "for low")
    low.join(10)
    assert replies == {"high": "for high", "low": "for low"}
    assert readers == [("low", 10_000), ("high", high.slot.id), ("low", low.slot.id)]


def test_waiters_of_the_readers_priority_leave_it_reading(pair):
    conn, service, readers = pair
    replies: dict[str, object] = {}
    first = _caller(conn, "first", 1, replies)
    _until(lambda: conn._reading, "the first caller reads")
    second = _caller(conn, "second", 1, replies)
    _until(lambda: conn._waiters == 1, "the second caller waits")
    _notify_nobody(service)
    _reply(service, second.slot, "two")
    second.join(10)
    _reply(service, first.slot, "one")
    first.join(10)
    assert replies == {"first": "one", "second": "two"}
    assert readers == [("first", 10_000), ("first", second.slot.id), ("first", first.slot.id)]


def test_a_lower_priority_waiter_reads_on_once_the_higher_one_is_answered(pair):
    conn, service, readers = pair
    replies: dict[str, object] = {}
    high = _caller(conn, "high", 2, replies)
    _until(lambda: conn._reading, "the HIGH caller reads")
    low = _caller(conn, "low", 0, replies)
    _until(lambda: conn._waiters == 1, "the LOW caller waits")
    _notify_nobody(service)  # no hand-over: the waiter's priority is lower
    _reply(service, high.slot, "h")
    high.join(10)
    _until(lambda: conn._reading and conn._reader_priority == 0, "the LOW caller reads")
    _reply(service, low.slot, "l")
    low.join(10)
    assert replies == {"high": "h", "low": "l"}
    assert readers == [("high", 10_000), ("high", high.slot.id), ("low", low.slot.id)]
