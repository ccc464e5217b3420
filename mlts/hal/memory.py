"""Memory pools: byte regions that hold constants, inputs and outputs.

A pool is either host memory (a bytes-like object of this process) or shared
memory (an anonymous memfd mapped with mmap) that can be handed to a driver
process by passing its file descriptor over a Unix socket.
"""

from __future__ import annotations

import mmap
import os

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError

# Refuse to map more than this in one pool: a hostile size must not exhaust memory.
MAX_POOL_BYTES = 1 << 34


class HostMemory:
    """A pool backed by memory of this process (read-only if given bytes)."""

    __slots__ = ("_buf",)

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._buf = memoryview(data).cast("B")

    @property
    def size(self) -> int:
        return self._buf.nbytes

    @property
    def buffer(self) -> memoryview:
        return self._buf

    def __repr__(self) -> str:
        return f"HostMemory(size={self.size})"


class SharedMemory:
    """A pool in an anonymous memfd, mapped read-write; its fd can cross processes."""

    __slots__ = ("fd", "size", "_map", "_view")

    def __init__(self, fd: int, size: int, _map: mmap.mmap | None) -> None:
        self.fd = fd
        self.size = size
        self._map = _map
        self._view = memoryview(_map) if _map is not None else memoryview(b"")

    @classmethod
    def create(cls, size: int, name: str = "mlts-pool") -> SharedMemory:
        """A new zero-filled pool of `size` bytes."""
        if size < 0 or size > MAX_POOL_BYTES:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"pool size {size} out of range")
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size) if size else None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size, mm)

    @classmethod
    def from_fd(cls, fd: int, size: int) -> SharedMemory:
        """Map a received fd; `size` is checked against the file before mapping.

        Takes ownership of `fd`.
        """
        try:
            actual = os.fstat(fd).st_size
            if size < 0 or size > MAX_POOL_BYTES or size > actual:
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"pool claims {size} bytes but its memory holds {actual}",
                )
            mm = mmap.mmap(fd, size) if size else None
        except OSError as e:
            os.close(fd)
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"cannot map pool: {e}") from None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size, mm)

    @property
    def buffer(self) -> memoryview:
        return self._view

    def close(self) -> None:
        """Unmap and close; views taken from `buffer` must be released first."""
        self._view.release()
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # A NumPy view still points into the map; leave it to the GC.
                pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"SharedMemory(fd={self.fd}, size={self.size})"


Memory = HostMemory | SharedMemory
