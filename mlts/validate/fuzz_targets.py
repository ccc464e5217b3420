"""Fuzz targets: models, requests, wire frames and burst rings, in-process and against the driver's service.

Each target turns seeds into mutants (`mutate`) and runs one input two ways:

- `inproc(data)`: through the functions the service itself decodes and validates
  that kind of input with (mlts.hal: nnfile, codec, validate, wire, burst_ring,
  burst_messages), in this process, so thousands run per second and atheris can
  measure coverage. Only the documented refusals (HalError, ValueError, WireError,
  RingError) are allowed; any other exception is a finding ("crash").
- `service(ctx, data)`: sent to the real driver service (one that does not
  pre-validate, so the driver's own checks answer). The service must answer or hang
  up in time ("hang" otherwise) and stay alive ("crash" otherwise); models and requests
  the reference validator refuses must not be accepted ("wrong answer").
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlts.hal import codec, nnfile, validate
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import Model
from mlts.ipc import wire
from mlts.ipc.burst_messages import decode_request
from mlts.ipc.burst_ring import HEADER_BYTES, MAX_CAPACITY, MIN_CAPACITY, Ring, RingError
from mlts.runtime.burst import RemoteBurst
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.remote_prepared import RemotePreparedModel
from mlts.validate import core
from mlts.validate import fuzz_seeds as seeds
from mlts.validate.fuzz_mutate import ddmin_bytes, mutate_bytes, mutate_doc, shrink_doc
from mlts.validate.replay import drain_replies

EXPECTED = (HalError, ValueError, wire.WireError, RingError)
MAX_POOL_BYTES = 1 << 20


@dataclass(frozen=True)
class Finding:
    """A fuzz finding: "crash", "hang" or "wrong", what happened, and the input."""

    kind: str
    detail: str
    data: bytes
    key: str  # what makes two findings the same bug (exception type and place)


def _unexpected(e: BaseException, data: bytes) -> Finding:
    tb = traceback.extract_tb(e.__traceback__)
    where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else "?"
    return Finding("crash", f"{type(e).__name__} at {where}: {e}"[:400], data, f"{type(e).__name__}@{where}")


def _guard(fn: Any, data: bytes) -> Finding | None:
    try:
        fn(data)
    except EXPECTED:
        return None
    except RecursionError as e:
        return _unexpected(e, data)
    except Exception as e:
        return _unexpected(e, data)
    return None


class Target:
    """A kind of input; subclasses give seeds, mutation and the two ways to run one."""

    name = ""
    #: The campaigns this kind of input has (a target about the service alone has no in-process one).
    engines: tuple[str, ...] = ("in-process", "service")
    #: At most this many inputs per campaign (quick, full), None: the suite's share; for inputs that
    #: are each a whole client's life.
    max_inputs: tuple[int, int] | None = None

    def __init__(self) -> None:
        self.seeds: list[bytes] = []

    def mutate(self, rng: random.Random) -> bytes:
        return mutate_bytes(rng, rng.choice(self.seeds), self.seeds)

    def mutate_from(self, rng: random.Random, data: bytes) -> bytes:
        """A mutant of `data` (an input that reached new coverage of the driver, for coverage-guided
        fuzzing); by default a byte mutation, splicing from the seeds."""
        return mutate_bytes(rng, data, self.seeds)

    def check(self, data: bytes) -> None:
        raise NotImplementedError

    def inproc(self, data: bytes) -> Finding | None:
        return _guard(self.check, data)

    def service(self, ctx: ServiceContext, data: bytes) -> Finding | None:
        """Send `data` to the driver's service (`ctx`): a crash, hang or wrong answer, or None."""
        raise NotImplementedError

    def minimise(self, data: bytes, still_fails: Callable[[bytes], bool], budget: int) -> bytes:
        """A smaller input that still fails: delta debugging on the bytes."""
        return ddmin_bytes(data, still_fails, budget)


# ---------------------------------------------------------------- models


def decode_model(data: bytes) -> Model:
    return nnfile.decode(data).model


class ModelTarget(Target):
    """.nnm bytes: structure mutations of the model document (checksums fixed) and raw byte mutations."""

    name = "models"

    def __init__(self) -> None:
        super().__init__()
        self.model_seeds = seeds.model_seeds()
        self.seeds = [seeds.nnm_bytes(s.doc, s.blobs) for s in self.model_seeds]

    def mutate(self, rng: random.Random) -> bytes:
        if rng.random() < 0.75:
            s = rng.choice(self.model_seeds)
            return seeds.nnm_bytes(mutate_doc(rng, s.doc), s.blobs)
        data = mutate_bytes(rng, rng.choice(self.seeds), self.seeds)
        return seeds.fix_checksum(data) if rng.random() < 0.7 else data

    def mutate_from(self, rng: random.Random, data: bytes) -> bytes:
        """A structure mutation of `data`'s model document when it reads (checksums fixed), else bytes."""
        parsed = seeds.parse_nnm(data)
        if parsed is not None and rng.random() < 0.75:
            return seeds.nnm_bytes(mutate_doc(rng, parsed[0]), parsed[1])
        return seeds.fix_checksum(mutate_bytes(rng, data, self.seeds))

    def check(self, data: bytes) -> None:
        validate.validate_model(decode_model(data))

    def minimise(self, data: bytes, still_fails: Callable[[bytes], bool], budget: int) -> bytes:
        """Shrink the model document (operations, operands, lists) and re-encode; bytes if it has none."""
        parsed = seeds.parse_nnm(data)
        if parsed is None:
            return ddmin_bytes(data, still_fails, budget)
        doc, blobs = parsed
        small = shrink_doc(doc, lambda d: still_fails(seeds.nnm_bytes(d, blobs)), budget)
        out = seeds.nnm_bytes(small, blobs)
        return out if len(out) < len(data) and still_fails(out) else data

    @staticmethod
    def verdict(data: bytes) -> str | None:
        """The reference validator's word: None (valid) or why the model is invalid."""
        try:
            validate.validate_model(decode_model(data))
        except (HalError, ValueError) as e:
            return str(getattr(e, "message", e))
        return None

    def service(self, ctx: ServiceContext, data: bytes) -> Finding | None:
        device = ctx.device
        memory = SharedMemory.frozen(data, "mlts-fuzz-model")
        args = seeds.prepare_args(len(data))
        try:
            try:
                result = device.call("prepareModel", args, [memory.fd], timeout=ctx.timeout)
            except HalError as e:
                return ctx.judge(e, data, "prepareModel")
        finally:
            memory.close()
        handle = result.get("prepared")
        if type(handle) is int:
            RemotePreparedModel(device, handle).close()
        why = self.verdict(data)
        if why is not None:
            return Finding(
                "wrong",
                f"prepareModel accepted a model the validator refuses: {why}"[:400],
                data,
                "accepted-invalid-model",
            )
        return None


# ---------------------------------------------------------------- requests


class RequestTarget(Target):
    """Request documents (JSON) for a fixed two-input model; pools are described by their sizes."""

    name = "requests"

    def __init__(self) -> None:
        super().__init__()
        self.model = seeds.request_model()
        self.doc, self.pool_size = seeds.request_seed(self.model)
        self.seeds = [json.dumps(self.doc).encode()]

    def mutate(self, rng: random.Random) -> bytes:
        if rng.random() < 0.85:
            return json.dumps(mutate_doc(rng, self.doc)).encode()
        return mutate_bytes(rng, self.seeds[0])

    def mutate_from(self, rng: random.Random, data: bytes) -> bytes:
        """A structure mutation of `data`'s request document when it is JSON, else bytes."""
        try:
            doc = json.loads(data)
        except ValueError:
            return mutate_bytes(rng, data, self.seeds)
        return json.dumps(mutate_doc(rng, doc)).encode()

    def _pools(self, doc: Any) -> list[HostMemory]:
        descs = codec.request_pool_descs(doc)
        pools = []
        for d in descs:
            size = d.get("size")
            if type(size) is not int or not 0 <= size <= MAX_POOL_BYTES:
                raise ValueError(f"pool size {size!r}")
            pools.append(HostMemory(bytearray(size)))
        return pools

    def check(self, data: bytes) -> None:
        doc = json.loads(data)
        request = codec.request_from_dict(doc, self._pools(doc))
        validate.validate_request(request, self.model)

    def minimise(self, data: bytes, still_fails: Callable[[bytes], bool], budget: int) -> bytes:
        try:
            doc = json.loads(data)
        except ValueError:
            return ddmin_bytes(data, still_fails, budget)
        small = json.dumps(shrink_doc(doc, lambda d: still_fails(json.dumps(d).encode()), budget)).encode()
        return small if len(small) < len(data) and still_fails(small) else data

    def verdict(self, data: bytes) -> str | None:
        try:
            self.check(data)
        except EXPECTED as e:
            return str(getattr(e, "message", e))
        return None

    def service(self, ctx: ServiceContext, data: bytes) -> Finding | None:
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return None  # not JSON: the frames target covers bytes the codec cannot read
        pools = doc.get("pools")
        if not isinstance(pools, list):
            pools = []
        memories = []
        try:
            for d in pools[: wire.MAX_FDS]:
                size = d.get("size") if isinstance(d, dict) else None
                ok = type(size) is int and 0 <= size <= MAX_POOL_BYTES
                memories.append(SharedMemory.create(size if ok and size else 64, "mlts-fuzz-pool"))
            args = {
                "prepared": ctx.prepared(self.model),
                "measure": 0,
                "deadline": None,
                "loop_timeout": None,
                "request": doc,
            }
            try:
                ctx.device.call("executeSynchronously", args, [m.fd for m in memories], timeout=ctx.timeout)
            except HalError as e:
                return ctx.judge(e, data, "executeSynchronously")
        finally:
            for m in memories:
                m.close()
        why = self.verdict(data)
        if why is not None:
            return Finding(
                "wrong",
                f"executeSynchronously ran a request the validator refuses: {why}"[:400],
                data,
                "accepted-invalid-request",
            )
        return None


# ---------------------------------------------------------------- frames


class FrameTarget(Target):
    """Raw bytes on the service's socket: frames as clients send them, mutated."""

    name = "frames"

    def __init__(self) -> None:
        super().__init__()
        self.seeds = seeds.frame_seeds()

    def check(self, data: bytes) -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            a.sendall(data)
            a.shutdown(socket.SHUT_WR)
            while True:
                try:
                    frame = wire.recv_frame(b)
                except wire.ConnectionClosed:
                    return
                except wire.WireError as e:
                    if e.fatal:
                        return
                    continue
                frame.close_fds()
        finally:
            a.close()
            b.close()

    def service(self, ctx: ServiceContext, data: bytes) -> Finding | None:
        service = ctx.shared()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(ctx.timeout)
            sock.connect(service.path)
            wire.recv_frame(sock).close_fds()  # the hello
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            answered = drain_replies(sock, ctx.timeout)
        except OSError as e:
            answered = f"connection error {e}"
        finally:
            sock.close()
        if answered is None:
            return Finding(
                "hang",
                f"the service neither answered nor hung up within {ctx.timeout:g} s",
                data,
                "frame-hang",
            )
        if not service.alive():
            return Finding(
                "crash", f"the driver service died after the frame ({answered})", data, "frame-crash"
            )
        return None


# ---------------------------------------------------------------- burst rings


class RingTarget(Target):
    """Images of a burst's request ring (192-byte header, then the data area) with hostile contents."""

    name = "rings"

    def __init__(self) -> None:
        super().__init__()
        self.model = seeds.request_model()
        self.seeds = seeds.ring_seeds(self.model)

    def mutate(self, rng: random.Random) -> bytes:
        base = rng.choice(self.seeds)
        used = HEADER_BYTES + 256  # mutate where the messages and counters are, keep the size
        head = mutate_bytes(rng, base[:used])
        head = (head + bytes(used))[:used]
        if rng.random() < 0.2:  # a write counter anywhere, e.g. past the capacity
            head = (
                head[:0]
                + struct.pack("<Q", rng.choice((1, 3, 4, 5, 4096, 4100, 2**32, 2**64 - 1)))
                + head[8:]
            )
        return head + base[used:]

    def mutate_from(self, rng: random.Random, data: bytes) -> bytes:
        """`data`'s header and messages mutated, its size kept."""
        used = HEADER_BYTES + 256
        head = (mutate_bytes(rng, data[:used]) + bytes(used))[:used]
        return head + data[used:]

    def check(self, data: bytes) -> None:
        capacity = len(data) - HEADER_BYTES
        if not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
            raise ValueError(f"ring image of {len(data)} bytes")
        ring = Ring.create(capacity, "mlts-fuzz-ring")
        try:
            ring.load_image(data)
            for _ in range(64):
                payload = ring.read(capacity)
                if payload is None:
                    return
                decode_request(payload)
        finally:
            ring.close()

    def service(self, ctx: ServiceContext, data: bytes) -> Finding | None:
        capacity = len(data) - HEADER_BYTES
        if not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
            return None
        device = ctx.device
        handle = ctx.prepared(self.model)
        try:
            burst = RemoteBurst(device, handle, polling_us=0, capacity=capacity)
        except HalError as e:
            return ctx.judge(e, data, "configureExecutionBurst")
        try:
            burst.requests.load_image(data)
            burst.requests.signal()
            # With nothing published (write counter 0) the driver rightly waits; it must only live on.
            if struct.unpack_from("<Q", data, 0)[0] != 0 and not _answered(burst, device, ctx.timeout):
                return Finding("hang", f"no burst result or end within {ctx.timeout:g} s", data, "ring-hang")
        finally:
            burst.close()
        try:
            device.ping(timeout=ctx.timeout)
        except HalError as e:
            return ctx.judge(e, data, "ping after the ring")
        return None


def _answered(burst: RemoteBurst, device: Any, timeout: float) -> bool:
    """Whether the driver answered on the result ring (or ended the burst, or died) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if burst.results.wait(0.05, 0):
            return True
        if device.dead is not None or not device.process.alive():
            return True  # a death, which the ping below reports
    return False


class ServiceContext:
    """The driver service a fuzz run talks to: a raw client, its prepared models, a shared service for frames.

    `kind` names the client (mlts.validate.core.Target): "raw", or core.COVERAGE for a service that
    measures the driver's coverage (`features()` reads it)."""

    def __init__(self, target: core.Target, timeout: float, kind: str = "raw") -> None:
        self.target = target
        self.timeout = timeout
        self.kind = kind
        #: id(model) -> (the model, the client it was prepared on, the prepared model). The entry keeps the
        #: model alive, so its id cannot be reused by another model while the entry exists.
        self._prepared: dict[int, tuple[Model, RemoteDevice, RemotePreparedModel]] = {}

    @property
    def device(self) -> RemoteDevice:
        if self.kind == core.COVERAGE:
            device = self.target.coverage_device()
            assert device is not None  # a coverage context is made only where there can be one
            return device
        return self.target.raw_device()

    def features(self) -> tuple[int, int] | None:
        """(features the driver has reached, how many since the last call), or None when the service
        does not measure coverage or gives no answer."""
        if self.kind != core.COVERAGE:
            return None
        try:
            report = self.device.call("coverageReport", {}, timeout=self.timeout)
        except HalError:
            return None
        total, new = report.get("features"), report.get("new")
        return (total, new) if type(total) is int and type(new) is int else None

    def prepared(self, model: Model) -> int:
        """The service's handle of `model` prepared on the current raw client (prepared once per client)."""
        device = self.device
        entry = self._prepared.get(id(model))
        if entry is None or entry[0] is not model or entry[1] is not device:
            entry = (model, device, device.prepareModel(model))
            self._prepared[id(model)] = entry
        return entry[2].handle

    def shared(self) -> Any:
        return self.target.shared_service(raw=True)

    def judge(self, error: HalError, data: bytes, method: str) -> Finding | None:
        """A refusal is fine; a dead or silent driver is a finding."""
        device = self.target.opened(self.kind)
        if "no reply within" in error.message:
            return Finding("hang", f"{method}: {error.message}"[:400], data, f"hang:{method}")
        if (device is not None and device.driver_died) or error.status == ErrorStatus.DEVICE_UNAVAILABLE:
            return Finding(
                "crash", f"{method}: the driver died: {error.message}"[:400], data, f"crash:{method}"
            )
        return None


TARGETS = {t.name: t for t in (ModelTarget, RequestTarget, FrameTarget, RingTarget)}
