"""One client connection on the service side: who the peer is, framed reads, sends under one lock."""

from __future__ import annotations

import logging
import socket
import struct
import threading
from collections.abc import Sequence
from typing import Any

from mlts.hal import codec
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import wire

log = logging.getLogger("mlts.ipc.service")

_CRED = struct.Struct("3i")


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    try:
        pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    except (OSError, struct.error):
        return 0, -1
    return pid, uid


class Connection:
    """A connected socket; replies from many threads are sent whole, one at a time."""

    def __init__(self, sock: socket.socket, frame_timeout: float) -> None:
        self.sock = sock
        self.frame_timeout = frame_timeout
        self.pid, self.uid = peer_credentials(sock)
        # A blocking socket, never blocked on: reads are polled first, and sends are bounded by
        # frame_timeout explicitly (a client that stopped reading), so each costs one system call.
        sock.settimeout(None)
        self._send_lock = threading.Lock()
        self.broken = False
        # Idle between calls for as long as the client likes; a started frame has frame_timeout in all.
        self._frame_timer = wire.FrameTimer(sock, frame_timeout)
        self._readable = wire.Readable(sock)

    def receive(self) -> wire.Frame:
        """The next frame; raises wire.ConnectionClosed, wire.WireError or OSError."""
        return wire.recv_frame(self.sock, self._frame_timer)

    def pending(self) -> bool:
        """Whether more bytes from the client wait to be read."""
        return self._readable(0)

    def readable(self, timeout: float | None) -> bool:
        """Whether bytes from the client can be read within `timeout` seconds (None: wait for them)."""
        return self._readable(timeout)

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> bool:
        """Send one message; False (and the connection marked broken) when the client cannot be reached."""
        if self.broken:
            return False
        try:
            with self._send_lock:
                wire.send_frame(self.sock, message, fds=fds, timeout=self.frame_timeout)
        except (TypeError, ValueError) as e:
            # The Device returned something JSON cannot carry (NaN, a foreign type): report it.
            log.error("cannot encode %s %s: %s", message.get("kind"), message.get("id"), e)
            if message.get("kind") != "reply":
                return False
            error = HalError(ErrorStatus.GENERAL_FAILURE, f"the driver's result cannot be encoded: {e}")
            return self.send(error_reply(message.get("id"), error))
        except OSError as e:
            log.warning("cannot send to client pid %d (%s); closing the connection", self.pid, e)
            self.broken = True
            self.shutdown()
            return False
        return True

    def send_compact(self, body: bytes, fds: Sequence[int] = ()) -> bool:
        """Send one compact message (protocol 1.4); False (and the connection marked broken) as `send`."""
        if self.broken:
            return False
        try:
            with self._send_lock:
                wire.send_data(self.sock, wire.compact_frame_bytes(body), fds, self.frame_timeout)
        except OSError as e:
            log.warning("cannot send to client pid %d (%s); closing the connection", self.pid, e)
            self.broken = True
            self.shutdown()
            return False
        return True

    def shutdown(self) -> None:
        """Wake the reader (it sees end of file); the socket is closed by its owner."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def error_dict(error: HalError) -> dict[str, Any]:
    return {
        "status": int(error.status),
        "message": error.message,
        "output_shapes": [codec.output_shape_to_dict(s) for s in error.output_shapes],
    }


def error_reply(msg_id: object, error: HalError) -> dict[str, Any]:
    return {"kind": "reply", "id": msg_id, "ok": False, "error": error_dict(error)}


def ok_reply(msg_id: int, result: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "reply", "id": msg_id, "ok": True, "result": result}
