"""Framing: round trips with fds, and every limit checked before allocation."""

from __future__ import annotations

import json
import os
import socket

import pytest

from mlts.ipc import wire


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def _frame(
    magic=b"MLTW", major=1, minor=0, header=b"{}", payload=b"", header_len=None, payload_len=None
) -> bytes:
    hl = len(header) if header_len is None else header_len
    pl = len(payload) if payload_len is None else payload_len
    return wire.FIXED_HEADER.pack(magic, major, minor, hl, pl) + header + payload


def test_round_trip_with_payload_and_fds(pair):
    a, b = pair
    r, w = os.pipe()
    try:
        wire.send_frame(a, {"kind": "call", "id": 7, "args": {"x": [1, 2.5, "é"]}}, b"\x00\x01raw", [w])
        frame = wire.recv_frame(b)
        assert frame.message == {"kind": "call", "id": 7, "args": {"x": [1, 2.5, "é"]}}
        assert frame.payload == b"\x00\x01raw"
        assert len(frame.fds) == 1
        os.write(frame.fds[0], b"hi")  # the received fd is a working duplicate of w
        assert os.read(r, 2) == b"hi"
        frame.close_fds()
    finally:
        os.close(r)
        os.close(w)


def test_large_payload_round_trip(pair):
    a, b = pair
    payload = bytes(range(256)) * 8192  # 2 MiB: more than one socket buffer
    import threading

    t = threading.Thread(target=wire.send_frame, args=(a, {"k": 1}, payload))
    t.start()
    frame = wire.recv_frame(b)
    t.join()
    assert frame.payload == payload


def test_fixed_header_layout():
    data = wire.encode_frame({"a": 1}, b"xy")
    magic, major, minor, hl, pl = wire.FIXED_HEADER.unpack_from(data)
    assert (magic, major, minor, hl, pl) == (b"MLTW", 1, 6, len(b'{"a":1}'), 2)
    assert wire.FIXED_HEADER.size == 16


@pytest.mark.parametrize(
    "data, fatal, text",
    [
        (_frame(magic=b"XXXX"), True, "bad magic"),
        (_frame(major=2), True, "version 2.0 is not supported"),
        (_frame(header_len=2**31), True, "header_len 2147483648 exceeds"),
        (_frame(payload_len=wire.MAX_PAYLOAD_BYTES + 1), True, "payload_len"),
        (_frame(header=b"[1, 2]"), False, "must be a JSON object"),
        (_frame(header=b"{bad json"), False, "not valid UTF-8 JSON"),
        (_frame(header=b"\xff\xfe{}"), False, "not valid UTF-8 JSON"),
        (_frame(header=b'{"x": NaN}'), False, "NaN is not valid JSON"),
        (_frame(header=b"[" * 100000 + b"]" * 100000), False, "not valid UTF-8 JSON"),
    ],
)
def test_bad_frames(pair, data, fatal, text):
    a, b = pair
    a.sendall(data)
    with pytest.raises(wire.WireError, match=text) as info:
        wire.recv_frame(b)
    assert info.value.fatal is fatal


def test_truncated_frame_and_clean_close(pair):
    a, b = pair
    a.sendall(_frame(header=b'{"a": 1}')[:20])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(wire.WireError, match="truncated frame") as info:
        wire.recv_frame(b)
    assert info.value.fatal and not isinstance(info.value, wire.ConnectionClosed)
    with pytest.raises(wire.ConnectionClosed):
        wire.recv_frame(b)


def test_too_many_fds_is_recoverable(pair):
    a, b = pair
    r, w = os.pipe()
    try:
        fds = [r] * (wire.MAX_FDS + 6)
        data = _frame(header=json.dumps({"id": 3}).encode())
        a.sendmsg(
            [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(__import__("array").array("i", fds)))]
        )
        before = len(os.listdir("/proc/self/fd"))
        with pytest.raises(wire.WireError, match="too many file descriptors") as info:
            wire.recv_frame(b)
        assert not info.value.fatal and info.value.msg_id == 3
        assert len(os.listdir("/proc/self/fd")) == before  # received fds were closed
        wire.send_frame(a, {"next": True})
        assert wire.recv_frame(b).message == {"next": True}
    finally:
        os.close(r)
        os.close(w)


def test_sender_refuses_oversized_messages(pair):
    a, _ = pair
    with pytest.raises(ValueError, match="exceeds"):
        wire.send_frame(a, {"x": "y" * wire.MAX_HEADER_BYTES})
    with pytest.raises(ValueError, match="at most 64"):
        wire.send_frame(a, {}, fds=[0] * 65)


@pytest.mark.parametrize("split", [16, 17, 30])
def test_a_compact_frame_whose_message_comes_late_or_in_pieces(pair, split):
    """A compact frame's message read after its header, whether it arrives with it, later, or in parts;
    the reader's wait is told that a frame is half read."""
    a, b = pair
    body = bytes(range(40))
    data = wire.compact_frame_bytes(body) + wire.compact_frame_bytes(b"next")
    a.sendall(data[:split])
    waits: list[bool] = []

    def wait(partial: bool) -> None:
        waits.append(partial)
        if partial and len(waits) == 2:
            a.sendall(data[split:])

    frame = wire.recv_frame(b, wait)
    assert frame.compact == body and frame.message == {} and frame.payload == b"" and frame.fds == ()
    assert frame.minor == wire.PROTOCOL_VERSION[1]
    assert waits == [False, True]
    assert wire.recv_frame(b, wait).compact == b"next"  # the stream is still in step


@pytest.mark.parametrize("wait", [None, lambda partial: None])
def test_a_compact_frame_cut_short_is_truncated(pair, wait):
    a, b = pair
    a.sendall(wire.compact_frame_bytes(b"x" * 40)[:30])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(wire.WireError, match="truncated frame: connection closed after 14 of 40") as info:
        wire.recv_frame(b, wait)
    assert info.value.fatal
