"""Who is at the other end of a connection: the identity per-client limits, logs and policies use.

A transport makes one `Peer` per connection. On a Unix socket the kernel tells (SO_PEERCRED) the
peer's pid and uid as they were when it connected; the executable is read from /proc/PID/exe of that
pid. Nothing the client sends is trusted for this. A network transport fills in what it can prove
(no pid or uid) and leaves the rest unknown.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

_CRED = struct.Struct("3i")
#: pid of a peer whose pid is not known (another machine, or the kernel could not say).
UNKNOWN_PID = 0
#: uid of a peer whose uid is not known.
UNKNOWN_UID = -1


@dataclass(frozen=True, slots=True)
class Peer:
    """A connected client's identity as the kernel reported it."""

    pid: int = UNKNOWN_PID
    uid: int = UNKNOWN_UID
    gid: int = UNKNOWN_UID
    #: The program the peer runs (resolved /proc/PID/exe), None when it cannot be read.
    executable: str | None = None

    def describe(self) -> str:
        """'pid 4242 uid 1000' (how logs name a client)."""
        return f"pid {self.pid} uid {self.uid}"


def credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket (SO_PEERCRED); unknown values
    when the socket cannot say."""
    try:
        return _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    except (OSError, struct.error):
        return UNKNOWN_PID, UNKNOWN_UID, UNKNOWN_UID


def executable_of(pid: int) -> str | None:
    """The resolved path of the program process `pid` runs, or None (gone, or not readable here)."""
    if pid <= 0:
        return None
    try:
        path = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    # The kernel marks a program file replaced or removed since it started.
    return path[: -len(" (deleted)")] if path.endswith(" (deleted)") else path


def unix_peer(sock: socket.socket) -> Peer:
    """The Peer of a connected Unix socket."""
    pid, uid, gid = credentials(sock)
    return Peer(pid, uid, gid, executable_of(pid))
