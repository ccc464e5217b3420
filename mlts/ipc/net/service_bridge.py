"""The service end of a network connection: a bridge between the client's TCP stream and a local socket
that the service host serves like any Unix client.

From the network the bridge reads frames, turns their attachments into what the Unix protocol
carries (mirrors of the client's memories as memfds, its sync fences as eventfds it signals when the
client says so, burst rings it creates and feeds with the client's ring messages) and passes each
message on unchanged with those fds. From the service it reads answers and sends them on, each fd
turned back into data: a sync fence into a fence record (and a `fence` message once it is
signalled), and with a call's last answer the output bytes the client asked for. Everything the
client sends is checked first (sizes, counts, ids); a frame whose attachments do not check is
answered with an error and not passed on.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.fence import ERROR_VALUE, FenceState, is_eventfd, peek_state
from mlts.ipc import burst_messages as msg
from mlts.ipc import compact_calls, wire
from mlts.ipc.burst_ring import HEADER_BYTES, MAX_CAPACITY, MIN_CAPACITY, MessageTooLarge, Ring, RingError
from mlts.ipc.net import attachments as att
from mlts.ipc.net.channel import Channel, frame_parts
from mlts.ipc.net.mirrors import MirrorError, MirrorTable, read_range
from mlts.ipc.net.pump import Pump
from mlts.ipc.peer import Peer

log = logging.getLogger("mlts.ipc.net")

NET_VERSION = 1
#: Payload bytes of one frame the bridge builds (room left for the message).
PAYLOAD_LIMIT = wire.MAX_PAYLOAD_BYTES - (1 << 16)
#: Client fences the service waits on at once, per connection; finished fences remembered.
MAX_PENDING_FENCES = 4096
FINISHED_FENCES = 4096
#: Burst streams per connection, and executions whose outputs one stream remembers.
MAX_STREAMS = 64
MAX_STREAM_READS = 16


def boot_id() -> str:
    """This boot of this machine: two processes with the same one share CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass
class _Call:
    method: str
    reads: list[tuple[int, int, int]] = field(default_factory=list)
    files: list[int] = field(default_factory=list)
    streams: list[int] = field(default_factory=list)


@dataclass
class _Stream:
    id: int
    size: int
    requests: Ring
    results: Ring
    parts: set[int] = field(default_factory=set)
    reads: OrderedDict[int, list[tuple[int, int, int]]] = field(default_factory=OrderedDict)

    def close(self) -> None:
        for ring in (self.requests, self.results):
            try:
                ring.close()
            except (ValueError, OSError):
                pass


def _bound(fn: Callable[..., bool], *args: Any) -> Callable[[], bool]:
    return lambda: fn(*args)


class _Refused(Exception):
    """Attachments that do not check: answered with INVALID_ARGUMENT, nothing passed on."""


class ServiceBridge:
    """One network client of the service: its channel, its local connection and what stands for its fds."""

    def __init__(
        self,
        channel: Channel,
        local: socket.socket,
        peer: Peer,
        *,
        frame_timeout: float,
        max_mirrors: int,
        max_mirror_bytes: int,
        note_refusal: Any,
        transport: str,
    ) -> None:
        self.channel = channel
        self.local = local
        self.peer = peer
        self.frame_timeout = frame_timeout
        self.note_refusal = note_refusal
        self.transport = transport
        self.mirrors = MirrorTable(max_mirrors, max_mirror_bytes)
        self._lock = threading.RLock()
        self._calls: dict[int, _Call] = {}
        self._fences_in: dict[int, int] = {}  # the client's fence id -> our eventfd, signalled on its `fence`
        self._fences_out: dict[int, tuple[int, int | None]] = {}  # our fence id -> (its fd, the call)
        self._finished: OrderedDict[int, int] = OrderedDict()  # our fence id -> the value it ended with
        self._next_fence = 1
        self._streams: dict[int, _Stream] = {}
        self._stream_by_fd: dict[int, _Stream] = {}
        self._pump = Pump("net-service-pump", lambda e: self.close(f"its event thread failed: {e}"))
        self._closed = False
        self.reason = ""
        self._hello_sent = False

    # ------------------------------------------------------------ running

    def start(self) -> None:
        """Serve: the service's answers on a thread of their own, the client's frames on this one."""
        threading.Thread(target=self._from_service, name="net-service-out", daemon=True).start()
        self._from_client()

    def close(self, why: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.reason = why
        log.info("network client %s: %s", self.peer.describe(), why)
        self._pump.stop()
        self.channel.close()
        try:
            self.local.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.local.close()
        with self._lock:
            self.mirrors.close()
            wire.close_fds(list(self._fences_in.values()))
            self._fences_in.clear()
            wire.close_fds([fd for fd, _ in self._fences_out.values()])
            self._fences_out.clear()
            for stream in self._streams.values():
                stream.close()
            self._streams.clear()
            self._stream_by_fd.clear()

    # ------------------------------------------------------------ client -> service

    def _from_client(self) -> None:
        try:
            while not self._closed:
                try:
                    frame = self.channel.read_frame(self.frame_timeout)
                except wire.ConnectionClosed:
                    self.close("closed the connection")
                    return
                except wire.WireError as e:
                    self.note_refusal(self.peer, f"bad frame: {e}")
                    self._send_error(None, f"bad frame: {e}")
                    self.close(f"sent a frame that cannot be resynchronised ({e})")
                    return
                self._handle(frame)
        except (ssl.SSLError, OSError, ConnectionError) as e:
            self.close(f"connection failed: {e}")
        except Exception as e:
            log.exception("network bridge of %s failed", self.peer.describe())
            self.close(f"the bridge failed: {type(e).__name__}: {e}")

    def _handle(self, frame: Any) -> None:
        message: dict[str, Any] = {}
        call_id: int | None
        method: str
        if frame.compact:
            call_id = wire.compact_id(frame.body)
            method = compact_calls.METHODS.get(frame.body[0], "compact") if frame.body else "compact"
            kind = "call"
        else:
            try:
                message = wire.loads(frame.body)
            except wire.WireError:
                self._forward(frame, [])  # the service answers a bad message as it always does
                return
            kind = str(message.get("kind"))
            raw_id = message.get("id")
            call_id = raw_id if type(raw_id) is int else None
            method = str(message.get("method"))
        try:
            records = att.decode(frame.payload) if frame.payload else []
        except ValueError as e:
            return self._refuse(call_id, kind, f"attachments: {e}")
        if kind == "fence":
            return self._client_fence(message)
        if kind == "burst":
            return self._burst(message, records)
        if kind == "data":
            try:
                self._apply(records, None, None, allow_fds=False)
            except _Refused as e:
                return self._refuse(None, kind, str(e))
            return None
        state = _Call(method) if call_id is not None and kind == "call" else None
        try:
            fds = self._apply(records, call_id, state, allow_fds=True)
        except _Refused as e:
            return self._refuse(call_id, kind, str(e))
        if state is not None and (
            state.reads
            or state.files
            or state.streams
            or any(m.call == call_id for m in self.mirrors.mirrors.values())
        ):
            with self._lock:
                self._calls[call_id] = state  # type: ignore[index]
        self._forward(frame, fds)
        return None

    def _forward(self, frame: Any, fds: list[int]) -> None:
        try:
            wire.send_data(self.local, frame.local_bytes(), fds)
        except OSError as e:
            self.close(f"the service closed its end ({e})")
        finally:
            wire.close_fds(fds)

    def _refuse(self, call_id: int | None, kind: object, why: str) -> None:
        self.note_refusal(self.peer, f"bad frame: {why}")
        if kind == "call" and call_id is not None:
            with self._lock:
                self.mirrors.release_call(call_id)
            self._send_error(call_id, f"bad frame: {why}")
            return
        self._send_error(None, f"bad frame: {why}")
        self.close(f"sent attachments that do not check ({why})")

    def _send_error(self, call_id: int | None, text: str) -> None:
        error = {"status": int(ErrorStatus.INVALID_ARGUMENT), "message": text, "output_shapes": []}
        self._send({"kind": "reply", "id": call_id, "ok": False, "error": error})

    def _apply(
        self, records: list[att.Record], call_id: int | None, state: _Call | None, *, allow_fds: bool
    ) -> list[int]:
        """Carry out the records of one frame; the fds they stand for, in order. _Refused when one does not
        check (the fds made so far are closed, the mirrors this frame created released)."""
        fds: list[int] = []
        created: list[int] = []
        try:
            with self._lock:
                for r in records:
                    if r.type in att.FD_TYPES:
                        if not allow_fds:
                            raise _Refused(f"{r.name} outside a call")
                        if len(fds) >= wire.MAX_FDS:
                            raise _Refused(f"more than {wire.MAX_FDS} fds in one frame")
                        fds.append(self._fd_of(r, call_id, state))
                    elif r.type == att.CREATE:
                        transient = bool(r.flags & att.FLAG_TRANSIENT)
                        if transient and call_id is None:
                            raise _Refused("a transient mirror outside a call")
                        self.mirrors.create(
                            r.id,
                            r.a,
                            r.b,
                            file=bool(r.flags & att.FLAG_FILE),
                            call=call_id if transient else None,
                        )
                        created.append(r.id)
                    elif r.type == att.DATA:
                        self.mirrors.write(r.id, r.a, r.data)
                    elif r.type == att.RELEASE:
                        self.mirrors.release(r.id)
                    elif r.type in (att.READ, att.READ_FILE):
                        if state is None:
                            raise _Refused(f"{r.name} outside a call")
                        if r.type == att.READ:
                            self.mirrors.check_range(r.id, r.a, r.b)
                            state.reads.append((r.id, r.a, r.b))
                        else:
                            if not self.mirrors.get(r.id).file:
                                raise _Refused(f"READ_FILE of mirror {r.id}, which is not a file")
                            state.files.append(r.id)
                    else:
                        raise _Refused(f"{r.name} is not sent by a client")
        except (MirrorError, _Refused, OSError) as e:
            wire.close_fds(fds)
            with self._lock:
                for ident in created:
                    self.mirrors.release(ident)
            raise _Refused(str(e)) from None
        return fds

    def _fd_of(self, r: att.Record, call_id: int | None, state: _Call | None) -> int:
        if r.type == att.FD_MEMORY:
            return self.mirrors.deliver(r.id)
        if r.type == att.FD_FENCE:
            fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            if r.a:
                os.eventfd_write(fd, min(r.a, ERROR_VALUE))
                return fd
            if r.id in self._fences_in or len(self._fences_in) >= MAX_PENDING_FENCES:
                os.close(fd)
                raise _Refused(f"fence {r.id} is pending already, or too many fences are")
            self._fences_in[r.id] = fd
            return os.dup(fd)
        if r.type == att.FD_PEER_FENCE:
            out = self._fences_out.get(r.id)
            if out is not None:
                return os.dup(out[0])
            value = self._finished.get(r.id)
            if value is None:
                raise _Refused(f"fence {r.id} is not one of this service's fences")
            fd = os.eventfd(value, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            return fd
        # FD_RING
        if state is None or call_id is None:
            raise _Refused("a burst ring outside a call")
        stream = self._streams.get(r.id)
        if stream is None:
            if len(self._streams) >= MAX_STREAMS:
                raise _Refused(f"this connection has {MAX_STREAMS} burst streams already")
            if not MIN_CAPACITY <= r.b - HEADER_BYTES <= MAX_CAPACITY:
                raise _Refused(
                    f"burst ring size {r.b} is outside {HEADER_BYTES} + {MIN_CAPACITY}..{MAX_CAPACITY}"
                )
            requests = Ring.create(r.b - HEADER_BYTES, "mlts-net-requests")
            try:
                results = Ring.create(r.b - HEADER_BYTES, "mlts-net-results")
            except BaseException:
                requests.close()
                raise
            stream = _Stream(r.id, r.b, requests, results)
            self._streams[r.id] = stream
            state.streams.append(r.id)
            # Watched from the start: a burst released before its first execution still ends here.
            self._stream_by_fd[results.event_fd] = stream
            self._pump.watch(results.event_fd, _bound(self._stream_ready, stream))
        if r.b != stream.size or r.a > 3 or r.a in stream.parts:
            raise _Refused(f"burst stream {r.id}: part {r.a} of size {r.b} does not fit")
        stream.parts.add(r.a)
        ring = stream.requests if r.a < 2 else stream.results
        return os.dup(ring.fd if r.a % 2 == 0 else ring.event_fd)

    def _client_fence(self, message: dict[str, Any]) -> None:
        ident, status = message.get("fence"), message.get("status")
        if type(ident) is not int or type(status) is not int or status < 1:
            return self._refuse(
                None, "fence", f"a fence message needs an integer fence and status, got {message!r:.80}"
            )
        with self._lock:
            fd = self._fences_in.pop(ident, None)
        if fd is None:
            return None  # a fence the service no longer waits for (its call was refused)
        try:
            os.eventfd_write(fd, min(status, ERROR_VALUE))
        finally:
            os.close(fd)
        return None

    # ------------------------------------------------------------ bursts

    def _burst(self, message: dict[str, Any], records: list[att.Record]) -> None:
        ident = message.get("stream")
        with self._lock:
            stream = self._streams.get(ident) if type(ident) is int else None
        if stream is None:
            return None  # ended already: the client learns it from the `closed` message sent then
        if message.get("closed") is True:
            stream.requests.mark_closed()
            return None
        payload = None
        reads: list[tuple[int, int, int]] = []
        try:
            with self._lock:
                for r in records:
                    if r.type == att.DATA:
                        self.mirrors.write(r.id, r.a, r.data)
                    elif r.type == att.READ:
                        self.mirrors.check_range(r.id, r.a, r.b)
                        reads.append((r.id, r.a, r.b))
                    elif r.type == att.MESSAGE and payload is None:
                        payload = bytes(r.data)
                    else:
                        raise MirrorError(f"{r.name} in a burst message")
            if payload is None:
                raise MirrorError("a burst message without its MESSAGE")
        except (MirrorError, OSError) as e:
            self.note_refusal(self.peer, f"bad burst message: {e}")
            return self._end_stream(stream)
        if reads and len(payload) >= 8:
            seq = msg.message_seq(payload)
            stream.reads[seq] = reads
            while len(stream.reads) > MAX_STREAM_READS:
                stream.reads.popitem(last=False)
        try:
            if not stream.requests.write(payload, self.frame_timeout):
                raise RingError("the service does not read the burst's request ring")
        except (MessageTooLarge, RingError, ValueError) as e:
            self.note_refusal(self.peer, f"burst stream {stream.id}: {e}")
            return self._end_stream(stream)
        return None

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
            os.eventfd_read(stream.results.event_fd)
        except BlockingIOError:
            pass
        while True:
            try:
                data = stream.results.read(stream.results.capacity)
            except RingError as e:
                self.note_refusal(self.peer, f"burst stream {stream.id}: {e}")
                self._end_stream(stream)
                return False
            if data is None:
                break
            builder = att.Builder()
            if len(data) >= 12 and msg.result_kind(data) == msg.KIND_RESULT:
                seq = msg.message_seq(data)
                status = int.from_bytes(data[8:12], "little", signed=True)
                reads = stream.reads.pop(seq, None)
                if reads and status == 0:
                    self._add_reads(builder, reads)
            builder.add(att.Record(att.MESSAGE, stream.id, 0, len(data), data=data))
            self._send({"kind": "burst", "stream": stream.id}, builder)
        if stream.results.peer_closed():
            self._end_stream(stream)
            return False
        return True

    def _end_stream(self, stream: _Stream) -> None:
        with self._lock:
            if self._streams.pop(stream.id, None) is None:
                return
            self._stream_by_fd.pop(stream.results.event_fd, None)
        self._pump.unwatch(stream.results.event_fd)
        try:
            stream.requests.mark_closed()
        except ValueError:
            pass
        stream.close()
        self._send({"kind": "burst", "stream": stream.id, "closed": True})

    # ------------------------------------------------------------ service -> client

    def _from_service(self) -> None:
        try:
            while not self._closed:
                try:
                    frame = wire.recv_frame(self.local)
                except (wire.ConnectionClosed, OSError):
                    self.close("the service ended the connection")
                    return
                self._answer(frame)
        except (ssl.SSLError, OSError, ConnectionError, TimeoutError) as e:
            self.close(f"cannot send to it: {e}")
        except Exception as e:
            log.exception("network bridge of %s failed", self.peer.describe())
            self.close(f"the bridge failed: {type(e).__name__}: {e}")

    def _answer(self, frame: wire.Frame) -> None:
        builder = att.Builder()
        watch: list[tuple[int, int]] = []
        final = False
        fenced = False
        if frame.compact is not None:
            tag, call_id = compact_calls.answer_head(frame.compact)
            final = tag in (compact_calls.RESULT, compact_calls.COMPLETE)
            fenced = tag == compact_calls.FENCED_LAUNCHED
            message: dict[str, Any] | None = None
            ok = True
        else:
            message = frame.message
            kind = message.get("kind")
            raw = message.get("id")
            call_id = raw if type(raw) is int else -1
            if kind in ("hello", "refused"):
                if kind == "hello":
                    message = self._network_hello(message)
                frame.close_fds()
                self._send(message, builder)
                return
            ok = message.get("ok") is True if kind == "reply" else message.get("status") == 0
            with self._lock:
                state = self._calls.get(call_id)
            if kind == "reply" and not ok:
                final = True
            elif kind == "reply":
                method = state.method if state is not None else ""
                fenced = bool(frame.fds)
                final = method != "execute" and not fenced
            elif kind == "notify":
                final = True
        # A sync fence the service sent: its state now, and a `fence` message once it is signalled.
        signalled = None
        for fd in frame.fds:
            if not is_eventfd(fd):
                log.warning("the service sent a %s client an fd that is not a fence; dropped", "network")
                os.close(fd)
                continue
            with self._lock:
                ident = self._next_fence
                self._next_fence += 1
            state_now = peek_state(fd)
            value = {FenceState.ACTIVE: 0, FenceState.SIGNALED: 1, FenceState.ERROR: ERROR_VALUE}[state_now]
            builder.add(att.Record(att.FD_FENCE, ident, value))
            if value:
                self._remember_finished(ident, value)
                os.close(fd)
                signalled = value
            else:
                with self._lock:
                    self._fences_out[ident] = (fd, call_id)
                watch.append((ident, fd))
        if fenced and signalled is not None:
            final, ok = True, signalled == 1
        if final:
            self._finish_call(call_id, builder, ok)
        self._send(message, builder, compact=frame.compact)
        for ident, fd in watch:
            self._pump.watch(fd, _bound(self._fence_ready, ident, fd))

    def _finish_call(self, call_id: int, builder: att.Builder, ok: bool) -> None:
        """The last answer of a call: the bytes it asked for (when it succeeded), and its transients go."""
        with self._lock:
            state = self._calls.pop(call_id, None)
            if state is not None and ok:
                self._add_reads(builder, state.reads)
                for ident in state.files:
                    mirror = self.mirrors.mirrors.get(ident)
                    if mirror is None:
                        continue
                    size = os.fstat(mirror.fd).st_size
                    builder.add(att.Record(att.FILE_SIZE, ident, size))
                    builder.add(att.Record(att.DATA, ident, 0, size, data=read_range(mirror.fd, 0, size)))
            if state is not None and not ok:
                for ident in state.streams:
                    stream = self._streams.pop(ident, None)
                    if stream is not None:
                        self._stream_by_fd.pop(stream.results.event_fd, None)
                        self._pump.unwatch(stream.results.event_fd)
                        stream.close()
            self.mirrors.release_call(call_id)

    def _add_reads(self, builder: att.Builder, reads: list[tuple[int, int, int]]) -> None:
        for ident, offset, length in reads:
            mirror = self.mirrors.mirrors.get(ident)
            if mirror is not None and length:
                builder.add(
                    att.Record(att.DATA, ident, offset, length, data=read_range(mirror.fd, offset, length))
                )

    def _remember_finished(self, ident: int, value: int) -> None:
        with self._lock:
            self._finished[ident] = value
            while len(self._finished) > FINISHED_FENCES:
                self._finished.popitem(last=False)

    def _fence_ready(self, ident: int, fd: int) -> bool:
        state_now = peek_state(fd)
        if state_now == FenceState.ACTIVE:
            return True
        value = 1 if state_now == FenceState.SIGNALED else ERROR_VALUE
        with self._lock:
            entry = self._fences_out.pop(ident, None)
        builder = att.Builder()
        if entry is not None and entry[1] is not None:
            self._finish_call(entry[1], builder, value == 1)
        self._remember_finished(ident, value)
        self._pump.unwatch(fd)
        os.close(fd)
        self._send({"kind": "fence", "fence": ident, "status": value}, builder)
        return False

    def _network_hello(self, hello: dict[str, Any]) -> dict[str, Any]:
        self._hello_sent = True
        return {
            **hello,
            "net": NET_VERSION,
            "transport": self.transport,
            "tensors": "inline",
            "peer": self.peer.describe(),
            "host": socket.gethostname(),
            "boot_id": boot_id(),
            "clock_ns": time.monotonic_ns(),
        }

    # ------------------------------------------------------------ sending

    def _send(
        self,
        message: dict[str, Any] | None,
        builder: att.Builder | None = None,
        *,
        compact: bytes | None = None,
    ) -> None:
        """Send one message (or compact answer) with its attachments; what does not fit in one frame goes
        ahead in `data` frames. A client that takes nothing for the frame timeout is disconnected."""
        if self._closed:
            return
        payloads = builder.payloads(PAYLOAD_LIMIT) if builder else [[]]
        try:
            for early in payloads[:-1]:
                self.channel.send(frame_parts(wire.dumps({"kind": "data"}), early), self.frame_timeout)
            body = compact if compact is not None else wire.dumps(message or {})
            self.channel.send(
                frame_parts(body, payloads[-1], compact=compact is not None), self.frame_timeout
            )
        except TimeoutError as e:
            self.note_refusal(self.peer, f"disconnected: {e}")
            self.close(f"takes nothing from the service: {e}")
        except (OSError, ConnectionError, ssl.SSLError) as e:
            self.close(f"cannot send to it: {e}")
