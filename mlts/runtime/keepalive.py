"""Keep a connection to a shared service alive while its client is busy elsewhere.

A shared service disconnects a client that has no call in flight and sent nothing for its idle timeout
(announced in its hello as `idle_timeout`), so that forgotten or stopped clients give their slots
back. A client that merely has nothing to ask for a while (it runs a CPU reference, say) keeps its
connection, and everything it prepared, with a `ping` whenever it has sent nothing for a third of the
timeout. A stopped or hung client process stops pinging too, and is then disconnected as it should be.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from mlts.hal.errors import HalError

#: Pings are sent after this fraction of the idle timeout without a call.
PING_AFTER = 1 / 3


class KeepAlive:
    """A daemon thread pinging over `connection` (a ServiceConnection) while it is otherwise quiet; `stop()`
    ends it, and so does the connection's end."""

    def __init__(self, connection: Any, idle_timeout: float) -> None:
        self.connection = connection
        self.quiet = idle_timeout * PING_AFTER
        self.pings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlts-keepalive", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        connection = self.connection
        while True:
            wait = connection.last_sent + self.quiet - time.monotonic()
            if self._stop.wait(max(wait, 0.0)):
                return
            if connection.dead is not None:
                return
            if time.monotonic() - connection.last_sent < self.quiet:
                continue  # the client called meanwhile
            try:
                connection.call("ping", {}, timeout=max(self.quiet, 1.0))
                self.pings += 1
            except HalError:
                return  # the connection is gone; the client's next call says why

    def stop(self) -> None:
        self._stop.set()
