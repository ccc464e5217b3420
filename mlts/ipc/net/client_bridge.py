"""The client end of a network connection: a bridge between a local socket the runtime talks to as to
any shared service and the TCP stream to the service machine.

The runtime sends its frames, file descriptors included, into the local socket. The bridge reads
each call and sends it on with its fds turned into attachments: a memory becomes a mirror (created
once, then only the bytes an execution reads travel with each call, and the bytes it writes come
back with the call's last answer and are written into the memory before the runtime sees the
answer); a sync fence becomes a fence record (the bridge tells the service when it signals); a burst's
rings stay here, the bridge reading the request ring and writing the result ring while their
messages travel as `burst` frames. Deadlines (CLOCK_MONOTONIC of this machine) are moved to the
service's clock. What comes back is turned into fds again (a service fence: an eventfd this bridge
signals when the service says so) and passed to the runtime.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import ssl
import stat
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mlts.hal import codec
from mlts.hal.enums import ErrorStatus
from mlts.hal.fence import ERROR_VALUE, FenceState, is_eventfd, peek_state
from mlts.hal.types import RequestArgument
from mlts.ipc import burst_messages as msg
from mlts.ipc import compact_calls, wire
from mlts.ipc.burst_ring import Ring, RingError
from mlts.ipc.net import attachments as att
from mlts.ipc.net.channel import Channel, frame_parts
from mlts.ipc.net.mirrors import read_range, write_range
from mlts.ipc.net.pump import Pump
from mlts.ipc.net.regions import merge, subtract
from mlts.ipc.net.service_bridge import PAYLOAD_LIMIT

log = logging.getLogger("mlts.ipc.net")

_EXECUTIONS = ("executeSynchronously", "execute", "executeFenced")
#: Where a burst request's deadline is (docs/burst-protocol.md), and a compact call's.
_BURST_DEADLINE = 12
_COMPACT_DEADLINE = compact_calls.CALL.size + _BURST_DEADLINE
_I64_MAX = (1 << 63) - 1


@dataclass
class _Mirror:
    id: int
    fd: int
    size: int
    key: tuple[int, int]
    refs: set = field(default_factory=set)
    #: Output ranges of executions in flight (by call key): not sent as inputs meanwhile.
    writing: dict[object, list[tuple[int, int]]] = field(default_factory=dict)


@dataclass
class _Call:
    method: str
    transients: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)  # mirrors with output ranges of this call
    files: dict[int, int] = field(default_factory=dict)  # mirror id -> the client's file fd (ours)
    stream: int | None = None
    provides: bool = False


@dataclass
class _Stream:
    id: int
    requests: Ring
    results: Ring
    handle: int | None = None
    held: list[tuple[bytes, bool]] = field(default_factory=list)

    def close(self) -> None:
        for ring in (self.requests, self.results):
            try:
                ring.close()
            except (ValueError, OSError):
                pass


class LocalError(Exception):
    """A call this bridge cannot send (answered to the runtime as INVALID_ARGUMENT)."""


class ClientBridge:
    """Runs between the runtime's local socket and the network channel until either ends."""

    def __init__(
        self, channel: Channel, local: socket.socket, where: str, offset_ns: int, timeout: float
    ) -> None:
        self.channel = channel
        self.local = local
        self.where = where
        self.offset_ns = offset_ns
        self.timeout = timeout
        self._lock = threading.RLock()
        self._mirrors: dict[int, _Mirror] = {}
        self._by_key: dict[tuple[int, int], _Mirror] = {}
        self._next_mirror = 1
        self._memory_ids: dict[int, int] = {}
        self._slots: dict[tuple[int, int], int] = {}
        self._calls: dict[int, _Call] = {}
        self._fences_out: dict[int, int] = {}  # our fence id -> the runtime's fence (our dup), watched
        self._next_fence = 1
        self._fences_in: dict[
            int, tuple[int, tuple[int, int], int | None]
        ] = {}  # service fence -> (eventfd, key, call)
        self._fence_keys: dict[tuple[int, int], int] = {}
        self._streams: dict[int, _Stream] = {}
        self._next_stream = 1
        self._decoder = compact_calls.CallDecoder()
        self._pump = Pump("net-client-pump", lambda e: self.close(f"its event thread failed: {e}"))
        self._pending_release: list[int] = []  # mirrors let go of between frames: RELEASE with the next
        self._local_lock = threading.Lock()  # whole frames into the runtime's socket
        self.closed = False
        self.reason = ""

    def start(self) -> None:
        threading.Thread(target=self._run_local, name="net-client-in", daemon=True).start()
        threading.Thread(target=self._run_network, name="net-client-out", daemon=True).start()

    def close(self, why: str) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.reason = why
        self._pump.stop()
        self.channel.close()
        try:
            self.local.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.local.close()
        with self._lock:
            for mirror in self._mirrors.values():
                os.close(mirror.fd)
            self._mirrors.clear()
            self._by_key.clear()
            wire.close_fds(list(self._fences_out.values()))
            self._fences_out.clear()
            for fd, _, _ in self._fences_in.values():
                try:
                    os.eventfd_write(fd, ERROR_VALUE)  # the service is gone: its fences end in error
                except OSError:
                    pass
                os.close(fd)
            self._fences_in.clear()
            for stream in self._streams.values():
                try:
                    stream.results.mark_closed()
                except ValueError:
                    pass
                stream.close()
            self._streams.clear()
            for call in self._calls.values():
                wire.close_fds(list(call.files.values()))
            self._calls.clear()

    # ------------------------------------------------------------ runtime -> service

    def _run_local(self) -> None:
        try:
            while not self.closed:
                try:
                    frame = wire.recv_frame(self.local)
                except (wire.ConnectionClosed, OSError):
                    self.close("closed by the client")
                    return
                except wire.WireError as e:
                    self.close(f"the runtime sent a bad frame ({e})")
                    return
                try:
                    self._call(frame)
                finally:
                    frame.close_fds()
        except (TimeoutError, ssl.SSLError, OSError, ConnectionError) as e:
            self.close(f"cannot send to the service: {e}")
        except Exception as e:
            log.exception("network bridge to %s failed", self.where)
            self.close(f"the bridge failed: {type(e).__name__}: {e}")

    def _call(self, frame: wire.Frame) -> None:
        builder = att.Builder()
        if frame.compact is not None:
            compact_body: bytes = frame.compact
            compact_id = wire.compact_id(compact_body) or 0
            try:
                with self._lock:
                    compact_body = self._compact(compact_body, compact_id, frame.fds, builder)
            except LocalError as e:
                return self._local_error(compact_id, str(e))
            return self._send(compact_body, builder, compact=True)
        message = frame.message
        raw_id = message.get("id")
        call_id = raw_id if type(raw_id) is int else None
        method = str(message.get("method"))
        args = message.get("args")
        try:
            with self._lock:
                if isinstance(args, dict):
                    changed = self._json_call(method, args, call_id, frame.fds, builder)
                else:
                    changed = False
                    if frame.fds:
                        raise LocalError(f"{method}: a call with fds needs args")
        except LocalError as e:
            return self._local_error(call_id, str(e))
        except (KeyError, TypeError, ValueError) as e:
            return self._local_error(call_id, f"{method}: cannot be sent over the network: {e}")
        body = wire.dumps(message) if changed else None
        return self._send(body if body is not None else _json_body(frame), builder)

    def _local_error(self, call_id: int | None, text: str) -> None:
        error = {"status": int(ErrorStatus.INVALID_ARGUMENT), "message": text, "output_shapes": []}
        reply = {"kind": "reply", "id": call_id, "ok": False, "error": error}
        with self._lock:
            state = self._calls.pop(call_id, None) if call_id is not None else None
            if state is not None:
                self._end_call(call_id, state)
        try:
            with self._local_lock:
                wire.send_frame(self.local, reply, timeout=self.timeout)
        except OSError:
            self.close("the runtime does not read its answers")

    def _json_call(
        self,
        method: str,
        args: dict[str, Any],
        call_id: int | None,
        fds: tuple[int, ...],
        builder: att.Builder,
    ) -> bool:
        """Attachments for a JSON call; True when its message changed (a deadline moved to the service's clock)."""
        state = _Call(method)
        roles: dict[int, tuple] = {}
        if method in _EXECUTIONS:
            for desc in args["request"]["pools"]:
                if "fd" in desc:
                    roles[desc["fd"]] = ("pool", desc.get("memory"))
            for index in args.get("wait_for", []):
                roles[index] = ("fence",)
        elif method in ("prepareModel", "getSupportedOperations", "prepareModelFromCache"):
            if "model" in args:
                roles[args["model"]["fd"]] = ("whole",)
            for index in [*args.get("model_cache", []), *args.get("data_cache", [])]:
                roles[index] = ("file", method == "prepareModel")
        elif method == "bufferCopyFrom":
            roles[args["memory"]["fd"]] = ("whole",)
        elif method == "bufferCopyTo":
            roles[args["memory"]["fd"]] = ("back",)
        elif method == "configureExecutionBurst":
            for part, (ring, key) in enumerate(
                (
                    ("request_ring", "fd"),
                    ("request_ring", "event"),
                    ("result_ring", "fd"),
                    ("result_ring", "event"),
                )
            ):
                roles[args[ring][key]] = ("ring", part, args[ring]["size"])
        elif method == "burstProvideMemories":
            state.provides = True
            for memory in args["memories"]:
                roles[memory["fd"]] = ("slot", args["burst"], memory["slot"])
        elif method == "mapMemories":  # protocol 1.6: pools mapped ahead of binary executions
            for desc in args.get("memories", []):
                roles[desc["fd"]] = ("pool", desc.get("memory"))
        elif method == "freeMemory":
            for mem_id in args.get("ids", []):
                self._drop_ref(self._memory_ids.pop(mem_id, None), ("mem", mem_id), builder)
        elif method == "burstFreeMemory":
            slot_key = (args.get("burst"), args.get("slot"))
            self._drop_ref(self._slots.pop(slot_key, None), ("slot", *slot_key), builder)  # type: ignore[arg-type]
        elif method == "releaseBurst":
            for held in [k for k in self._slots if k[0] == args.get("burst")]:
                self._drop_ref(self._slots.pop(held), ("slot", *held), builder)
        pool_mirrors: dict[int, int] = {}
        rings: list[int] = []
        for index, fd in enumerate(fds):
            role = roles.get(index) or self._guess(fd)
            kind = role[0]
            if kind == "pool":
                mirror = self._mirror(fd, builder)
                if role[1] is None:
                    mirror.refs.add(("call", call_id))
                    state.transients.append(mirror.id)
                else:
                    old = self._memory_ids.get(role[1])
                    if old != mirror.id:
                        self._drop_ref(old, ("mem", role[1]), builder)
                    self._memory_ids[role[1]] = mirror.id
                    mirror.refs.add(("mem", role[1]))
                pool_mirrors[index] = mirror.id
                builder.add(att.Record(att.FD_MEMORY, mirror.id))
            elif kind in ("whole", "back"):
                mirror = self._mirror(fd, builder, send_all=kind == "whole")
                mirror.refs.add(("call", call_id))
                state.transients.append(mirror.id)
                if kind == "back":
                    builder.add(att.Record(att.READ, mirror.id, 0, mirror.size))
                    self._writing(mirror, ("call", call_id), [(0, mirror.size)], state)
                builder.add(att.Record(att.FD_MEMORY, mirror.id))
            elif kind == "file":
                ident = self._new_id()
                size = os.fstat(fd).st_size
                if size > PAYLOAD_LIMIT * 16:
                    size = 0  # too large to carry: the cache misses, as a stale one would
                builder.add(att.Record(att.CREATE, ident, size, 0, att.FLAG_TRANSIENT | att.FLAG_FILE))
                if size:
                    builder.add(att.Record(att.DATA, ident, 0, size, data=read_range(fd, 0, size)))
                if role[1]:
                    builder.add(att.Record(att.READ_FILE, ident))
                    state.files[ident] = os.dup(fd)
                builder.add(att.Record(att.FD_MEMORY, ident))
            elif kind == "fence":
                builder.add(self._fence_record(fd))
            elif kind == "ring":
                rings.append(index)
                part, size = role[1], role[2]
                if state.stream is None:
                    state.stream = self._next_stream
                    self._next_stream += 1
                builder.add(att.Record(att.FD_RING, state.stream, part, size))
            elif kind == "slot":
                mirror = self._mirror(fd, builder)
                slot = (role[1], role[2])
                old = self._slots.get(slot)
                if old != mirror.id:
                    self._drop_ref(old, ("slot", *slot), builder)
                self._slots[slot] = mirror.id
                mirror.refs.add(("slot", *slot))
                builder.add(att.Record(att.FD_MEMORY, mirror.id))
            else:
                raise LocalError(f"{method}: fd {index} is neither a memory nor a sync fence")
        if state.stream is not None:
            self._adopt_rings(state.stream, args, fds)
        changed = False
        if method in _EXECUTIONS:
            request = args["request"]
            descs = request["pools"]
            mirrors = []
            for _n, desc in enumerate(descs):
                if "fd" in desc:
                    mirrors.append(pool_mirrors.get(desc["fd"]))
                elif "memory" in desc:
                    mirrors.append(self._memory_ids.get(desc["memory"]))
                else:
                    mirrors.append(None)
            decoded = codec.request_from_dict(request, [None] * len(descs))  # type: ignore[list-item]
            self._regions(decoded.inputs, decoded.outputs, mirrors, ("call", call_id), builder, state)
            changed = self._move_deadline(args)
        elif method in ("prepareModel", "prepareModelFromCache"):
            changed = self._move_deadline(args)
        if call_id is not None and (
            state.transients or state.outputs or state.files or state.stream or state.provides
        ):
            self._calls[call_id] = state
        return changed

    def _compact(self, body: bytes, call_id: int, fds: tuple[int, ...], builder: att.Builder) -> bytes:
        try:
            call = self._decoder.decode(body)
        except ValueError as e:
            raise LocalError(f"bad compact call: {e}") from None
        state = _Call(compact_calls.METHODS[call.method])
        for fd in fds:
            builder.add(self._fence_record(fd))
        mirrors = [
            self._memory_ids.get(value) if kind == msg.POOL_SLOT else None for kind, value in call.pools
        ]
        self._regions(call.inputs, call.outputs, mirrors, ("call", call_id), builder, state)
        if state.outputs:
            self._calls[call_id] = state
        return self._move_binary_deadline(body, _COMPACT_DEADLINE)

    def _guess(self, fd: int) -> tuple:
        if is_eventfd(fd):
            return ("fence",)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return ("whole",)
        return ("other",)

    def _new_id(self) -> int:
        ident = self._next_mirror
        self._next_mirror += 1
        return ident

    def _mirror(self, fd: int, builder: att.Builder, *, send_all: bool = False) -> _Mirror:
        """The mirror of the memory behind `fd` (created, and sent whole when `send_all`)."""
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LocalError("a memory must be a memfd or a regular file")
        key = (info.st_dev, info.st_ino)
        mirror = self._by_key.get(key)
        if mirror is None:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            mirror = _Mirror(self._new_id(), os.dup(fd), info.st_size, key)
            self._mirrors[mirror.id] = mirror
            self._by_key[key] = mirror
            builder.add(att.Record(att.CREATE, mirror.id, info.st_size, seals))
        elif _write_sealed(fd):
            send_all = (
                False  # it cannot have changed since it was sent (and the service's copy is sealed too)
            )
        if send_all and mirror.size:
            builder.add(
                att.Record(att.DATA, mirror.id, 0, mirror.size, data=read_range(mirror.fd, 0, mirror.size))
            )
        return mirror

    def _drop_ref(self, ident: int | None, ref: tuple, builder: att.Builder | None) -> None:
        mirror = self._mirrors.get(ident) if ident is not None else None
        if mirror is None:
            return
        mirror.refs.discard(ref)
        if mirror.refs:
            return
        del self._mirrors[mirror.id]
        self._by_key.pop(mirror.key, None)
        os.close(mirror.fd)
        if builder is not None:
            builder.add(att.Record(att.RELEASE, mirror.id))
        else:
            self._pending_release.append(mirror.id)

    def _writing(
        self, mirror: _Mirror, key: object, ranges: list[tuple[int, int]], state: _Call | None
    ) -> None:
        mirror.writing.setdefault(key, []).extend(ranges)
        if state is not None and mirror.id not in state.outputs:
            state.outputs.append(mirror.id)

    def _regions(
        self,
        inputs: tuple[RequestArgument, ...],
        outputs: tuple[RequestArgument, ...],
        mirrors: list[int | None],
        key: object,
        builder: att.Builder,
        state: _Call | None,
    ) -> list[int]:
        """DATA for the inputs (but what executions in flight write), READ for the outputs; the mirrors
        with outputs."""
        sends: dict[int, list[tuple[int, int]]] = {}
        reads: dict[int, list[tuple[int, int]]] = {}
        for args, into in ((inputs, sends), (outputs, reads)):
            for a in args:
                if a.has_no_value or not a.location.length:
                    continue
                index = a.location.pool_index
                ident = mirrors[index] if index < len(mirrors) else None
                if ident is None or ident not in self._mirrors:
                    continue
                into.setdefault(ident, []).append((a.location.offset, a.location.length))
        for ident, ranges in sends.items():
            mirror = self._mirrors[ident]
            holes = [r for rs in mirror.writing.values() for r in rs]
            for offset, length in merge(ranges):
                for part_off, part_len in subtract((offset, length), holes):
                    end = min(part_off + part_len, mirror.size)
                    if end > part_off:
                        data = read_range(mirror.fd, part_off, end - part_off)
                        builder.add(att.Record(att.DATA, ident, part_off, len(data), data=data))
        for ident, ranges in reads.items():
            mirror = self._mirrors[ident]
            merged = [(o, min(length, mirror.size - o)) for o, length in merge(ranges) if o < mirror.size]
            for offset, length in merged:
                builder.add(att.Record(att.READ, ident, offset, length))
            self._writing(mirror, key, merged, state)
        return list(reads)

    def _fence_record(self, fd: int) -> att.Record:
        if not is_eventfd(fd):
            raise LocalError("a fence must be an eventfd")
        info = os.fstat(fd)
        now = peek_state(fd)
        if now != FenceState.ACTIVE:
            return att.Record(att.FD_FENCE, 0, 1 if now == FenceState.SIGNALED else ERROR_VALUE)
        service_fence = self._fence_keys.get((info.st_dev, info.st_ino))
        if service_fence is not None:
            return att.Record(att.FD_PEER_FENCE, service_fence)
        ident = self._next_fence
        self._next_fence += 1
        mine = os.dup(fd)
        self._fences_out[ident] = mine
        self._pump.watch(mine, lambda: self._runtime_fence(ident, mine))
        return att.Record(att.FD_FENCE, ident, 0)

    def _runtime_fence(self, ident: int, fd: int) -> bool:
        now = peek_state(fd)
        if now == FenceState.ACTIVE:
            return True
        with self._lock:
            self._fences_out.pop(ident, None)
        self._pump.unwatch(fd)
        os.close(fd)
        status = 1 if now == FenceState.SIGNALED else ERROR_VALUE
        self._send(wire.dumps({"kind": "fence", "fence": ident, "status": status}), None)
        return False

    def _move_deadline(self, args: dict[str, Any]) -> bool:
        deadline = args.get("deadline")
        if not self.offset_ns or type(deadline) is not int:
            return False
        args["deadline"] = min(max(deadline + self.offset_ns, 0), _I64_MAX)
        return True

    def _move_binary_deadline(self, body: bytes, at: int) -> bytes:
        if not self.offset_ns or len(body) < at + 8:
            return body
        deadline = int.from_bytes(body[at : at + 8], "little", signed=True)
        if deadline < 0:
            return body
        moved = min(max(deadline + self.offset_ns, 0), _I64_MAX)
        return body[:at] + moved.to_bytes(8, "little", signed=True) + body[at + 8 :]

    def _adopt_rings(self, ident: int, args: dict[str, Any], fds: tuple[int, ...]) -> None:
        req, res = args["request_ring"], args["result_ring"]
        requests = Ring.adopt(os.dup(fds[req["fd"]]), req["size"], os.dup(fds[req["event"]]), "request ring")
        try:
            results = Ring.adopt(
                os.dup(fds[res["fd"]]), res["size"], os.dup(fds[res["event"]]), "result ring"
            )
        except BaseException:
            requests.close()
            raise
        self._streams[ident] = _Stream(ident, requests, results)

    # ------------------------------------------------------------ bursts

    def _stream_ready(self, stream: _Stream) -> bool:
        with self._lock:
            if self._streams.get(stream.id) is not stream:
                return False  # ended meanwhile: its rings are closed
        try:
            return self._drain(stream)
        except ValueError:
            return False  # its rings were closed while this read them (the stream ended)

    def _drain(self, stream: _Stream) -> bool:
        try:
            os.eventfd_read(stream.requests.event_fd)
        except BlockingIOError:
            pass
        while True:
            try:
                data = stream.requests.read(stream.requests.capacity)
            except RingError as e:
                log.warning("burst stream %d: %s", stream.id, e)
                self._send(wire.dumps({"kind": "burst", "stream": stream.id, "closed": True}), None)
                return False
            if data is None:
                break
            self._burst_request(stream, bytes(data), asked=False)
        if stream.requests.peer_closed():
            self._send(wire.dumps({"kind": "burst", "stream": stream.id, "closed": True}), None)
            return False
        return True

    def _burst_request(self, stream: _Stream, data: bytes, *, asked: bool) -> None:
        builder = att.Builder()
        with self._lock:
            try:
                request = msg.decode_request(data)
            except ValueError:
                request = None  # the service answers it with the error
            if request is not None and stream.handle is not None:
                mirrors = []
                missing = []
                for kind, value in request.pools:
                    ident = self._slots.get((stream.handle, value)) if kind == msg.POOL_SLOT else None
                    if kind == msg.POOL_SLOT and ident is None:
                        missing.append(value)
                    mirrors.append(ident)
                if missing and not asked:
                    # Ask the runtime for the memories first, as the service would; the request waits here.
                    stream.held.append((data, True))
                    stream.results.write(msg.encode_get_memories(request.seq, tuple(missing)), self.timeout)
                    return
                self._regions(
                    request.inputs, request.outputs, mirrors, ("burst", stream.id, request.seq), builder, None
                )
            data = self._move_binary_deadline(data, _BURST_DEADLINE)
        builder.add(att.Record(att.MESSAGE, stream.id, 0, len(data), data=data))
        self._send(wire.dumps({"kind": "burst", "stream": stream.id}), builder)

    def _release_held(self) -> None:
        with self._lock:
            waiting = [(s, s.held) for s in self._streams.values() if s.held]
            for stream, _ in waiting:
                stream.held = []
        for stream, held in waiting:
            for data, _asked in held:
                self._burst_request(stream, data, asked=True)

    # ------------------------------------------------------------ service -> runtime

    def _run_network(self) -> None:
        try:
            while not self.closed:
                try:
                    frame = self.channel.read_frame(self.timeout)
                except wire.ConnectionClosed:
                    self.close("the service closed the connection")
                    return
                except wire.WireError as e:
                    self.close(f"the service sent a bad frame ({e})")
                    return
                self._answer(frame)
        except (TimeoutError, ssl.SSLError, OSError, ConnectionError) as e:
            self.close(f"the connection failed: {e}")
        except Exception as e:
            log.exception("network bridge to %s failed", self.where)
            self.close(f"the bridge failed: {type(e).__name__}: {e}")

    def _answer(self, frame: Any) -> None:
        records = att.decode(frame.payload) if frame.payload else []
        message: dict[str, Any] = {} if frame.compact else wire.loads(frame.body)
        kind = "compact" if frame.compact else message.get("kind")
        fds: list[int] = []
        fences: list[int] = []  # the service's fences still active, that this frame brought
        try:
            with self._lock:
                for r in records:
                    if r.type == att.DATA:
                        mirror = self._mirrors.get(r.id)
                        if mirror is not None:
                            write_range(mirror.fd, r.a, r.data)
                        else:
                            fd = self._call_file(r.id)
                            if fd is not None:
                                write_range(fd, r.a, r.data)
                    elif r.type == att.FILE_SIZE:
                        fd = self._call_file(r.id)
                        if fd is not None:
                            os.ftruncate(fd, r.a)
                    elif r.type == att.FD_FENCE:
                        fds.append(self._service_fence(r.id, r.a))
                        if not r.a:
                            fences.append(r.id)
                    elif r.type == att.MESSAGE:
                        pass
                    else:
                        raise ValueError(f"{r.name} from the service")
            if kind == "data":
                return
            if kind == "fence":
                return self._fence_done(message)
            if kind == "burst":
                return self._burst_answer(message, records)
            self._bookkeep(frame, message, fds, fences)
            with self._local_lock:
                wire.send_data(self.local, frame.local_bytes(), fds, self.timeout)
        finally:
            wire.close_fds(fds)

    def _call_file(self, ident: int) -> int | None:
        for call in self._calls.values():
            if ident in call.files:
                return call.files[ident]
        return None

    def _service_fence(self, ident: int, value: int) -> int:
        fd = os.eventfd(min(value, ERROR_VALUE), os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        if not value:
            info = os.fstat(fd)
            key = (info.st_dev, info.st_ino)
            self._fences_in[ident] = (os.dup(fd), key, None)
            self._fence_keys[key] = ident
        return fd

    def _fence_done(self, message: dict[str, Any]) -> None:
        ident, status = message.get("fence"), message.get("status")
        with self._lock:
            entry = self._fences_in.pop(ident, None) if type(ident) is int else None
            if entry is None:
                return
            fd, key, call_id = entry
            self._fence_keys.pop(key, None)
            if call_id is not None:
                state = self._calls.pop(call_id, None)
                if state is not None:
                    self._end_call(call_id, state)
        try:
            os.eventfd_write(
                fd, min(int(status) if type(status) is int and status > 0 else ERROR_VALUE, ERROR_VALUE)
            )
        finally:
            os.close(fd)

    def _burst_answer(self, message: dict[str, Any], records: list[att.Record]) -> None:
        ident = message.get("stream")
        with self._lock:
            stream = self._streams.get(ident) if type(ident) is int else None
            if stream is None:
                return
            if message.get("closed") is True:
                self._streams.pop(stream.id, None)
        if message.get("closed") is True:
            self._pump.unwatch(stream.requests.event_fd)
            with self._lock:
                for mirror in self._mirrors.values():  # its executions in flight will write nothing more
                    for key in [k for k in mirror.writing if k[:2] == ("burst", stream.id)]:  # type: ignore[index]
                        del mirror.writing[key]
            stream.results.mark_closed()
            stream.close()
            return
        for r in records:
            if r.type != att.MESSAGE:
                continue
            data = bytes(r.data)
            if len(data) >= 8 and msg.result_kind(data) == msg.KIND_RESULT:
                key = ("burst", stream.id, msg.message_seq(data))
                with self._lock:
                    for mirror in self._mirrors.values():
                        mirror.writing.pop(key, None)
            if not stream.results.write(data, self.timeout):
                log.warning("burst stream %d: the runtime does not read its result ring", stream.id)

    def _bookkeep(self, frame: Any, message: dict[str, Any], fds: list[int], fences: list[int]) -> None:
        """The last answer of a call ends what the bridge keeps for it."""
        if frame.compact:
            tag, call_id = compact_calls.answer_head(frame.body)
            final = tag in (compact_calls.RESULT, compact_calls.COMPLETE)
            fenced = tag == compact_calls.FENCED_LAUNCHED
            ok = True
        else:
            kind = message.get("kind")
            raw = message.get("id")
            call_id = raw if type(raw) is int else -1
            ok = message.get("ok") is True if kind == "reply" else message.get("status") == 0
            fenced = kind == "reply" and ok and bool(fds)
            with self._lock:
                state = self._calls.get(call_id)
            method = state.method if state is not None else ""
            final = kind == "notify" or (kind == "reply" and (not ok or (method != "execute" and not fenced)))
        with self._lock:
            state = self._calls.get(call_id)
            if state is None:
                return
            if fenced:
                for ident in fences:
                    fd, key, _ = self._fences_in[ident]
                    self._fences_in[ident] = (fd, key, call_id)
                if not fences:
                    final = True  # the fence came signalled already: its outputs came with it
            if not final:
                return
            self._calls.pop(call_id, None)
            if state.stream is not None:
                stream = self._streams.get(state.stream)
                if stream is not None:
                    result = message.get("result") if ok else None
                    handle = result.get("burst") if isinstance(result, dict) else None
                    if type(handle) is int:
                        stream.handle = handle
                        self._pump.watch(stream.requests.event_fd, partial(self._stream_ready, stream))
                    else:
                        self._streams.pop(stream.id, None)
                        stream.close()
                state.stream = None
            self._end_call(call_id, state)
        if state.provides:
            threading.Thread(target=self._release_held, name="net-client-held", daemon=True).start()

    def _end_call(self, call_id: int | None, state: _Call) -> None:
        key = ("call", call_id)
        for ident in state.outputs:
            mirror = self._mirrors.get(ident)
            if mirror is not None:
                mirror.writing.pop(key, None)
        for ident in state.transients:
            self._drop_ref(ident, ("call", call_id), None)
        wire.close_fds(list(state.files.values()))
        state.files.clear()
        if state.stream is not None:
            stream = self._streams.pop(state.stream, None)
            if stream is not None:
                stream.close()

    # ------------------------------------------------------------ sending

    def _send(self, body: bytes | None, builder: att.Builder | None, *, compact: bool = False) -> None:
        with self._lock:
            released, self._pending_release = self._pending_release, []
        if released:
            builder = builder or att.Builder()
            for ident in released:
                builder.add(att.Record(att.RELEASE, ident))
        payloads = builder.payloads(PAYLOAD_LIMIT) if builder else [[]]
        for early in payloads[:-1]:
            self.channel.send(frame_parts(wire.dumps({"kind": "data"}), early), self.timeout)
        self.channel.send(frame_parts(body or b"{}", payloads[-1], compact=compact), self.timeout)


def _write_sealed(fd: int) -> bool:
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE)
    except OSError:
        return False


def _json_body(frame: wire.Frame) -> bytes:
    return wire.dumps(frame.message)
