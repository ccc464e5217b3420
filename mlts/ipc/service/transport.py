"""One client connection on the service side: who the peer is, framed reads, and sends that never wait."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence
from typing import Any

from mlts.hal import codec
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import wire
from mlts.ipc.peer import Peer, unix_peer
from mlts.ipc.service.outbox import DEFAULT_MAX_BYTES, DEFAULT_PAUSE_BYTES, Outbox

log = logging.getLogger("mlts.ipc.service")


class Connection:
    """A connected client: its identity, framed reads, and sends that never wait for the client.

    Replies from many threads are sent whole, one at a time, in the order they are posted; what the
    socket does not take at once waits in the connection's bounded `Outbox` (a client that does not
    read is dropped, never waited on).
    """

    def __init__(
        self,
        sock: socket.socket,
        frame_timeout: float,
        *,
        peer: Peer | None = None,
        max_queued: int = DEFAULT_MAX_BYTES,
        pause_queued: int = DEFAULT_PAUSE_BYTES,
    ) -> None:
        self.sock = sock
        self.frame_timeout = frame_timeout
        self.peer = peer if peer is not None else unix_peer(sock)
        self.pid, self.uid = self.peer.pid, self.peer.uid
        # A blocking socket, never blocked on: reads are polled first, and sends never wait (the outbox).
        sock.settimeout(None)
        self.broken = False
        self.outbox = Outbox(sock, frame_timeout, self._dropped, max_queued, pause_queued)
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

    def wait_for_room(self) -> bool:
        """Before the reader takes the next call: wait while the client's unsent replies pile up (it is
        not reading them); False once the connection is gone."""
        return self.outbox.wait_for_room()

    @property
    def queued_bytes(self) -> int:
        return self.outbox.queued

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> bool:
        """Send one message (`fds` stay the caller's); False when the client cannot be reached."""
        if self.broken:
            return False
        try:
            data = wire.encode_frame(message)
        except (TypeError, ValueError) as e:
            # The Device returned something JSON cannot carry (NaN, a foreign type), or too much: report it.
            log.error("cannot encode %s %s: %s", message.get("kind"), message.get("id"), e)
            if message.get("kind") != "reply":
                return False
            error = HalError(ErrorStatus.GENERAL_FAILURE, f"the driver's result cannot be encoded: {e}")
            return self.send(error_reply(message.get("id"), error))
        return self.outbox.post(data, fds)

    def send_compact(self, body: bytes, fds: Sequence[int] = ()) -> bool:
        """Send one compact message (protocol 1.4); False when the client cannot be reached."""
        if self.broken:
            return False
        return self.outbox.post(wire.compact_frame_bytes(body), fds)

    def _dropped(self, why: str) -> None:
        """The outbox gave up on the client: say so once and wake the reader (it sees end of file)."""
        self.broken = True
        log.warning("disconnecting client %s: %s", self.peer.describe(), why)
        self.shutdown()

    def shutdown(self) -> None:
        """Wake the reader (it sees end of file); the socket is closed by its owner."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Stop sending (what waits is discarded) and wake the reader; the socket is closed by its owner."""
        self.broken = True
        self.outbox.close()
        self.shutdown()


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
