"""Per-client handle tables: everything a client creates is a handle only that client can name.

A handle names a `Resource`: a reference-counted object whose close function
runs when the table has dropped it *and* the last call using it has ended, so
releasing a prepared model or freeing a pool while an execution still reads
it is safe. Handle numbers come from one service-wide counter, so a number
is never reused and another client's number is simply unknown here (the
error does not say whether it exists elsewhere).
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError, invalid
from mlts.ipc.service.outbox import DEFAULT_MAX_BYTES

log = logging.getLogger("mlts.ipc.service")

_numbers = itertools.count(1)
_numbers_lock = threading.Lock()


def new_number() -> int:
    """A service-wide unique handle number."""
    with _numbers_lock:
        return next(_numbers)


class Kind(enum.Enum):
    """What a handle names; the value is how errors call it."""

    PREPARED = "prepared model"
    MEMORY = "memory"
    FENCED = "fenced execution"
    BURST = "burst"
    BUFFER = "driver buffer"


@dataclass(frozen=True)
class Limits:
    """What one client may hold at once; beyond that its calls fail with RESOURCE_EXHAUSTED."""

    max_prepared: int = 1024
    max_memories: int = 4096
    max_fenced: int = 4096
    max_bursts: int = 64
    max_in_flight: int = 256
    max_mapped_bytes: int = 4 << 30
    max_buffers: int = 4096
    #: Bytes of replies that may wait for a client that does not read them (then it is disconnected).
    max_queued_bytes: int = DEFAULT_MAX_BYTES

    def limit(self, kind: Kind) -> int:
        return {
            Kind.PREPARED: self.max_prepared,
            Kind.MEMORY: self.max_memories,
            Kind.FENCED: self.max_fenced,
            Kind.BURST: self.max_bursts,
            Kind.BUFFER: self.max_buffers,
        }[kind]


class Resource:
    """A value with a reference count; `close` runs once, when the count drops to zero."""

    __slots__ = ("value", "nbytes", "_close", "_refs", "_lock")

    def __init__(self, value: Any, close: Callable[[], None] | None = None, nbytes: int = 0) -> None:
        self.value = value
        self.nbytes = nbytes
        self._close = close
        self._refs = 1  # the table's
        self._lock = threading.Lock()

    def acquire(self) -> Resource:
        with self._lock:
            if self._refs <= 0:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "the object was released")
            self._refs += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last and self._close is not None:
            try:
                self._close()
            except Exception as e:
                log.warning("releasing %r failed: %s: %s", self.value, type(e).__name__, e)


class HandleTable:
    """The handles of one client, by kind; thread-safe."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._tables: dict[Kind, dict[int, Resource]] = {kind: {} for kind in Kind}
        self._mapped = 0
        self._closed = False
        #: Changes whenever a driver buffer handle is added or dropped (under the lock): a request
        #: whose tokens were looked up at one epoch names the same buffers while the epoch is the same
        #: (mlts.ipc.service.buffer_calls.BufferGuard).
        self.buffer_epoch = 0

    def check_room(self, kind: Kind, method: str, more: int = 1) -> None:
        """RESOURCE_EXHAUSTED_PERSISTENT when `more` new handles of `kind` would exceed the limit."""
        with self._lock:
            held = len(self._tables[kind])
        limit = self.limits.limit(kind)
        if held + more > limit:
            raise HalError(
                ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                f"{method}: this client already holds {held} {kind.value} handles (at most {limit}); "
                "release some first",
            )

    def check_bytes(self, nbytes: int, method: str) -> None:
        """RESOURCE_EXHAUSTED_PERSISTENT when mapping `nbytes` more would exceed the client's budget."""
        with self._lock:
            mapped = self._mapped
        if mapped + nbytes > self.limits.max_mapped_bytes:
            raise HalError(
                ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                f"{method}: mapping {nbytes} more bytes would exceed this client's budget of "
                f"{self.limits.max_mapped_bytes} bytes ({mapped} mapped); free some pools first",
            )

    def reserve_bytes(self, nbytes: int, method: str) -> None:
        """Count `nbytes` of memory the service maps or holds for this client outside the handles (a model,
        a pool mapped for one call, a burst slot, a copy's staging); RESOURCE_EXHAUSTED_PERSISTENT when
        they would exceed the client's budget. Give them back with `release_bytes`."""
        with self._lock:
            mapped = self._mapped
            if mapped + nbytes > self.limits.max_mapped_bytes:
                raise HalError(
                    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                    f"{method}: {nbytes} more bytes would exceed this client's budget of "
                    f"{self.limits.max_mapped_bytes} bytes of mapped memory ({mapped} held); release "
                    "prepared models or free pools first",
                )
            if not self._closed:
                self._mapped += nbytes

    def release_bytes(self, nbytes: int) -> None:
        """Give back bytes counted by `reserve_bytes` (nothing once the client's table was closed)."""
        with self._lock:
            if not self._closed:
                self._mapped -= nbytes

    def add(self, kind: Kind, resource: Resource, method: str, key: int | None = None) -> int:
        """Put `resource` in the table under a new number (or the client's `key`); returns the handle.

        A resource under the same key is replaced (and released).
        """
        with self._lock:
            table = self._tables[kind]
            if self._closed:
                raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, f"{method}: the client is disconnecting")
            if key not in table and len(table) >= self.limits.limit(kind):
                raise HalError(
                    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                    f"{method}: this client already holds {len(table)} {kind.value} handles "
                    f"(at most {self.limits.limit(kind)}); release some first",
                )
            number = new_number() if key is None else key
            old = table.pop(number, None)
            table[number] = resource
            self._mapped += resource.nbytes - (old.nbytes if old is not None else 0)
            if kind is Kind.BUFFER:
                self.buffer_epoch += 1
        if old is not None:
            old.release()
        return number

    def get(self, kind: Kind, number: int, method: str) -> Resource:
        """The resource with one more reference (the caller releases it); unknown is INVALID_ARGUMENT."""
        with self._lock:
            resource = self._tables[kind].get(number)
            if resource is None:
                raise invalid(f"{method}: unknown {kind.value} handle {number}")
            return resource.acquire()

    def values(self, kind: Kind) -> list[Any]:
        """The values of every handle of `kind` (a snapshot)."""
        with self._lock:
            return [r.value for r in self._tables[kind].values()]

    def peek_many(self, kind: Kind, numbers: list[int]) -> list[Resource | None]:
        """`peek` of each of `numbers` (no reference taken), in order."""
        return list(map(self._tables[kind].get, numbers))

    def peek(self, kind: Kind, number: int) -> Resource | None:
        # One dict read is atomic under the interpreter lock: no table lock on this hot path.
        return self._tables[kind].get(number)

    def remove(self, kind: Kind, number: int) -> bool:
        """Drop the table's reference; False when the handle is unknown."""
        with self._lock:
            resource = self._tables[kind].pop(number, None)
            if resource is not None:
                self._mapped -= resource.nbytes
                if kind is Kind.BUFFER:
                    self.buffer_epoch += 1
        if resource is None:
            return False
        resource.release()
        return True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {kind.name.lower(): len(table) for kind, table in self._tables.items()}

    @property
    def mapped_bytes(self) -> int:
        with self._lock:
            return self._mapped

    def close_all(self) -> None:
        """Drop every handle (the client went away); later `add`s fail."""
        with self._lock:
            self._closed = True
            dropped = [r for table in self._tables.values() for r in table.values()]
            for table in self._tables.values():
                table.clear()
            self._mapped = 0
            self.buffer_epoch += 1
        for resource in dropped:
            resource.release()
