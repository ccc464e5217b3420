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
    #: A network client: what it proved ("token ci", "cert CN=board-a", "insecure") and where it
    #: connected from ("10.0.0.5:41234"); None for a Unix peer.
    identity: str | None = None
    address: str | None = None

    @property
    def network(self) -> bool:
        return self.identity is not None

    @property
    def user_key(self) -> object:
        """What per-user limits count by: the uid, or a network client's proven identity."""
        return ("net", self.identity) if self.identity is not None else self.uid

    @property
    def process_key(self) -> object:
        """What per-process limits and the refusal log count by: the pid, or a network client's identity
        on one machine (its address without the port)."""
        if self.identity is None:
            return self.pid
        host = (self.address or "").rpartition(":")[0]
        return ("net", self.identity, host)

    def describe(self) -> str:
        """'pid 4242 uid 1000' (how logs name a client); 'tcp 10.0.0.5:41234 (token ci)' over a network."""
        if self.identity is not None:
            return f"tcp {self.address} ({self.identity})"
        return f"pid {self.pid} uid {self.uid}"

    def describe_user(self) -> str:
        return f"{self.identity} (over the network)" if self.identity is not None else f"uid {self.uid}"

    def describe_process(self) -> str:
        if self.identity is None:
            return f"pid {self.pid}"
        return f"{self.identity} from {str(self.process_key[2]) or 'an unknown address'}"  # type: ignore[index]


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
