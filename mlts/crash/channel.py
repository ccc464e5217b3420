"""The pipe between a stress test's child process and its supervisor: one JSON object per line.

The child writes events (`ready`, `progress`, `driver`, `result`); the
supervisor reads them without blocking past a deadline. Lines are bounded and
parsed as plain JSON; anything malformed is ignored rather than trusted.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

MAX_LINE = 1 << 20


class Reporter:
    """The child's end: `send(event, **fields)` writes one line, never raising (the parent may be gone)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, event: str, **fields: Any) -> None:
        data = (json.dumps({"event": event, **fields}, allow_nan=False, default=str) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError:
            pass


class Reader:
    """The supervisor's end: events as they arrive, with a deadline on every wait."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def events(self, deadline: float) -> list[dict[str, Any]] | None:
        """Events available before `deadline` (monotonic); [] on timeout, None once the pipe is closed."""
        if self.closed:
            return None
        wait = max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            return []
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.closed = True
            return None
        self.buffer += chunk
        out = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            event = _parse(line)
            if event is not None:
                out.append(event)
        if len(self.buffer) > MAX_LINE:
            self.buffer = b""
        return out


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("event"), str) else None
