"""Framing of the driver wire protocol: fixed header, JSON message, raw payload, passed fds.

A frame is `struct "<4sHHII"` (magic b"MLTW", version major, version minor,
header length, payload length), then the message as a UTF-8 JSON object, then
the raw payload. A compact frame (protocol 1.4, magic b"MLTC") carries a binary
message instead of the JSON one (mlts.ipc.compact_calls); peers send it only to
a peer that announced 1.4. File descriptors travel with the frame's first bytes as
SCM_RIGHTS ancillary data. docs/wire-protocol.md is the full specification.

Every size read from the peer is checked against a limit before anything is
allocated, and buffers grow only as bytes actually arrive.
"""

from __future__ import annotations

import array
import json
import math
import mmap
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlts.errors import MltsError
from mlts.hal import procctl
from mlts.ipc.expected_wait import readable_within

MAGIC = b"MLTW"
#: The magic of a compact frame: its message is binary (protocol 1.4, mlts.ipc.compact_calls).
MAGIC_COMPACT = b"MLTC"
PROTOCOL_VERSION = (1, 6)
_MAJOR = PROTOCOL_VERSION[0]
#: The first minor version that has compact frames.
COMPACT_MINOR = 4
#: The first minor version that has mapMemories: its clients send every execution as a compact frame.
BINARY_MINOR = 6
FIXED_HEADER = struct.Struct("<4sHHII")
_FIXED_SIZE = FIXED_HEADER.size
_unpack_fixed = FIXED_HEADER.unpack
MAX_HEADER_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 64 << 20
MAX_FDS = 64

_FD_SIZE = array.array("i").itemsize
_ANC_BUFSIZE = socket.CMSG_SPACE(MAX_FDS * _FD_SIZE)
# A plain int: socket's flag enums make every `&` a Python-level call.
_MSG_CTRUNC = int(socket.MSG_CTRUNC)
_DONTWAIT = int(socket.MSG_DONTWAIT)
# Bodies are read in slices of at most this much, so memory follows real data.
_CHUNK = 1 << 20

#: Waits until the socket is readable; the argument says whether a frame is half read.
Wait = Callable[[bool], None]


class WireError(MltsError):
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


@dataclass(slots=True)
class Frame:
    """One received frame; the receiver owns `fds` and must close them.

    A compact frame has an empty `message` and its binary message in `compact`.
    """

    message: dict[str, Any]
    payload: bytes | memoryview  # a large payload is a view of its own anonymous mapping
    fds: tuple[int, ...]
    minor: int = 0
    compact: bytes | None = None

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
    return frame_bytes(dumps(message), payload)


def frame_bytes(body: bytes, payload: bytes = b"") -> bytes:
    """The bytes of one frame whose message is the JSON text `body`."""
    if len(body) > MAX_HEADER_BYTES:
        raise ValueError(f"message of {len(body)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit")
    major, minor = PROTOCOL_VERSION
    return FIXED_HEADER.pack(MAGIC, major, minor, len(body), len(payload)) + body + bytes(payload)


def compact_frame_bytes(body: bytes) -> bytes:
    """The bytes of one compact frame whose binary message is `body` (no payload)."""
    if len(body) > MAX_HEADER_BYTES:
        raise ValueError(f"message of {len(body)} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    major, minor = PROTOCOL_VERSION
    return FIXED_HEADER.pack(MAGIC_COMPACT, major, minor, len(body), 0) + body


def call_body(msg_id: int, method: str, args: dict[str, Any], encoded: dict[str, bytes]) -> bytes:
    """The JSON text of a call whose arguments are `args` plus members already encoded as JSON text
    (`encoded`, e.g. a request sent again and again: its text is made once)."""
    body = dumps({"kind": "call", "id": msg_id, "method": method, "args": args})
    # "args" is the last member, so its object closes right before the message's end: b"...}}".
    extra = b",".join(dumps({k: None})[1:-5] + v for k, v in encoded.items())  # b'"key":' + text
    return body[:-2] + (b"," if args else b"") + extra + b"}}"


def send_frame(
    sock: socket.socket,
    message: dict[str, Any],
    payload: bytes = b"",
    fds: Sequence[int] = (),
    timeout: float | None = None,
) -> None:
    """Send one frame; `fds` stay owned by the caller (the peer receives duplicates).

    With `timeout` the whole frame must be sent within that many seconds (TimeoutError), whatever
    the socket's own mode; see `send_data`.
    """
    if len(fds) > MAX_FDS:
        raise ValueError(f"{len(fds)} fds in one frame; at most {MAX_FDS} are allowed")
    send_data(sock, encode_frame(message, payload), fds, timeout)


def send_data(
    sock: socket.socket, data: bytes, fds: Sequence[int] = (), timeout: float | None = None
) -> None:
    """Send encoded frame bytes, `fds` with the first byte.

    With `timeout`, each write is non-blocking and the socket is polled for room only when the peer
    is not reading, so a client that stopped reading costs at most `timeout` (TimeoutError) and the
    usual case is one system call.
    """
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    if timeout is None:
        view = memoryview(data)
        sent = sock.sendmsg([view], anc)
        while sent < len(view):
            sent += sock.send(view[sent:])
        return
    sent = 0
    if not anc:
        # The usual case: the whole frame fits in the socket's buffer at once.
        try:
            sent = sock.send(data, _DONTWAIT)
        except BlockingIOError:
            pass
        if sent == len(data):
            return
    view = memoryview(data)
    limit = time.monotonic() + timeout
    poller: select.poll | None = None
    while True:
        try:
            if anc:
                sent += sock.sendmsg([view[sent:]], anc, _DONTWAIT)
                anc = []
            else:
                sent += sock.send(view[sent:], _DONTWAIT)
        except BlockingIOError:
            pass
        if sent >= len(view):
            return
        remaining = limit - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"the peer took no data for {timeout:g} s")
        if poller is None:
            poller = select.poll()
            poller.register(sock, select.POLLOUT)
        poller.poll(max(1, math.ceil(remaining * 1000)))


def wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    """Block until `sock` is readable (or hung up) or `timeout` seconds pass."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return bool(poller.poll(ms))


class Readable:
    """`wait_readable` for one socket, with its poller made once (a hot path polls for every frame);
    a timeout under a millisecond waits with microsecond precision (`select`)."""

    __slots__ = ("_poller", "_fd")

    def __init__(self, sock: socket.socket) -> None:
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._fd = sock.fileno()

    def __call__(self, timeout: float | None) -> bool:
        if timeout is not None and 0 < timeout < 0.001:
            ready = readable_within(self._fd, timeout)
            if ready is not None:
                return ready
            timeout = 0  # beyond select's reach: no sleep, the caller polls on
        ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        return bool(self._poller.poll(ms))


class FrameTimer:
    """A `Wait` for `recv_frame` that bounds each whole frame, not each read.

    Between frames it waits `idle` seconds (None: as long as the peer likes;
    past it, TimeoutError). Once a frame's first bytes have arrived, the rest
    of that frame must arrive within `frame_timeout` seconds in total, so a
    peer that sends one byte at a time cannot hold the reader for longer.
    """

    __slots__ = ("sock", "frame_timeout", "idle", "_deadline", "_readable")

    def __init__(self, sock: socket.socket, frame_timeout: float, idle: float | None = None) -> None:
        self.sock = sock
        self.frame_timeout = frame_timeout
        self.idle = idle
        self._deadline: float | None = None
        self._readable = Readable(sock)

    def __call__(self, partial: bool) -> None:
        if not partial:
            self._deadline = None
            if self.idle is None:
                return  # the read blocks until the peer sends or hangs up: no poll needed first
            if not self._readable(self.idle):
                raise TimeoutError(f"no frame within {self.idle} s")
            return
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.frame_timeout
        remaining = self._deadline - now
        if remaining <= 0 or not self._readable(remaining):
            raise WireError(f"frame not completed within {self.frame_timeout:g} s", fatal=True)


def _fds_of(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % _FD_SIZE
            fds.extend(array.array("i", data[:usable]))
    return fds


def _read_exact(
    sock: socket.socket, n: int, wait: Wait | None, what: str, first: bytes | None = None
) -> bytes | bytearray:
    """`n` bytes of the frame (`first`: those of them read already, fewer than `n`)."""
    if first is not None:
        if not first:
            raise WireError(f"truncated frame: connection closed after 0 of {n} {what} bytes", fatal=True)
        buf = bytearray(first)
    elif wait is not None and 0 < n <= _CHUNK:
        # The usual case: the whole rest of the frame has arrived with its start.
        try:
            first = sock.recv(n, _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            first = None
        except ConnectionResetError:
            first = b""
        if first is not None:
            if len(first) == n:
                return first
            if not first:
                raise WireError(f"truncated frame: connection closed after 0 of {n} {what} bytes", fatal=True)
        buf = bytearray(first or b"")
    else:
        buf = bytearray()
    while len(buf) < n:
        try:
            if wait is None:
                chunk = sock.recv(min(n - len(buf), _CHUNK))
            else:
                # The rest of a frame has usually arrived with its start: read first, wait only if not.
                chunk = sock.recv(min(n - len(buf), _CHUNK), socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            assert wait is not None
            wait(True)
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise WireError(
                f"truncated frame: connection closed after {len(buf)} of {n} {what} bytes",
                fatal=True,
            )
        buf += chunk
    return buf


def _read_mapped(sock: socket.socket, n: int, wait: Wait | None) -> memoryview:
    """`n` bytes into a fresh anonymous mapping (pages are touched only as data arrives); unmapped when
    the returned view and its copies are gone, or at once when the peer stops short."""
    mapping = mmap.mmap(-1, n)
    view = memoryview(mapping)
    got = 0
    try:
        while got < n:
            try:
                k = sock.recv_into(view[got : got + _CHUNK], 0, socket.MSG_DONTWAIT if wait else 0)
            except (BlockingIOError, InterruptedError):
                assert wait is not None
                wait(True)
                continue
            except ConnectionResetError:
                k = 0
            if not k:
                raise WireError(
                    f"truncated frame: connection closed after {got} of {n} payload bytes", fatal=True
                )
            got += k
    except BaseException:
        view.release()
        mapping.close()
        raise
    return view


def compact_id(body: bytes) -> int | None:
    """The call id of a compact message (u32 at offset 4, as mlts.ipc.compact_calls lays it out)."""
    return int.from_bytes(body[4:8], "little") if len(body) >= 8 else None


def recv_frame(sock: socket.socket, wait: Wait | None = None) -> Frame:
    """Receive one frame, checking every limit before reading what it announces.

    Raises ConnectionClosed at a clean end of stream and WireError for a bad
    frame; with `fatal=False` the stream is still in step and may be used.
    """
    fds: list[int] = []
    try:
        truncated_fds = False
        if wait is not None:
            wait(False)
        # The usual case: the whole fixed header in the first read (fds, if any, come with it).
        try:
            data, ancdata, flags, _ = sock.recvmsg(FIXED_HEADER.size, _ANC_BUFSIZE)
        except ConnectionResetError:
            data, ancdata, flags = b"", [], 0
        if len(data) == _FIXED_SIZE and not ancdata and not flags & _MSG_CTRUNC:
            # The usual case of a compact frame: its whole header, no fds, a message and no payload,
            # and (read next, without waiting) the whole message.
            magic, major, minor, header_len, payload_len = _unpack_fixed(data)
            if (
                magic == MAGIC_COMPACT
                and major == _MAJOR
                and not payload_len
                and 0 < header_len <= MAX_HEADER_BYTES
            ):
                first: bytes | None
                try:
                    first = sock.recv(header_len, _DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    first = None
                except ConnectionResetError:
                    first = b""
                if first is not None and len(first) == header_len:
                    return Frame({}, b"", (), minor, first)
                # Not all of it yet (`first` holds what came): the rest as `_read_exact` reads it.
                rest = _read_exact(sock, header_len, wait, "header and payload", first)
                return Frame({}, b"", (), minor, rest if type(rest) is bytes else bytes(rest))
        if ancdata:
            fds.extend(_fds_of(ancdata))
            truncated_fds = bool(flags & _MSG_CTRUNC)
        if not data:
            if fds:
                raise WireError(
                    f"truncated frame: connection closed after 0 of {FIXED_HEADER.size} fixed-header bytes",
                    fatal=True,
                )
            raise ConnectionClosed()
        head: bytes | bytearray = data if len(data) == FIXED_HEADER.size else bytearray(data)
        while len(head) < FIXED_HEADER.size:
            if wait is not None:
                wait(bool(head) or bool(fds))
            try:
                data, ancdata, flags, _ = sock.recvmsg(FIXED_HEADER.size - len(head), _ANC_BUFSIZE)
            except ConnectionResetError:
                # The peer closed with our bytes unread: for this side, an end of stream.
                data, ancdata, flags = b"", [], 0
            fds.extend(_fds_of(ancdata))
            truncated_fds |= bool(flags & _MSG_CTRUNC)
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
        if magic != MAGIC and magic != MAGIC_COMPACT:
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
        payload: bytes | bytearray | memoryview
        if payload_len > _CHUNK:
            # A large payload goes to its own anonymous mapping: its pages are taken as bytes arrive
            # and given back to the system when the frame is dropped, whatever the heap keeps.
            body = _read_exact(sock, header_len, wait, "header") if header_len else b""
            payload = _read_mapped(sock, payload_len, wait)
        else:
            # The message and the payload in one read when they have arrived (they usually have).
            body = _read_exact(sock, header_len + payload_len, wait, "header and payload")
            payload = body[header_len:] if payload_len else b""
        compact = None
        data = body if len(body) == header_len and type(body) is bytes else bytes(body[:header_len])
        if magic == MAGIC_COMPACT:
            message: dict[str, Any] = {}
            compact = data
        else:
            message = loads(data)
        if truncated_fds or len(fds) > MAX_FDS:
            msg_id = message.get("id") if compact is None else compact_id(compact)
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
        kept = payload if isinstance(payload, (bytes, memoryview)) else bytes(payload)
        return Frame(message, kept, tuple(fds), minor, compact)
    except BaseException:
        close_fds(fds)
        raise
