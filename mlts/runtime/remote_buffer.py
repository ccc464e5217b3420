"""RemoteBuffer: a driver-managed buffer (memory domains) of a driver service, named by its token.

`allocate` asks the service for a buffer with roles of prepared models of the
same device; copies move data through shared memory: a SharedMemory (memfd
or a file mapped with `SharedMemory.from_fd`) goes across as is, any other
bytes through a temporary memfd.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.interface import Buffer
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import BufferDesc, BufferRole

if TYPE_CHECKING:
    from mlts.runtime.remote import RemoteDevice

Bytes = SharedMemory | HostMemory | memoryview | bytes | bytearray


def allocate(
    device: RemoteDevice,
    desc: BufferDesc,
    prepared_models: Sequence[Any],
    input_roles: Sequence[BufferRole],
    output_roles: Sequence[BufferRole],
) -> RemoteBuffer:
    """The service's `allocate`: prepared models must be this device's."""
    handles = []
    for n, prepared in enumerate(prepared_models):
        if getattr(prepared, "device", None) is not device or getattr(prepared, "_closed", True):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                f"allocate: prepared model {n} ({prepared!r}) is not a live prepared model of {device.name!r}",
            )
        handles.append(prepared.handle)

    def roles(items: Sequence[BufferRole]) -> list[dict[str, Any]]:
        return [{"model": r.model_index, "io": r.io_index, "frequency": r.frequency} for r in items]

    result = device.call(
        "allocate",
        {
            "desc": {"dimensions": [int(d) for d in desc.dimensions]},
            "prepared": handles,
            "input_roles": roles(input_roles),
            "output_roles": roles(output_roles),
        },
    )
    token = device.decode("allocate", lambda: int(result["token"]))
    dims = device.decode("allocate", lambda: tuple(int(d) for d in result["dimensions"]))
    return RemoteBuffer(device, token, dims)


class RemoteBuffer(Buffer):
    """A buffer in the driver service; pass `token` as a request pool to use it in an execution."""

    def __init__(self, device: RemoteDevice, token: int, dimensions: tuple[int, ...]) -> None:
        self.device = device
        self.token = token
        #: The dimensions the service reported after the last allocate or copy (executions may change them).
        self.dimensions = dimensions
        self._closed = False
        self._lock = threading.Lock()

    def _copy(self, method: str, memory: SharedMemory, extra: dict[str, Any]) -> None:
        if self._closed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{method}: buffer token {self.token} was released")
        if memory.fd < 0:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{method}: the memory is closed")
        result = self.device.call(
            method, {"token": self.token, "memory": {"fd": 0, "size": memory.size}, **extra}, [memory.fd]
        )
        self.dimensions = self.device.decode(method, lambda: tuple(int(d) for d in result["dimensions"]))

    def copyTo(self, dst: Bytes) -> None:  # type: ignore[override]
        """Copy the buffer into `dst`, which must be exactly its size and writable."""
        if isinstance(dst, SharedMemory):
            self._copy("bufferCopyTo", dst, {})
            return
        view = dst.buffer if isinstance(dst, HostMemory) else memoryview(dst)
        temp = SharedMemory.create(view.nbytes, "mlts-buffer-copy")
        try:
            self._copy("bufferCopyTo", temp, {})
            if view.readonly:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "copyTo: the destination is read-only")
            view.cast("B")[:] = temp.buffer
        finally:
            temp.close()

    def copyFrom(self, src: Bytes, dimensions: Sequence[int] = ()) -> None:  # type: ignore[override]
        """Fill the buffer from `src`; `dimensions` complete those the buffer leaves open."""
        extra = {"dimensions": [int(d) for d in dimensions]}
        if isinstance(src, SharedMemory):
            self._copy("bufferCopyFrom", src, extra)
            return
        view = src.buffer if isinstance(src, HostMemory) else memoryview(src)
        temp = SharedMemory.create(view.nbytes, "mlts-buffer-copy")
        try:
            if view.nbytes:
                temp.buffer[:] = view.cast("B")
            self._copy("bufferCopyFrom", temp, extra)
        finally:
            temp.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the buffer in the service; errors of a dead driver are ignored."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.device.call("releaseBuffer", {"token": self.token})
        except HalError:
            pass

    def __enter__(self) -> RemoteBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteBuffer({self.device.name!r}, token={self.token})"
