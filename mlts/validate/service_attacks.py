"""Hostile clients of a driver service, for the behaviour and fuzz suites: whatever one client does, the
service must live on and its other clients must keep their share.

- `unsealed_rings`: a burst whose rings are memfds that can shrink (no seals), shrunk to nothing
  right after configureExecutionBurst and signalled. A service that maps them dies of SIGBUS at the
  next access; it must refuse them (INVALID_ARGUMENT) instead.
- `Flood`: a client that sends executions and never reads a reply, reconnecting whenever the service
  drops it. A service whose workers wait for it to read stalls everybody for its send timeout.
- `hold_connections` (run as `python -m mlts.validate.service_attacks connections PATH N` so the
  connections are another process's), `hog_buffers` and `bomb`: a client that takes every connection,
  every byte of driver buffers it can, or a 4 KiB request whose WHILE loop doubles a tensor.

Each works against any service speaking the wire protocol (docs/wire-protocol.md); what is checked
about the outcome is up to the suite.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any

from mlts.hal import nnfile
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import BufferDesc, BufferRole, Model, Request
from mlts.ipc import wire
from mlts.ipc.burst_ring import HEADER_BYTES
from mlts.runtime.execution import execute

RING_CAPACITY = 4096


def add_model(dims: tuple[int, ...]) -> Model:
    """out = a + b, float32 tensors of `dims`."""
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, dims)
    y = b.add_input(OperandType.TENSOR_FLOAT32, dims)
    out = b.add_operand(OperandType.TENSOR_FLOAT32, dims)
    b.add_operation(OperationType.ADD, [x, y, b.add_int32(0)], [out])
    b.mark_outputs(out)
    return b.build()


def timed_runs(
    prepared: Any, request: Request, seconds: float, stop: threading.Event | None = None
) -> list[float]:
    """Latencies (s) of executions run one after the other for `seconds` (or until `stop`)."""
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        t0 = time.perf_counter()
        execute(prepared, request)
        out.append(time.perf_counter() - t0)
    return out


# ---------------------------------------------------------------- rings


def _memfd(size: int) -> int:
    fd = os.memfd_create("mlts-validate-unsealed-ring", os.MFD_CLOEXEC)  # cannot ever be sealed
    os.ftruncate(fd, size)
    return fd


def unsealed_rings(device: Any, prepared_handle: int, image: bytes = b"", shrink_to: int = 0) -> str | None:
    """Offer a burst two rings that can shrink (the request ring holding `image`), then shrink them to
    `shrink_to` bytes and signal the listener.

    None when the service refused them with INVALID_ARGUMENT; otherwise what it did wrong (it
    accepted them, or answered otherwise). The caller checks that the service still lives.
    """
    size = HEADER_BYTES + RING_CAPACITY
    fds = [_memfd(size), os.eventfd(0, os.EFD_NONBLOCK), _memfd(size), os.eventfd(0, os.EFD_NONBLOCK)]
    if image:
        os.pwrite(fds[0], image[:size], 0)
    args = {
        "prepared": prepared_handle,
        "polling_us": 0,
        "request_ring": {"fd": 0, "event": 1, "size": size},
        "result_ring": {"fd": 2, "event": 3, "size": size},
    }
    problem = None
    try:
        try:
            result = device.call("configureExecutionBurst", args, fds)
            problem = (
                f"configureExecutionBurst accepted rings that are not sealed (burst {result.get('burst')})"
            )
        except HalError as e:
            if device.dead is not None:
                raise
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                problem = f"unsealed rings answered {e.status.name} ({e.message}), not INVALID_ARGUMENT"
        # Whatever was decided, shrink both rings under any mapping and wake the listener.
        os.ftruncate(fds[0], min(shrink_to, size))
        os.ftruncate(fds[2], min(shrink_to, size))
        os.eventfd_write(fds[1], 1)
        os.eventfd_write(fds[3], 1)
        time.sleep(0.2)
    finally:
        for fd in fds:
            os.close(fd)
    return problem


# ---------------------------------------------------------------- clients that do not read


class RawClient:
    """A client speaking frames by hand on a socket of its own (no client-side checks, no reading unless asked)."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.next_id = 1
        self.hello = self._recv()

    def _recv(self) -> dict[str, Any]:
        frame = wire.recv_frame(self.sock)
        frame.close_fds()
        return frame.message

    def send(self, method: str, args: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> int:
        msg_id = self.next_id
        self.next_id += 1
        wire.send_frame(self.sock, {"kind": "call", "id": msg_id, "method": method, "args": args}, fds=fds)
        return msg_id

    def call(
        self, method: str, args: dict[str, Any], fds: list[int] | tuple[int, ...] = ()
    ) -> dict[str, Any]:
        msg_id = self.send(method, args, fds)
        while True:
            message = self._recv()
            if message.get("kind") == "reply" and message.get("id") == msg_id:
                if not message.get("ok"):
                    raise HalError(ErrorStatus.GENERAL_FAILURE, str(message.get("error"))[:300])
                return message["result"]

    def close(self) -> None:
        self.sock.close()


class Flood:
    """A thread that floods the service at `path` with executions and never reads a reply; when the
    service drops it, it connects again. `connections` counts its connections."""

    def __init__(self, path: str, model: Model, request: Request) -> None:
        self.path = path
        self.model_bytes = nnfile.encode(model)
        self.request = request
        self.connections = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlts-flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30.0)

    def _run(self) -> None:
        model = SharedMemory.frozen(self.model_bytes)
        try:
            while not self._stop.is_set():
                self.connections += 1
                try:
                    self._flood_once(model)
                except OSError:
                    pass  # dropped: connect again
                except Exception as e:  # the service answered the set-up wrongly: say so, stop
                    self.errors.append(f"{type(e).__name__}: {e}"[:300])
                    return
        finally:
            model.close()

    def _flood_once(self, model: SharedMemory) -> None:
        client = RawClient(self.path)
        try:
            handle = client.call("prepareModel", {"model": {"fd": 0, "size": model.size}}, [model.fd])[
                "prepared"
            ]
            pools = [p for p in self.request.pools if isinstance(p, SharedMemory)]
            request = request_doc(
                self.request, [{"memory": k + 1, "fd": k, "size": p.size} for k, p in enumerate(pools)]
            )
            client.call(
                "executeSynchronously", {"prepared": handle, "request": request}, [p.fd for p in pools]
            )
            request = request_doc(self.request, [{"memory": k + 1} for k in range(len(pools))])
            body = {"prepared": handle, "request": request}
            # From here on nothing is read. Sends block once the service stops taking calls; a short
            # timeout lets the thread notice it should stop.
            client.sock.settimeout(0.5)
            while not self._stop.is_set():
                try:
                    client.send("executeSynchronously", body)
                except TimeoutError:
                    continue
        finally:
            client.close()


def request_doc(request: Request, pools: list[dict[str, Any]]) -> dict[str, Any]:
    from mlts.hal import codec

    doc = codec.request_to_dict(request)
    doc["pools"] = pools
    return doc


# ---------------------------------------------------------------- hogs


def hog_buffers(device: Any, prepared: Any, limit: int = 4096) -> tuple[list[Any], HalError | None]:
    """Allocate driver buffers for input 0 of `prepared` until the driver refuses (or `limit` of them);
    (the buffers, the refusal or None). The caller releases the buffers."""
    held: list[Any] = []
    for _ in range(limit):
        try:
            held.append(device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], []))
        except HalError as e:
            if device.dead is not None:
                raise
            return held, e
    return held, None


def hold_connections(path: str, most: int) -> int:
    """Connect to `path` until refused or `most` connections; returns how many are held (they stay
    open until the process ends)."""
    held = []
    for _ in range(most):
        try:
            client = RawClient(path, timeout=5.0)
        except (OSError, wire.WireError):
            break
        if client.hello.get("kind") != "hello":
            client.close()
            break
        held.append(client)
    _HELD.extend(held)
    return len(held)


_HELD: list[Any] = []


def _main(argv: list[str]) -> int:
    """`connections PATH N`: hold up to N connections, print how many, keep them until stdin closes."""
    if len(argv) != 3 or argv[0] != "connections":
        print("usage: python -m mlts.validate.service_attacks connections PATH N", file=sys.stderr)
        return 2
    print(hold_connections(argv[1], int(argv[2])), flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
