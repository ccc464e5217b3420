"""The sample driver's memory domain: buffers it owns, named by random tokens, within a byte budget.

One client (mlts.hal.qos.current_client(), the connection a service call came from) may hold at most
a quarter of the budget (`CLIENT_SHARE`), so a client that allocates all it can leaves room for the
others; in-process callers (client 0) are bounded by the budget alone.

A buffer's bytes live in a NumPy array that is replaced, never resized, when
its size changes, so a reader holding the old array is never disturbed by a
writer: concurrent reads are safe, concurrent writes leave one of the
writers' contents and never crash or block. A buffer whose size is known at
allocation gets its array then, and keeps it: an execution reads an input
buffer's array in place as the operand's value and writes a result into an
output buffer's array in place, so nothing is copied between successive
executions (as the NNAPI sample driver binds a buffer's memory as a request
pool).

Every change that affects how a request may use a buffer (its array replaced,
its dimensions changed, it became initialised, it was freed) bumps its
`stamp`, and then the device's `BufferTracker.epoch`; a request bound to
buffers once (`driver.request_io`) is reused while the epoch is the one it saw
(one comparison however many buffers it names) or, after some buffer of the
device changed, while the stamps of its own buffers are unchanged.
"""

from __future__ import annotations

import logging
import secrets
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mlts.hal import qos
from mlts.hal.buffer_use import MemoryDesc, combine_dims
from mlts.hal.enums import ELEMENT_SIZE, SCALAR_TYPES, ErrorStatus, OperandType
from mlts.hal.errors import HalError, invalid
from mlts.hal.interface import Buffer

log = logging.getLogger("driver.buffers")

#: Bytes all live buffers of one device may hold together, unless the `buffer_budget` option says otherwise.
DEFAULT_BUDGET = 1 << 30
#: Sizes are 32-bit in the HAL: a buffer larger than this is never allocated.
MAX_BUFFER_BYTES = 2**32 - 1
#: One client may hold at most 1/CLIENT_SHARE of the budget.
CLIENT_SHARE = 4


def _fully_known(dims: Sequence[int], operand_type: int) -> bool:
    return operand_type in SCALAR_TYPES or (bool(dims) and 0 not in dims)


def size_of(operand_type: int, dims: Sequence[int]) -> int:
    """Bytes of a value of `operand_type` with fully known `dims` (Python ints: no overflow)."""
    n = ELEMENT_SIZE[OperandType(operand_type)]
    for d in dims:
        n *= int(d)
    return n


class BufferTracker:
    """Live buffers of one device by token, and the bytes they reserve."""

    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self.budget = budget
        #: What one client (of a service) may hold at once.
        self.per_client = budget // CLIENT_SHARE
        self._lock = threading.Lock()
        self._buffers: dict[int, SampleBuffer] = {}
        self._reserved = 0
        self._by_client: dict[int, int] = {}
        #: Changes (under the lock) after any buffer's `stamp` changed: while it is the same, every
        #: buffer is as it was (read before the stamps it vouches for).
        self.epoch = 0

    def reserve(self, nbytes: int, what: str, client: int = 0) -> None:
        """Take `nbytes` (may be negative) of the budget for `client` (0: in-process); GENERAL_FAILURE
        when it does not fit the budget or the client's share of it."""
        if nbytes > MAX_BUFFER_BYTES:
            raise HalError(
                ErrorStatus.GENERAL_FAILURE,
                f"{what}: {nbytes} bytes exceed the largest buffer ({MAX_BUFFER_BYTES})",
            )
        with self._lock:
            held = self._by_client.get(client, 0)
            if nbytes > 0 and self._reserved + nbytes > self.budget:
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"{what}: {nbytes} more bytes exceed this driver's buffer budget of {self.budget} bytes "
                    f"({self._reserved} in use)",
                )
            if nbytes > 0 and client and held + nbytes > self.per_client:
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"{what}: {nbytes} more bytes exceed what one client may hold of this driver's buffer "
                    f"budget ({self.per_client} of {self.budget} bytes; this client holds {held})",
                )
            self._reserved += nbytes
            if held + nbytes:
                self._by_client[client] = held + nbytes
            else:
                self._by_client.pop(client, None)

    def changed(self) -> None:
        """A buffer's stamp just changed: a new epoch."""
        with self._lock:
            self.epoch += 1

    def add(self, make: Callable[[int], SampleBuffer]) -> SampleBuffer:
        """Register a buffer under a fresh random non-zero 32-bit token not held by any live buffer."""
        with self._lock:
            while True:
                token = secrets.randbits(32)
                if token and token not in self._buffers:
                    break
            buffer = make(token)
            self._buffers[token] = buffer
        return buffer

    def lookup(self, token: int) -> SampleBuffer:
        with self._lock:
            buffer = self._buffers.get(token)
        if buffer is None:
            raise invalid(f"buffer token {token} names no live buffer of this driver")
        return buffer

    def remove(self, token: int, nbytes: int, client: int = 0) -> None:
        with self._lock:
            if self._buffers.pop(token, None) is not None:
                self._reserved -= nbytes
                held = self._by_client.get(client, 0) - nbytes
                if held:
                    self._by_client[client] = held
                else:
                    self._by_client.pop(client, None)

    def held_by(self, client: int) -> int:
        """Bytes `client`'s live buffers hold."""
        with self._lock:
            return self._by_client.get(client, 0)

    @property
    def reserved(self) -> int:
        with self._lock:
            return self._reserved

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)


class SampleBuffer(Buffer):
    """One driver-managed buffer: its operand type, dimensions, roles and bytes."""

    stamp: int = 0

    def __init__(self, tracker: BufferTracker, token: int, desc: MemoryDesc, prepared: Sequence[Any]) -> None:
        self.token = token
        self.operand_type = desc.operand.type
        self.initial_dimensions = desc.dimensions
        self.dimensions = desc.dimensions
        self.initialized = False
        self._roles = desc.roles
        self._models = {id(p): weakref.ref(p) for p in prepared}
        self._tracker = tracker
        #: The client that allocated the buffer: every resize counts against its share.
        self.owner = qos.current_client()
        self._lock = threading.Lock()
        self._data: np.ndarray | None = None
        self._capacity = 0
        self._closed = False
        #: Bumped whenever the array, the dimensions, the initialised flag or the liveness change.
        self.stamp = 0
        if _fully_known(desc.dimensions, self.operand_type):
            self._capacity = size_of(self.operand_type, desc.dimensions)
            self._data = np.zeros(self._capacity, dtype=np.uint8)  # reserved by the allocation already

    # ------------------------------------------------------------ roles and checks

    def has_role(self, prepared: object, is_input: bool, io_index: int) -> bool:
        # A wrapping prepared model (sample-faulty's) plays the roles of the model it wraps.
        prepared = getattr(prepared, "inner", prepared)
        key = (id(prepared), is_input, io_index)
        ref = self._models.get(id(prepared))
        return key in self._roles and ref is not None and ref() is prepared

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise invalid(f"{what}: buffer token {self.token} was freed")

    def _resize(self, nbytes: int, what: str) -> None:
        """Make room for `nbytes` (called with the lock held): a new array when the size changes."""
        if self._data is not None and self._data.nbytes == nbytes:
            return
        if nbytes != self._capacity:
            self._tracker.reserve(nbytes - self._capacity, what, self.owner)
            self._capacity = nbytes
        self._data = np.zeros(nbytes, dtype=np.uint8)
        self._restamp()

    def _restamp(self) -> None:
        """The buffer changed (called with its lock held): a new stamp, then a new epoch of the device."""
        self.stamp += 1
        self._tracker.changed()

    # ------------------------------------------------------------ copies

    def copyTo(self, dst: memoryview) -> None:
        self._check_open("copyTo")
        dst = memoryview(dst)
        with self._lock:
            data, dims = self._data, self.dimensions
            ready = self.initialized
        if not ready or data is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"copyTo: buffer token {self.token} is uninitialised")
        if dst.nbytes != data.nbytes:
            raise invalid(
                f"copyTo: destination holds {dst.nbytes} bytes; the buffer (dimensions {list(dims)}) holds {data.nbytes}"
            )
        if dst.readonly:
            raise invalid("copyTo: the destination memory is read-only")
        np.frombuffer(dst, dtype=np.uint8)[...] = data

    def copyFrom(self, src: memoryview, dimensions: Sequence[int]) -> None:
        self._check_open("copyFrom")
        src = memoryview(src).cast("B") if memoryview(src).nbytes else memoryview(src)
        dims = tuple(int(d) for d in dimensions)
        if self.operand_type in SCALAR_TYPES and dims:
            raise invalid(f"copyFrom: dimensions {list(dims)} given for a scalar buffer")
        combined = combine_dims(self.initial_dimensions, dims)
        if combined is None:
            raise invalid(
                f"copyFrom: dimensions {list(dims)} disagree with the buffer's {list(self.initial_dimensions)}"
            )
        if not _fully_known(combined, self.operand_type):
            # The dimensions the buffer had from its last write stand in for those the caller left open.
            current = combine_dims(combined, self.dimensions)
            if current is None or not _fully_known(current, self.operand_type):
                raise invalid(
                    f"copyFrom: dimensions {list(combined)} are not fully known; give them with the copy"
                )
            combined = current
        nbytes = size_of(self.operand_type, combined)
        if src.nbytes != nbytes:
            raise invalid(
                f"copyFrom: source holds {src.nbytes} bytes; dimensions {list(combined)} need {nbytes}"
            )
        with self._lock:
            self._resize(nbytes, "copyFrom")
            assert self._data is not None
            self._data[...] = np.frombuffer(src, dtype=np.uint8)
            self._settle(combined)

    # ------------------------------------------------------------ executions

    def _settle(self, dims: tuple[int, ...]) -> None:
        """After a write (lock held): the buffer holds data of `dims`."""
        if not self.initialized or self.dimensions != dims:
            self.dimensions = dims
            self.initialized = True
            self._restamp()

    def read(self, dtype: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
        """A read-only view of the contents as an execution input (the buffer's own bytes, no copy)."""
        self._check_open("execution")
        with self._lock:
            data = self._data
        if data is None or not self.initialized:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"buffer token {self.token} is uninitialised")
        arr = data.view(dtype)
        if arr.size != int(np.prod(dims, dtype=np.int64)):
            raise invalid(
                f"buffer token {self.token} holds {arr.size} elements; dimensions {list(dims)} need "
                f"{int(np.prod(dims, dtype=np.int64))}"
            )
        arr = arr.reshape(dims)
        arr.flags.writeable = False
        return arr

    def check_output(self, shape: tuple[int, ...], what: str) -> None:
        """GENERAL_FAILURE when an execution result of `shape` cannot go into this buffer."""
        if combine_dims(self.initial_dimensions, shape) is None:
            raise HalError(
                ErrorStatus.GENERAL_FAILURE,
                f"{what}: result dimensions {list(shape)} do not fit buffer token {self.token} "
                f"(allocated for {list(self.initial_dimensions)})",
            )

    def destination(self, dtype: np.dtype) -> tuple[np.ndarray, int] | None:
        """A writable view of the buffer's array with its current dimensions, and the stamp it is valid
        for: where an execution writes a result of those dimensions in place. None while the size is
        not known (the first write sizes the buffer through `write`)."""
        with self._lock:
            data, dims, stamp = self._data, self.dimensions, self.stamp
        if self._closed or data is None or not _fully_known(dims, self.operand_type):
            return None
        if data.nbytes != size_of(self.operand_type, dims):
            return None
        return data.view(dtype).reshape(dims), stamp

    def written(self, dims: tuple[int, ...]) -> None:
        """An execution wrote a result of `dims` through `destination`: the buffer holds data."""
        with self._lock:
            if not self._closed:
                self._settle(dims)

    def write(self, arr: np.ndarray) -> None:
        """Store an execution's result; the buffer takes its shape (a new array only when the size changes).

        A buffer freed while the execution ran (it was bound before) takes nothing: as in the HAL, the
        execution completes, and no one can read the buffer any more."""
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        with self._lock:
            if self._closed:
                return
            self._resize(raw.nbytes, "execution output")
            assert self._data is not None
            self._data[...] = raw
            self._settle(tuple(int(d) for d in arr.shape))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._data = None
            self._restamp()
        self._tracker.remove(self.token, self._capacity, self.owner)
