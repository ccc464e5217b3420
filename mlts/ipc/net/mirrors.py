"""Mirrors: the service's copies of a network client's memories, and the client's bookkeeping of them.

A mirror is a memfd in the service process that stands for one memory of the client (a request pool,
a model, a burst slot, a cache file). The client names it by a number it chose; the service bridge
creates it (CREATE), writes the bytes the client sends (DATA), hands duplicates of its fd to the
service as if the client had sent them (FD_MEMORY), reads back what the client asks for (READ,
READ_FILE) and closes it when the client releases it (RELEASE) or once the call that made it a
transient one has answered. Every size is checked against the mirror's, and the mirrors of one
connection are bounded in number and in bytes.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from mlts.hal.memory import MAX_POOL_BYTES

#: Seals a client may ask for (the rest of a memfd's seals are not the service's business).
SEAL_MASK = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_IO_CHUNK = 1 << 24


class MirrorError(ValueError):
    """An attachment the mirrors cannot take (the message says why)."""


@dataclass
class Mirror:
    id: int
    fd: int
    size: int
    seals: int
    file: bool
    #: The call whose last answer ends this mirror (a transient one), or None.
    call: int | None = None
    write_sealed: bool = False


class MirrorTable:
    """The mirrors of one network connection (service side)."""

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.mirrors: dict[int, Mirror] = {}
        self.bytes = 0

    def create(self, ident: int, size: int, seals: int, *, file: bool, call: int | None) -> Mirror:
        if ident in self.mirrors:
            raise MirrorError(f"mirror {ident} exists already")
        if not 0 <= size <= MAX_POOL_BYTES:
            raise MirrorError(f"mirror {ident}: size {size} is outside 0..{MAX_POOL_BYTES}")
        if len(self.mirrors) >= self.max_count:
            raise MirrorError(
                f"this connection holds {len(self.mirrors)} mirrors already (at most {self.max_count})"
            )
        if self.bytes + size > self.max_bytes:
            raise MirrorError(
                f"mirror {ident} of {size} bytes would pass this connection's {self.max_bytes} bytes of memory"
            )
        fd = os.memfd_create("mlts-net-mirror", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            if not file:
                # Sized once: shrinking or growing is sealed now, writing only once the service has it.
                fixed = seals & (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
                if fixed:
                    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fixed)
        except BaseException:
            os.close(fd)
            raise
        mirror = Mirror(ident, fd, size, seals & SEAL_MASK, file, call)
        self.mirrors[ident] = mirror
        self.bytes += size
        return mirror

    def get(self, ident: int) -> Mirror:
        mirror = self.mirrors.get(ident)
        if mirror is None:
            raise MirrorError(f"mirror {ident} does not exist (never created, or released)")
        return mirror

    def write(self, ident: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        mirror = self.get(ident)
        end = offset + len(data)
        if end > mirror.size:
            raise MirrorError(f"DATA for bytes {offset}..{end} of mirror {ident}, which has {mirror.size}")
        if mirror.write_sealed:
            raise MirrorError(f"mirror {ident} is sealed against writing")
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(mirror.fd, view[done : done + _IO_CHUNK], offset + done)

    def check_range(self, ident: int, offset: int, length: int) -> None:
        mirror = self.get(ident)
        if offset + length > mirror.size:
            raise MirrorError(
                f"READ of bytes {offset}..{offset + length} of mirror {ident}, which has {mirror.size}"
            )

    def deliver(self, ident: int) -> int:
        """A duplicate of the mirror's fd for the service (sealed against writing first when asked)."""
        mirror = self.get(ident)
        if mirror.seals & fcntl.F_SEAL_WRITE and not mirror.write_sealed and not mirror.file:
            fcntl.fcntl(mirror.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
            mirror.write_sealed = True
        return os.dup(mirror.fd)

    def release(self, ident: int) -> None:
        mirror = self.mirrors.pop(ident, None)
        if mirror is not None:
            self.bytes -= mirror.size
            os.close(mirror.fd)

    def release_call(self, call: int) -> None:
        for ident in [m.id for m in self.mirrors.values() if m.call == call]:
            self.release(ident)

    def close(self) -> None:
        for ident in list(self.mirrors):
            self.release(ident)


def read_range(fd: int, offset: int, length: int) -> bytearray:
    """`length` bytes of `fd` from `offset` (zeros past its end)."""
    out = bytearray(length)
    view = memoryview(out)
    done = 0
    while done < length:
        n = os.preadv(fd, [view[done : done + _IO_CHUNK]], offset + done)
        if n <= 0:
            break
        done += n
    return out


def write_range(fd: int, offset: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done : done + _IO_CHUNK], offset + done)
