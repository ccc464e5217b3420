"""Memory pools: byte regions that hold constants, inputs and outputs.

A pool is either host memory (a bytes-like object of this process) or shared
memory (an anonymous memfd mapped with mmap) that can be handed to a driver
process by passing its file descriptor over a Unix socket.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import threading
from typing import Any

from mlts.hal import procctl
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.files import describe_mode

# Refuse to map more than this in one pool: a hostile size must not exhaust memory.
MAX_POOL_BYTES = 1 << 34

#: Seals a request pool must carry before a driver maps it: it can never shrink under the mapping.
SEALS_POOL = fcntl.F_SEAL_SHRINK
#: Seals of a model (and the constants in it): no shrinking, growing or writing after validation.
SEALS_FROZEN = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
#: Seals the pools made here carry: fixed size, contents writable by both sides.
SEALS_FIXED_SIZE = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_SEAL_NAMES = (
    (fcntl.F_SEAL_SHRINK, "F_SEAL_SHRINK"),
    (fcntl.F_SEAL_GROW, "F_SEAL_GROW"),
    (fcntl.F_SEAL_WRITE, "F_SEAL_WRITE"),
)
_WRITE_CHUNK = 1 << 24


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
    """A pool in an anonymous memfd; its fd can cross processes.

    Pools made here are sealed against shrinking and growing, so a driver
    that maps them can never touch a page that went away (SIGBUS); `frozen`
    pools (models and their constants) are also sealed against writing, so
    what the driver validated is what it runs. A receiver checks the seals it
    needs with `from_fd`.
    """

    __slots__ = ("fd", "size", "_map", "_view")

    def __init__(self, fd: int, size: int, _map: mmap.mmap | None) -> None:
        self.fd = fd
        self.size = size
        self._map = _map
        self._view = memoryview(_map) if _map is not None else memoryview(b"")

    @classmethod
    def create(cls, size: int, name: str = "mlts-pool") -> SharedMemory:
        """A new zero-filled read-write pool of `size` bytes, sealed at that size."""
        _check_size(size)
        procctl.make_non_dumpable()  # this process now holds memory a driver shares
        fd = _memfd(name)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS_FIXED_SIZE)
            mm = mmap.mmap(fd, size) if size else None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size, mm)

    @classmethod
    def frozen(cls, data: bytes | bytearray | memoryview, name: str = "mlts-model") -> SharedMemory:
        """A new pool holding a copy of `data`, sealed against any change and mapped read-only.

        The bytes are written through the fd, never through a writable
        mapping, because the kernel refuses F_SEAL_WRITE while one exists.
        """
        view = memoryview(data).cast("B")
        size = view.nbytes
        _check_size(size)
        procctl.make_non_dumpable()
        fd = _memfd(name)
        try:
            os.ftruncate(fd, size)
            done = 0
            while done < size:
                done += os.pwrite(fd, view[done : done + _WRITE_CHUNK], done)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS_FROZEN)
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, size, mm)

    @classmethod
    def from_fd(cls, fd: int, size: int, *, seals: int = SEALS_POOL, what: str = "pool") -> SharedMemory:
        """Map a received fd after checking it; takes ownership of `fd`.

        The fd must be a regular file (a memfd) holding at least `size` bytes
        and carrying every seal in `seals` (SEALS_POOL for request pools,
        SEALS_FROZEN for models); sockets, pipes, directories and devices are
        refused. A pool sealed against writing is mapped read-only. Once
        mapped, the mapping is all this side keeps: `fd` is closed.
        """
        try:
            try:
                _check_received(fd, size, seals, what)
                if not size:
                    return cls(-1, 0, None)
                access = mmap.ACCESS_READ if seals & fcntl.F_SEAL_WRITE else mmap.ACCESS_WRITE
                mm = mmap.mmap(fd, size, access=access)
            except OSError as e:
                if procctl.is_fd_exhaustion(e):
                    raise HalError(
                        ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                        f"cannot map {what}: out of file descriptors ({procctl.describe_fd_exhaustion()}); "
                        "free cached pools with freeMemory",
                    ) from None
                if e.errno == errno.ENOMEM:
                    raise HalError(
                        ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                        f"cannot map {what} of {size} bytes: out of address space or memory",
                    ) from None
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"cannot map {what}: {e}") from None
        finally:
            # The mapping holds its own reference (Python's mmap keeps a duplicate fd).
            os.close(fd)
        return cls(-1, size, mm)

    @classmethod
    def map_file(cls, fd: int, size: int, what: str = "file") -> SharedMemory:
        """A client's own file mapping (the `mmap_fd` analogue of memory domains' copies); takes `fd`.

        Unlike `from_fd` the fd is kept, so the memory can be sent: a service copies such a memory
        with pread/pwrite (`read_received`, `write_received`; as a request pool, a `FileMemory`),
        never through a mapping, so it needs no seals. A file opened read-only is mapped read-only.
        """
        try:
            _check_received(fd, size, 0, what)
            writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            mm = mmap.mmap(fd, size, access=access) if size else None
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


class FileMemory(SharedMemory):
    """A request pool backed by a client's regular file (the HAL's `mmap_fd` memory), as a service holds it.

    NNAPI drivers must accept `mmap_fd` pools. A service cannot safely map such a file itself: unlike
    a sealed memfd, its owner can truncate it under the mapping, and touching the lost pages would
    kill the service (SIGBUS). So the service keeps the file's fd and a private copy of the pool:
    `load()` reads the file into the copy before an execution (a short file is GENERAL_FAILURE),
    `store(regions)` writes the execution's output regions back after it. A file the client opened
    read-only gives a read-only pool: it may hold inputs only (an output in it is GENERAL_FAILURE, the
    status the HAL recommends for memory a driver cannot use).
    """

    __slots__ = ("file_fd", "writable", "_lock")

    def __init__(self, file_fd: int, size: int, writable: bool) -> None:
        mm = mmap.mmap(-1, size) if size else None
        super().__init__(-1, size, mm)
        if not writable:
            self._view = self._view.toreadonly()
        self.file_fd = file_fd
        self.writable = writable
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, fd: int, size: int, what: str = "pool") -> FileMemory:
        """A pool of the first `size` bytes of the regular file `fd` (checked as `from_fd` does); takes `fd`."""
        try:
            _check_received(fd, size, 0, what)
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            return cls(fd, size, writable=mode == os.O_RDWR)
        except BaseException:
            os.close(fd)
            raise

    def load(self) -> None:
        """Read the file into the pool (before an execution reads it)."""
        if not self.size or self._map is None:
            return
        target = memoryview(self._map).cast("B")
        with self._lock:
            done = 0
            while done < self.size:
                n = os.preadv(self.file_fd, [target[done:]], done)
                if n <= 0:
                    raise HalError(
                        ErrorStatus.GENERAL_FAILURE,
                        f"file-backed pool: the file ended after {done} of its {self.size} bytes",
                    )
                done += n

    def store(self, regions: list[tuple[int, int]]) -> None:
        """Write the (offset, length) regions of the pool back to the file (after an execution wrote them)."""
        view = memoryview(self._map).cast("B") if self._map is not None else memoryview(b"")
        with self._lock:
            for offset, length in regions:
                done = 0
                while done < length:
                    n = os.pwrite(self.file_fd, view[offset + done : offset + length], offset + done)
                    if n <= 0:
                        raise HalError(ErrorStatus.GENERAL_FAILURE, "file-backed pool: cannot write the file")
                    done += n

    def close(self) -> None:
        super().close()
        if self.file_fd >= 0:
            os.close(self.file_fd)
            self.file_fd = -1

    def __repr__(self) -> str:
        return f"FileMemory(size={self.size}, writable={self.writable})"


def receive_pool(fd: int, size: int, what: str = "pool") -> SharedMemory:
    """A received request pool: a sealed memfd mapped (`from_fd`), or a client's regular file held as a
    FileMemory (the HAL's `mmap_fd`); takes `fd`."""
    try:
        present = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        present = -1  # not a memfd: a file whose size nothing guarantees
    if present < 0 and stat.S_ISREG(os.fstat(fd).st_mode):
        return FileMemory.from_file(fd, size, what)
    return SharedMemory.from_fd(fd, size, what=what)


def file_pools_in(request: Any) -> list[tuple[FileMemory, list[tuple[int, int]]]]:
    """Before an execution of `request`: load each FileMemory pool; what to `store` after it succeeds
    (each writable file pool with the output regions in it). GENERAL_FAILURE for an output in a
    read-only one."""
    pending = []
    for index, pool in enumerate(request.pools):
        if not isinstance(pool, FileMemory):
            continue
        regions = [
            (a.location.offset, a.location.length)
            for a in request.outputs
            if not a.has_no_value and a.location.pool_index == index and a.location.length
        ]
        if regions and not pool.writable:
            raise HalError(
                ErrorStatus.GENERAL_FAILURE,
                f"request pool {index} is a file opened read-only; it can hold inputs only, not outputs",
            )
        pool.load()
        if regions:
            pending.append((pool, regions))
    return pending


def file_pools_out(pending: list[tuple[FileMemory, list[tuple[int, int]]]]) -> None:
    """After a successful execution: write its outputs back to their files (see `file_pools_in`)."""
    for pool, regions in pending:
        pool.store(regions)


Memory = HostMemory | SharedMemory


def seal_names(seals: int) -> str:
    """'F_SEAL_SHRINK|F_SEAL_WRITE' for a seal mask ('none' for 0)."""
    return "|".join(name for bit, name in _SEAL_NAMES if seals & bit) or "none"


def _check_size(size: int) -> None:
    if size < 0 or size > MAX_POOL_BYTES:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"pool size {size} out of range (0 .. {MAX_POOL_BYTES})")


def _memfd(name: str) -> int:
    try:
        return os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as e:
        if procctl.is_fd_exhaustion(e):
            raise HalError(
                ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                f"cannot create shared memory: out of file descriptors ({procctl.describe_fd_exhaustion()})",
            ) from None
        raise


def _check_received(fd: int, size: int, seals: int, what: str) -> None:
    """A received fd is a regular file, big enough and sealed as required (HalError INVALID_ARGUMENT otherwise)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"{what} fd is {describe_mode(info.st_mode)}; only sealed memfds are accepted",
        )
    if size < 0 or size > MAX_POOL_BYTES or size > info.st_size:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT, f"{what} claims {size} bytes but its memory holds {info.st_size}"
        )
    try:
        present = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        present = 0  # a file without sealing support: not a memfd
    missing = seals & ~present
    if missing:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"{what} is not sealed as required: it lacks {seal_names(missing)} (it has {seal_names(present)}); "
            "create it with SharedMemory.create (pools) or SharedMemory.frozen (models)",
        )


def read_received(fd: int, size: int, what: str) -> bytearray:
    """`size` bytes from the start of a received fd (a memfd or a regular file), read without mapping it.

    A one-off copy needs no seals: reading with pread cannot fault the way a mapping of a file the
    sender truncates would. The fd is checked like a pool's (regular file, big enough); it is closed.
    """
    try:
        _check_received(fd, size, 0, what)
        out = bytearray(size)
        view = memoryview(out)
        done = 0
        while done < size:
            n = os.preadv(fd, [view[done:]], done)
            if n <= 0:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{what} ended after {done} of {size} bytes")
            done += n
        return out
    finally:
        os.close(fd)


def write_received(fd: int, size: int, data: memoryview, what: str) -> None:
    """Write `data` (exactly `size` bytes) at the start of a received fd, without mapping it; closes the fd."""
    try:
        _check_received(fd, size, 0, what)
        if data.nbytes != size:
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT, f"{what} holds {size} bytes; the buffer has {data.nbytes}"
            )
        done = 0
        while done < size:
            n = os.pwrite(fd, data[done:], done)
            if n <= 0:
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"cannot write {what}")
            done += n
    finally:
        os.close(fd)
