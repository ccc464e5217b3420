"""The requests of one prepared model that already passed decoding and validation, for reuse.

A client that runs the same request again and again (a Session does) sends
the same description each time. The service keeps, per prepared model, the
last few `Request` records it built and validated together with the exact
description they came from and the pool objects they were built on. A call
whose description is equal and whose pools resolve (through the client's
own handle table, as on every call) to the very same mappings reuses the
record: it is neither decoded nor validated again, and the driver, handed
the same object, recognises it too.

Only descriptions that name cached memories and driver buffers are kept: a
pool that brings an fd is a new mapping. A driver buffer's state changes, so
a request naming buffers is kept with a guard (`buffer_calls.BufferGuard`):
it is reused only while no buffer of the client was allocated or released
since it was bound (so its tokens still name the same buffers of this
client: a freed and reallocated token is another buffer and finds nothing)
and every buffer is in the state binding read (`mlts.hal.buffer_use.
buffer_state`); a request whose guard fails is bound again and replaces the
entry. (The JSON path keys such a request by the buffers' state instead.)
What makes a reuse exactly as safe as a fresh check: the prepared model is
the client's own (the cache lives in its handle's entry); every memory pool
is looked up in the client's handle table first (a freed or unknown id fails
there, another client's ids are unknown); a replaced pool is a different
object, so nothing matches; and `forget` drops the entries of a freed pool
at once.
"""

from __future__ import annotations

import threading
from operator import is_
from typing import Any

from mlts.hal.types import Request

#: Requests kept per prepared model (the most recently used).
CACHED_REQUESTS = 8


class RequestCache:
    """Validated requests by (description, pool identities), some with a guard; thread-safe."""

    def __init__(self, size: int = CACHED_REQUESTS) -> None:
        self.size = size
        self._entries: list[tuple[object, tuple[Any, ...], Request, Any]] = []
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, doc: object, pools: list[Any]) -> Request | None:
        """The request built from an equal `doc` on these very pools while its guard holds, or None.

        `doc` is the request's JSON object, or the bytes of a compact call's request (protocol 1.4):
        the two never compare equal, so each encoding finds only its own entries.
        """
        entries = self._entries  # replaced, never changed in place: safe to read without the lock
        for n, (d, p, request, guard) in enumerate(entries):
            if len(p) == len(pools) and all(map(is_, p, pools)) and d == doc:
                if guard is not None and not guard.holds():
                    return None  # bound again by the caller, whose `put` replaces this entry
                self.hits += 1
                if n > 1:  # the two most recent stay put: requests used in turn (driver buffers
                    self._touch(n, entries)  # swapped every step) would otherwise be moved every time
                return request
        return None

    def _touch(self, n: int, seen: list) -> None:
        with self._lock:
            if self._entries is seen:
                entries = list(seen)
                entries.insert(0, entries.pop(n))
                self._entries = entries

    def put(self, doc: object, pools: list[Any], request: Request, guard: Any = None) -> None:
        """Keep `request`, built from `doc` on `pools`; with a `guard` (anything with `holds()`), it is
        reused only while the guard holds. An entry of an equal `doc` on the same pools is replaced."""
        with self._lock:
            kept = [
                e
                for e in self._entries
                if not (len(e[1]) == len(pools) and all(map(is_, e[1], pools)) and e[0] == doc)
            ]
            self._entries = [(doc, tuple(pools), request, guard), *kept[: self.size - 1]]

    def forget(self, memory: object) -> None:
        """Drop every request that uses `memory` (freed by its client)."""
        with self._lock:
            self._entries = [e for e in self._entries if not any(p is memory for p in e[1])]

    def clear(self) -> None:
        with self._lock:
            self._entries = []

    def __len__(self) -> int:
        return len(self._entries)


def cacheable(descs: list[dict[str, Any]]) -> bool:
    """Whether a request with these pool descriptions may be cached: every pool a cached memory id or
    a driver buffer token."""
    return all(len(d) == 1 and ("memory" in d or "token" in d) for d in descs)
