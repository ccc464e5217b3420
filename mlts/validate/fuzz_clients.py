"""Fuzz target `clients`: hostile client behaviours with random parameters, against the service only.

An input is a behaviour and its parameters (`u8 kind, u32 a, u32 b, u32 c`, then for rings the bytes
of a ring image):

- 0 unsealed rings: a burst offered rings that can shrink, holding the image, shrunk to `b` bytes
  after configureExecutionBurst and signalled;
- 1 a client that does not read: `a` executions sent without reading a reply, half of another frame
  when `b` is odd, then silence for `c` ms and a hang-up;
- 2 a buffer hog: `a` driver buffers held while another client allocates one;
- 3 a connection hog: `a` connections opened at once from this process, then closed.

After each, the service must be alive and answer a new client in time ("crash" and "hang" findings);
a service that accepts unsealed rings, or refuses another client a buffer while one client hogs
them, gives a "wrong" finding. There is no in-process campaign: these are about the service.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import BufferDesc, BufferRole
from mlts.ipc import wire
from mlts.validate.behaviour_isolation import simple_case
from mlts.validate.fuzz_targets import Finding, ServiceContext, Target
from mlts.validate.service_attacks import RawClient, hog_buffers, request_doc, unsealed_rings

_HEAD = struct.Struct("<BIII")
KINDS = ("unsealed-rings", "no-reading", "buffer-hog", "connection-hog")
#: Inputs of one campaign: each is a whole client's life, so far fewer than for the decoders.
QUICK_INPUTS = 4
FULL_INPUTS = 40


def encode(kind: int, a: int, b: int, c: int, image: bytes = b"") -> bytes:
    return _HEAD.pack(kind, a, b, c) + image


class ClientTarget(Target):
    """Hostile clients of the service (see the module's docstring)."""

    name = "clients"
    engines = ("service",)
    max_inputs = (QUICK_INPUTS, FULL_INPUTS)

    def __init__(self) -> None:
        super().__init__()
        self.seeds = [
            encode(0, 0, 0, 0, bytes(256)),
            encode(1, 500, 1, 100),
            encode(2, 64, 0, 0),
            encode(3, 32, 0, 0),
        ]
        self._turn = 0

    def mutate(self, rng: random.Random) -> bytes:
        # The behaviours take turns (every one comes up even in a short campaign), parameters are random.
        kind = self._turn % len(KINDS)
        self._turn += 1
        a, b, c = rng.randrange(1 << 16), rng.randrange(1 << 16), rng.randrange(1 << 16)
        image = rng.randbytes(rng.choice((0, 64, 256, 4096))) if kind == 0 else b""
        return encode(kind, a, b, c, image)

    def inproc(self, data: bytes) -> Finding | None:
        return None

    def minimise(self, data: bytes, still_fails: Callable[[bytes], bool], budget: int) -> bytes:
        return data  # one behaviour and three numbers: nothing to shrink

    def service(self, ctx: ServiceContext, data: bytes) -> Finding | None:
        if len(data) < _HEAD.size:
            return None
        kind, a, b, c = _HEAD.unpack_from(data)
        if kind >= len(KINDS):
            return None
        service = ctx.shared()
        name = KINDS[kind]
        try:
            wrong = _BEHAVIOURS[kind](service, ctx, a, b, c, data[_HEAD.size :])
        except HalError as e:
            wrong = None
            if not service.alive():
                return Finding(
                    "crash", f"{name}: the service died ({e.message})"[:400], data, f"clients-{name}-crash"
                )
        if not service.alive():
            return Finding("crash", f"{name}: the service died", data, f"clients-{name}-crash")
        error = _probe(service, ctx.timeout)
        if error is not None:
            kind_of = "hang" if "no reply within" in error.message else "crash"
            return Finding(
                kind_of,
                f"{name}: a new client got no answer afterwards ({error.message})"[:400],
                data,
                f"clients-{name}-{kind_of}",
            )
        if wrong:
            return Finding("wrong", f"{name}: {wrong}"[:400], data, f"clients-{name}-wrong")
        return None


def _probe(service: Any, timeout: float) -> HalError | None:
    """None once a new client of `service` gets an answer; its error otherwise. A refusal for want of
    connections is retried until `timeout`: the service frees the slots of the clients that just hung
    up as it notices them."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            probe = service.connect(query_timeout=timeout)
            try:
                probe.ping()
            finally:
                probe.close()
            return None
        except HalError as e:
            if e.status != ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT or time.monotonic() > deadline:
                return e
            time.sleep(0.05)


def _unsealed(service: Any, ctx: ServiceContext, a: int, b: int, c: int, image: bytes) -> str | None:
    with service.connect(query_timeout=ctx.timeout) as device:
        model, _ = simple_case()
        prepared = device.prepareModel(model)
        return unsealed_rings(device, prepared.handle, image, b % (1 << 13))


def _no_reading(service: Any, ctx: ServiceContext, a: int, b: int, c: int, image: bytes) -> str | None:
    model, request = simple_case()
    data = nnfile.encode(model)
    memory = SharedMemory.frozen(data)
    client = RawClient(service.path, ctx.timeout)
    try:
        handle = client.call("prepareModel", {"model": {"fd": 0, "size": len(data)}}, [memory.fd])["prepared"]
        pools = [p for p in request.pools if isinstance(p, SharedMemory)]
        refs = [{"fd": k, "size": p.size} for k, p in enumerate(pools)]
        body = {"prepared": handle, "request": request_doc(request, refs)}
        client.sock.settimeout(0.2)
        for _ in range(a % 3000 + 1):
            try:
                client.send("executeSynchronously", body, [p.fd for p in pools])
            except (TimeoutError, OSError):
                break  # the service takes nothing more (or dropped us): that is its right
        if b & 1:
            try:
                client.sock.send(wire.encode_frame({"kind": "call", "id": 0, "method": "ping"})[:10])
            except OSError:
                pass
        time.sleep((c % 500) / 1000)
    finally:
        client.close()
        memory.close()
    return None


def _buffer_hog(service: Any, ctx: ServiceContext, a: int, b: int, c: int, image: bytes) -> str | None:
    model, _ = simple_case()
    with (
        service.connect(query_timeout=ctx.timeout) as hog,
        service.connect(query_timeout=ctx.timeout) as other,
    ):
        prepared = hog.prepareModel(model)
        held, _ = hog_buffers(hog, prepared, a % 512 + 1)
        try:
            if not held:
                return None  # no memory domains
            mine = other.prepareModel(model)
            try:
                other.allocate(BufferDesc(), [mine], [BufferRole(0, 0)], []).close()
            except HalError as e:
                return f"a client holding {len(held)} buffers left none for another ({e.message})"
        finally:
            for buffer in held:
                buffer.close()
    return None


def _connection_hog(service: Any, ctx: ServiceContext, a: int, b: int, c: int, image: bytes) -> str | None:
    held = []
    try:
        for _ in range(a % 128 + 1):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(sock)
            try:
                sock.connect(service.path)
            except OSError:
                break
    finally:
        for sock in held:
            sock.close()
    return None


_BEHAVIOURS = (_unsealed, _no_reading, _buffer_hog, _connection_hog)
