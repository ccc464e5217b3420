"""The one cache of requests already decoded and validated: one per prepared model, for every path.

A client that runs the same request again and again (a Session does) sends
the same request message each time: the binary form of docs/burst-protocol.md
(a compact socket call carries it, a burst's request ring carries it, and a
legacy JSON call is converted to it at the door). Its stable part (flags,
counts, pools, arguments: everything but the kind, sequence number, timing
flag, deadline and loop timeout) is the key. Per prepared model (the cache
lives in the client's `PreparedEntry`), each key maps to

- the request decoded once (`Known.decoded`, a `BurstRequest` whose per-call
  fields are not used) with the references of its pools (`slots`: the memory
  ids or burst slots, in order; `tokens`: the driver buffer tokens), and
- the `Request` records built and validated from it on given mappings
  (`Known.variants`): the identities of the pools the references resolved to,
  the record, the driver-buffer guard it was bound under
  (`buffer_calls.BufferGuard`, None without tokens) and whether a pool is a
  client's file.

A JSON call (protocol 1.3 and older) is converted to the message at the door;
the last conversion is kept too (`RequestCache.converted`: a pure function of
the JSON object, naming no mapping, so nothing invalidates it).

A call whose key is known and whose references resolve (through the client's
own handle table or the burst's slot cache, on every call) to the very same
mappings reuses the record: it is neither decoded nor validated again, and the
driver, handed the same object, recognises it too. What makes a reuse exactly
as safe as a fresh check: the prepared model is the client's own; every pool
is looked up on every call (a freed or unknown id fails there, another
client's ids are unknown); a replaced pool is a different object, so nothing
matches; a request naming driver buffers is reused only while its guard holds
(no buffer of the client allocated or released since it was bound, every
buffer in the state binding read); and the one invalidation point,
`mlts.ipc.service.pipeline.unreachable`, drops at once every record built on a
mapping that stops being reachable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mlts.hal.types import Request
from mlts.ipc.burst_messages import POOL_TOKEN, BurstRequest
from mlts.ipc.compact_calls import RequestKey

#: Distinct request messages kept per prepared model, and the records kept per message (on as many
#: sets of mappings: a client that swaps pools from step to step uses a few in turn).
CACHED_REQUESTS = 32
VARIANTS = 4
#: A request message longer than this is decoded on every call (not kept).
MAX_KEPT_REQUEST = 64 << 10


class Known:
    """A request message decoded once, and the records validated from it on given mappings."""

    __slots__ = ("decoded", "slots", "tokens", "variants")

    def __init__(self, decoded: BurstRequest) -> None:
        self.decoded = decoded
        #: The values of the pools that are memories (memory ids or burst slots), in order.
        self.slots = tuple(value for kind, value in decoded.pools if kind != POOL_TOKEN)
        #: The driver buffer tokens among the pools, in order (empty: none).
        self.tokens = [value for kind, value in decoded.pools if kind == POOL_TOKEN]
        #: (pool identities, Request, guard or None, whether a pool is a file): replaced whole.
        self.variants: tuple[tuple[tuple[Any, ...], Request, Any, bool], ...] = ()

    def pools(self, memories: tuple[Any, ...]) -> tuple[Any, ...]:
        """The request's pools in order: `memories` for the memories, the tokens as they are."""
        if not self.tokens:
            return memories
        it = iter(memories)
        return tuple(value if kind == POOL_TOKEN else next(it) for kind, value in self.decoded.pools)


class RequestCache:
    """Decoded request messages by key, each with its validated records; thread-safe.

    Reads take no lock (entries are added, replaced and dropped whole under the lock)."""

    def __init__(self, size: int = CACHED_REQUESTS, variants: int = VARIANTS) -> None:
        self.size = size
        self.variants = variants
        self._known: dict[RequestKey, Known] = {}
        #: The decoded request under a key, or None (the dictionary's own `get`: no Python frame).
        self.known: Callable[[RequestKey], Known | None] = self._known.get
        self._lock = threading.Lock()
        #: Executions that reused a validated record (serviceStatus' request_cache_hits).
        self.hits = 0
        #: The last JSON request (protocol 1.3 and older) converted at the door: (its JSON object, the
        #: message, its key). A pure function of the JSON object, replaced whole: it names no mapping,
        #: so nothing invalidates it; an equal object is converted to the same message.
        self.converted: tuple[dict[str, Any], BurstRequest, RequestKey | None] | None = None

    def learn(self, key: RequestKey | None, decoded: BurstRequest) -> Known:
        """Keep `decoded` under `key` (None, or a key too long: not kept) and return its record."""
        known = Known(decoded)
        if key is not None and len(key if isinstance(key, bytes) else key[1]) <= MAX_KEPT_REQUEST:
            with self._lock:
                if len(self._known) >= self.size:
                    del self._known[next(iter(self._known))]
                self._known[key] = known
        return known

    def validated(self, known: Known, memories: tuple[Any, ...]) -> tuple[Request, bool] | None:
        """(the record validated on these very mappings, whether a pool is a file) while its guard
        holds, or None (the caller validates and `keep`s a new one)."""
        for variant in known.variants:
            # Mappings compare by identity (SharedMemory and FileMemory define no equality): one C
            # comparison of the tuples.
            if variant[0] == memories:
                guard = variant[2]
                if guard is not None and not guard.holds():
                    return None  # bound again by the caller, whose `keep` replaces this record
                self.hits += 1
                return variant[1], variant[3]
        return None

    def keep(
        self, known: Known, memories: tuple[Any, ...], request: Request, guard: Any, files: bool
    ) -> None:
        """Keep `request`, validated on `memories` (replacing a record on the same mappings)."""
        with self._lock:
            kept = [v for v in known.variants if v[0] != memories]
            known.variants = ((memories, request, guard, files), *kept[: self.variants - 1])

    def forget(self, memory: object) -> None:
        """Drop every record built on `memory` (called by `pipeline.unreachable` only)."""
        with self._lock:
            for known in self._known.values():
                if any(any(p is memory for p in v[0]) for v in known.variants):
                    known.variants = tuple(v for v in known.variants if not any(p is memory for p in v[0]))

    def clear(self) -> None:
        with self._lock:
            self._known.clear()

    def __len__(self) -> int:
        """The validated records kept."""
        return sum(len(k.variants) for k in list(self._known.values()))
