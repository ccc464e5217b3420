"""Which program a client is: connections of one program under one user are one app.

Android tells apps apart by their UID (seed 002: the caller's UID, as the kernel reports it, decides
whose priorities an execution is ordered among). Here several programs share a user, so an app is the
pair the kernel vouches for: the peer's uid and the executable it runs (`mlts.ipc.peer`: SO_PEERCRED
and /proc/PID/exe, nothing the client says). A peer whose executable cannot be read is known by its
uid alone (every such program of that user is one app, as the allowlist treats it), and a peer
without credentials (another machine) is an app of its own per connection.

The service's scheduler serves apps in turn and orders each app's executions by priority, and the
driver learns the app of each call (`mlts.hal.qos.current_app()`). App numbers are never reused
while the service runs: an app whose last connection left gets a new number when it comes back.
"""

from __future__ import annotations

import itertools
import threading

from mlts.ipc.peer import UNKNOWN_PID, UNKNOWN_UID, Peer


def app_identity(peer: Peer) -> tuple[object, ...] | None:
    """What makes two peers one app, or None when nothing proven does (another machine)."""
    if peer.pid == UNKNOWN_PID or peer.uid == UNKNOWN_UID:
        return None
    return (peer.uid, peer.executable)


class AppRegistry:
    """Numbers the apps of the connected clients (from 1; in-process callers are app 0)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._apps: dict[tuple[object, ...], list[int]] = {}  # identity -> [number, connections]

    def join(self, peer: Peer) -> int:
        """The app number of a new connection of `peer`."""
        identity = app_identity(peer)
        with self._lock:
            if identity is None:
                return next(self._numbers)
            entry = self._apps.get(identity)
            if entry is None:
                entry = self._apps[identity] = [next(self._numbers), 0]
            entry[1] += 1
            return entry[0]

    def leave(self, peer: Peer) -> None:
        """One connection of `peer` ended."""
        identity = app_identity(peer)
        if identity is None:
            return
        with self._lock:
            entry = self._apps.get(identity)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._apps[identity]

    def count(self) -> int:
        """Apps with connections now (those known by credentials)."""
        with self._lock:
            return len(self._apps)
