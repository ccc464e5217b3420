"""Framing of the driver wire protocol: fixed header, JSON message, raw payload, passed fds.

A frame is `struct "<4sHHII"` (magic b"MLTW", version major, version minor,
header length, payload length), then the message as a UTF-8 JSON object, then
the raw payload. File descriptors travel with the frame's first bytes as
SCM_RIGHTS ancillary data. docs/wire-protocol.md is the full specification.

Every size read from the peer is checked against a limit before anything is
allocated, and buffers grow only as bytes actually arrive.
"""

from __future__ import annotations

import array
import json
import math
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlts.hal import procctl

MAGIC = b"MLTW"
PROTOCOL_VERSION = (1, 3)
FIXED_HEADER = struct.Struct("<4sHHII")
MAX_HEADER_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 64 << 20
MAX_FDS = 64

_FD_SIZE = array.array("i").itemsize
_ANC_BUFSIZE = socket.CMSG_SPACE(MAX_FDS * _FD_SIZE)
# Bodies are read in slices of at most this much, so memory follows real data.
_CHUNK = 1 << 20

#: Waits until the socket is readable; the argument says whether a frame is half read.
Wait = Callable[[bool], None]


class WireError(Exception):
    """The peer broke the protocol; `fatal` means the stream can no longer be trusted."""

    def __init__(
        self, message: str, *, fatal: bool, msg_id: int | None = None, exhausted: bool = False
    ) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.msg_id = msg_id
        # True when this side ran out of a resource (file descriptors), not the peer's fault.
        self.exhausted = exhausted


class ConnectionClosed(WireError):
    """The peer closed the connection between two frames."""

    def __init__(self) -> None:
        super().__init__("connection closed", fatal=True)


@dataclass(frozen=True, slots=True)
class Frame:
    """One received frame; the receiver owns `fds` and must close them."""

    message: dict[str, Any]
    payload: bytes
    fds: tuple[int, ...]
    minor: int = 0

    def close_fds(self) -> None:
        """Close every fd that came with the frame."""
        close_fds(self.fds)


def close_fds(fds: Sequence[int]) -> None:
    """Close fds, ignoring ones already closed."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def dumps(message: dict[str, Any]) -> bytes:
    """The UTF-8 JSON of one message (NaN and infinities are refused)."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")


def loads(data: bytes) -> dict[str, Any]:
    """Parse a message; any defect is a non-fatal WireError."""
    try:
        message = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise WireError(f"message is not valid UTF-8 JSON: {e}", fatal=False) from None
    if not isinstance(message, dict):
        raise WireError(f"message must be a JSON object, got {type(message).__name__}", fatal=False)
    return message


def encode_frame(message: dict[str, Any], payload: bytes = b"") -> bytes:
    """The bytes of one frame."""
    body = dumps(message)
    if len(body) > MAX_HEADER_BYTES:
        raise ValueError(f"message of {len(body)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit")
    major, minor = PROTOCOL_VERSION
    return FIXED_HEADER.pack(MAGIC, major, minor, len(body), len(payload)) + body + bytes(payload)


def send_frame(
    sock: socket.socket, message: dict[str, Any], payload: bytes = b"", fds: Sequence[int] = ()
) -> None:
    """Send one frame; `fds` stay owned by the caller (the peer receives duplicates)."""
    if len(fds) > MAX_FDS:
        raise ValueError(f"{len(fds)} fds in one frame; at most {MAX_FDS} are allowed")
    data = memoryview(encode_frame(message, payload))
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([data], anc)
    while sent < len(data):
        sent += sock.send(data[sent:])


def wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    """Block until `sock` is readable (or hung up) or `timeout` seconds pass."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return bool(poller.poll(ms))


class FrameTimer:
    """A `Wait` for `recv_frame` that bounds each whole frame, not each read.

    Between frames it waits `idle` seconds (None: as long as the peer likes;
    past it, TimeoutError). Once a frame's first bytes have arrived, the rest
    of that frame must arrive within `frame_timeout` seconds in total, so a
    peer that sends one byte at a time cannot hold the reader for longer.
    """

    __slots__ = ("sock", "frame_timeout", "idle", "_deadline")

    def __init__(self, sock: socket.socket, frame_timeout: float, idle: float | None = None) -> None:
        self.sock = sock
        self.frame_timeout = frame_timeout
        self.idle = idle
        self._deadline: float | None = None

    def __call__(self, partial: bool) -> None:
        if not partial:
            self._deadline = None
            if not wait_readable(self.sock, self.idle):
                raise TimeoutError(f"no frame within {self.idle} s")
            return
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.frame_timeout
        remaining = self._deadline - now
        if remaining <= 0 or not wait_readable(self.sock, remaining):
            raise WireError(f"frame not completed within {self.frame_timeout:g} s", fatal=True)


def _fds_of(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % _FD_SIZE
            fds.extend(array.array("i", data[:usable]))
    return fds


def _read_exact(sock: socket.socket, n: int, wait: Wait | None, what: str) -> bytearray:
    buf = bytearray()
    while len(buf) < n:
        if wait is not None:
            wait(True)
        try:
            chunk = sock.recv(min(n - len(buf), _CHUNK))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise WireError(
                f"truncated frame: connection closed after {len(buf)} of {n} {what} bytes",
                fatal=True,
            )
        buf += chunk
    return buf


def recv_frame(sock: socket.socket, wait: Wait | None = None) -> Frame:
    """Receive one frame, checking every limit before reading what it announces.

    Raises ConnectionClosed at a clean end of stream and WireError for a bad
    frame; with `fatal=False` the stream is still in step and may be used.
    """
    fds: list[int] = []
    try:
        head = bytearray()
        truncated_fds = False
        while len(head) < FIXED_HEADER.size:
            if wait is not None:
                wait(bool(head) or bool(fds))
            try:
                data, ancdata, flags, _ = sock.recvmsg(FIXED_HEADER.size - len(head), _ANC_BUFSIZE)
            except ConnectionResetError:
                # The peer closed with our bytes unread: for this side, an end of stream.
                data, ancdata, flags = b"", [], 0
            fds.extend(_fds_of(ancdata))
            truncated_fds |= bool(flags & socket.MSG_CTRUNC)
            if not data:
                if head or fds:
                    raise WireError(
                        f"truncated frame: connection closed after {len(head)} of "
                        f"{FIXED_HEADER.size} fixed-header bytes",
                        fatal=True,
                    )
                raise ConnectionClosed()
            head += data
        magic, major, minor, header_len, payload_len = FIXED_HEADER.unpack(head)
        if magic != MAGIC:
            raise WireError(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}", fatal=True)
        if major != PROTOCOL_VERSION[0]:
            raise WireError(
                f"protocol version {major}.{minor} is not supported; this side speaks "
                f"{PROTOCOL_VERSION[0]}.x",
                fatal=True,
            )
        if header_len > MAX_HEADER_BYTES:
            raise WireError(
                f"header_len {header_len} exceeds the limit of {MAX_HEADER_BYTES} bytes", fatal=True
            )
        if payload_len > MAX_PAYLOAD_BYTES:
            raise WireError(
                f"payload_len {payload_len} exceeds the limit of {MAX_PAYLOAD_BYTES} bytes", fatal=True
            )
        header = _read_exact(sock, header_len, wait, "header")
        payload = _read_exact(sock, payload_len, wait, "payload")
        message = loads(bytes(header))
        if truncated_fds or len(fds) > MAX_FDS:
            msg_id = message.get("id")
            # Close what arrived first: they count against the limit being asked about.
            close_fds(fds)
            fds = []
            exhausted = procctl.fds_nearly_exhausted(MAX_FDS)
            if exhausted:
                # The kernel drops SCM_RIGHTS fds it cannot install: say what ran out.
                text = (
                    f"file descriptors of the frame were dropped: this process ran out of file "
                    f"descriptors ({procctl.describe_fd_exhaustion()})"
                )
            else:
                text = f"too many file descriptors in one frame; at most {MAX_FDS} are allowed"
            raise WireError(
                text, fatal=False, msg_id=msg_id if type(msg_id) is int else None, exhausted=exhausted
            )
        return Frame(message, bytes(payload), tuple(fds), minor)
    except BaseException:
        close_fds(fds)
        raise
