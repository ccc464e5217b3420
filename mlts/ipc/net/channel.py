"""One network connection: its TLS (or plaintext) stream, read as whole frames and written whole.

TLS runs over memory buffers (ssl.MemoryBIO), so this module owns every read and write of the TCP
socket: a reader thread and writer threads never share OpenSSL's state except under a lock held
for the CPU work alone, never while the socket waits. Reading is bounded as on a Unix socket: the
fixed header and every limit are checked before anything is allocated (wire's limits), the buffer
grows only as bytes arrive, and a started frame must be complete within the frame timeout. Writing
gives up when the peer takes nothing for the write timeout.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mlts.ipc import wire

_CHUNK = 1 << 20
_SEND_SLICE = 256 << 10
#: Seconds a TLS handshake (and a client's hello) may take.
HANDSHAKE_TIMEOUT = 10.0
#: The first byte of every TLS record of a handshake (ContentType handshake).
TLS_HANDSHAKE_BYTE = 0x16


class HandshakeError(Exception):
    """The TLS handshake failed; `message` is one line for the other side's user or the log."""


@dataclass(slots=True)
class NetFrame:
    """One frame read from the network: its message bytes (JSON or compact) and its payload."""

    magic: bytes
    minor: int
    body: bytes
    payload: bytes | bytearray | memoryview

    @property
    def compact(self) -> bool:
        return self.magic == wire.MAGIC_COMPACT

    def local_bytes(self) -> bytes:
        """The frame as a local socket carries it: the same message, no payload."""
        major = wire.PROTOCOL_VERSION[0]
        return wire.FIXED_HEADER.pack(self.magic, major, self.minor, len(self.body), 0) + self.body


def frame_parts(
    body: bytes, payload: Sequence[bytes | bytearray | memoryview] = (), *, compact: bool = False
) -> list[bytes | bytearray | memoryview]:
    """The parts of one frame (fixed header, message, payload parts), for `Channel.send`."""
    size = sum(len(p) for p in payload)
    if len(body) > wire.MAX_HEADER_BYTES or size > wire.MAX_PAYLOAD_BYTES:
        raise ValueError(f"a frame of {len(body)} + {size} bytes exceeds the limits")
    major, minor = wire.PROTOCOL_VERSION
    magic = wire.MAGIC_COMPACT if compact else wire.MAGIC
    return [wire.FIXED_HEADER.pack(magic, major, minor, len(body), size), body, *payload]


class Channel:
    """A connected TCP socket, with TLS over memory buffers or plaintext; one reader, many writers."""

    def __init__(self, sock: socket.socket, sslobj: ssl.SSLObject | None = None) -> None:
        self.sock = sock
        self.ssl = sslobj
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl_lock = threading.Lock()  # OpenSSL's state: held for CPU work only
        self._write_lock = threading.Lock()  # whole frames, in order
        self._plain = bytearray()
        self._eof = False
        self.closed = False
        sock.setblocking(False)
        self._poll_in = select.poll()
        self._poll_in.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._poll_out = select.poll()
        self._poll_out.register(sock, select.POLLOUT | select.POLLHUP | select.POLLERR)
        try:
            peer = sock.getpeername()
            host = f"[{peer[0]}]" if ":" in peer[0] else peer[0]
            self.peer_address = f"{host}:{peer[1]}"
            self.peer_host = str(peer[0])
        except (OSError, IndexError):
            self.peer_address = self.peer_host = "unknown"

    # ------------------------------------------------------------ setting up

    @classmethod
    def tls(
        cls, sock: socket.socket, context: ssl.SSLContext, *, server: bool, hostname: str | None = None
    ) -> Channel:
        """Wrap `sock` and run the TLS handshake (within HANDSHAKE_TIMEOUT); HandshakeError on failure."""
        channel = cls(sock)
        sslobj = context.wrap_bio(channel._in, channel._out, server_side=server, server_hostname=hostname)
        channel.ssl = sslobj
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        try:
            while True:
                try:
                    sslobj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    channel._flush_tls(deadline)
                    raw = channel._recv_raw(deadline)
                    if not raw:
                        raise HandshakeError(
                            "the peer closed the connection during the TLS handshake"
                        ) from None
                    channel._in.write(raw)
            channel._flush_tls(deadline)
        except ssl.SSLCertVerificationError as e:
            channel._send_alert()
            raise HandshakeError(f"certificate not accepted: {e.verify_message or e.reason}") from None
        except ssl.SSLError as e:
            channel._send_alert()
            raise HandshakeError(f"TLS handshake failed: {e.reason or e}") from None
        except (TimeoutError, OSError) as e:
            raise HandshakeError(f"TLS handshake failed: {e}") from None
        return channel

    def _send_alert(self) -> None:
        """Send the alert OpenSSL wrote for a failed handshake, so the peer learns why (best effort)."""
        try:
            with self._ssl_lock:
                data = self._out.read() if self._out.pending else b""
            if data:
                self.sock.send(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except OSError:
            pass

    def first_byte(self, timeout: float) -> int | None:
        """The first byte the peer sends, left unread (None: it sent nothing within `timeout`, or closed)."""
        if not self._wait(self._poll_in, time.monotonic() + timeout):
            return None
        try:
            data = self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, OSError):
            return None
        return data[0] if data else None

    def peer_certificate(self) -> dict | None:
        if self.ssl is None:
            return None
        with self._ssl_lock:
            return self.ssl.getpeercert()

    # ------------------------------------------------------------ raw socket

    def _wait(self, poller: select.poll, deadline: float | None) -> bool:
        while True:
            if deadline is None:
                ms = -1
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ms = max(1, math.ceil(left * 1000))
            try:
                if poller.poll(min(ms, 1000) if ms >= 0 else 1000):
                    return True
            except OSError:
                return True  # closed under us: the next read or write says so
            if self.closed:
                return True

    def _recv_raw(self, deadline: float | None) -> bytes:
        while True:
            try:
                return self.sock.recv(_CHUNK)
            except (BlockingIOError, InterruptedError):
                pass
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
                return b""
            except OSError:
                if self.closed:
                    return b""
                raise
            if not self._wait(self._poll_in, deadline):
                raise TimeoutError

    def _send_raw(self, data: bytes | bytearray | memoryview, timeout: float | None) -> None:
        view = memoryview(data)
        sent = 0
        last = time.monotonic()
        while sent < len(view):
            try:
                n = self.sock.send(view[sent:], socket.MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                n = 0
            if n:
                sent += n
                last = time.monotonic()
                continue
            if self.closed:
                raise ConnectionError("the connection is closed")
            if not self._wait(self._poll_out, None if timeout is None else last + timeout):
                raise TimeoutError(f"the peer took no data for {timeout:g} s")

    def _flush_tls(self, deadline: float | None) -> None:
        """Send what OpenSSL wrote (call with the write lock held, or before any writer exists)."""
        with self._ssl_lock:
            data = self._out.read() if self._out.pending else b""
        if data:
            self._send_raw(data, None if deadline is None else max(0.001, deadline - time.monotonic()))

    # ------------------------------------------------------------ reading (one thread)

    def _fill(self, deadline: float | None) -> None:
        """More plaintext into the buffer; EOF leaves `_eof` set. TimeoutError at `deadline`."""
        data: bytes | None
        if self.ssl is None:
            data = self._recv_raw(deadline)
            if data:
                self._plain += data
            else:
                self._eof = True
            return
        while True:
            with self._ssl_lock:
                try:
                    data = self.ssl.read(_CHUNK)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:
                    data = b""
                answer = bool(self._out.pending)
            if answer:  # the peer's TLS asked for something back (a key update)
                with self._write_lock:
                    self._flush_tls(None if deadline is None else deadline + 10.0)
            if data is not None:
                if data:
                    self._plain += data
                else:
                    self._eof = True
                return
            raw = self._recv_raw(deadline)
            if not raw:
                self._eof = True
                return
            with self._ssl_lock:
                self._in.write(raw)

    def _take(self, n: int, deadline: float | None, what: str, got: int) -> bytes:
        while len(self._plain) < n:
            if self._eof:
                raise wire.WireError(
                    f"truncated frame: connection closed after {got + len(self._plain)} bytes of its {what}",
                    fatal=True,
                )
            try:
                self._fill(deadline)
            except TimeoutError:
                raise wire.WireError("frame not completed within the frame timeout", fatal=True) from None
        data = bytes(self._plain[:n])
        del self._plain[:n]
        return data

    def read_frame(self, frame_timeout: float, idle: float | None = None) -> NetFrame:
        """The next frame; wire.ConnectionClosed at a clean end between frames, wire.WireError for a frame
        that breaks the limits (always fatal: the stream is not trusted further), TimeoutError when
        nothing arrives for `idle` seconds (None: wait as long as it takes), ssl.SSLError for broken TLS."""
        while not self._plain:
            if self._eof:
                raise wire.ConnectionClosed()
            self._fill(None if idle is None else time.monotonic() + idle)
            if not self._plain and not self._eof and idle is not None:
                raise TimeoutError
        deadline = time.monotonic() + frame_timeout
        head = self._take(wire.FIXED_HEADER.size, deadline, "fixed header", 0)
        magic, major, minor, header_len, payload_len = wire.FIXED_HEADER.unpack(head)
        if magic not in (wire.MAGIC, wire.MAGIC_COMPACT):
            raise wire.WireError(f"bad magic {bytes(magic)!r}, expected {wire.MAGIC!r}", fatal=True)
        if major != wire.PROTOCOL_VERSION[0]:
            raise wire.WireError(
                f"protocol version {major}.{minor} is not supported; this side speaks {wire.PROTOCOL_VERSION[0]}.x",
                fatal=True,
            )
        if header_len > wire.MAX_HEADER_BYTES:
            raise wire.WireError(
                f"header_len {header_len} exceeds the limit of {wire.MAX_HEADER_BYTES} bytes", fatal=True
            )
        if payload_len > wire.MAX_PAYLOAD_BYTES:
            raise wire.WireError(
                f"payload_len {payload_len} exceeds the limit of {wire.MAX_PAYLOAD_BYTES} bytes", fatal=True
            )
        body = self._take(header_len, deadline, "message", 16) if header_len else b""
        payload: bytes | bytearray = b""
        if payload_len:
            payload = bytearray()
            while len(payload) < payload_len:
                # Grows only as bytes arrive: a frame announcing 64 MiB and sending nothing costs nothing.
                part = min(payload_len - len(payload), _CHUNK)
                payload += self._take(part, deadline, "payload", 16 + header_len + len(payload))
        return NetFrame(bytes(magic), minor, body, payload)

    # ------------------------------------------------------------ writing (any thread)

    def send(self, parts: Sequence[bytes | bytearray | memoryview], timeout: float | None) -> None:
        """Send one whole frame (its parts in order); TimeoutError when the peer takes nothing for `timeout`
        seconds, ConnectionError/OSError when the connection is gone."""
        with self._write_lock:
            if self.closed:
                raise ConnectionError("the connection is closed")
            for part in parts:
                if not len(part):
                    continue
                if self.ssl is None:
                    self._send_raw(part, timeout)
                    continue
                view = memoryview(part).cast("B")
                for start in range(0, len(view), _SEND_SLICE):
                    piece = view[start : start + _SEND_SLICE]
                    with self._ssl_lock:
                        done = 0
                        while done < len(piece):
                            done += self.ssl.write(piece[done:])
                        data = self._out.read()
                    self._send_raw(data, timeout)

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        """Close the connection (a TLS close_notify first, when it can go at once); wakes the reader."""
        if self.closed:
            return
        if self.ssl is not None and self._write_lock.acquire(timeout=0.2):
            try:
                with self._ssl_lock:
                    try:
                        self.ssl.unwrap()
                    except (ssl.SSLError, ValueError):
                        pass
                    data = self._out.read() if self._out.pending else b""
                if data:
                    try:
                        self.sock.send(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
                    except OSError:
                        pass
            finally:
                self._write_lock.release()
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
