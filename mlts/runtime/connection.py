"""The client end of a driver service connection: many calls in flight, replies routed by call id.

Any thread may send a call. Threads waiting for an answer take turns reading
the socket: whichever waits first reads every frame and hands each reply
(and each `notify` completion) to the slot of its call id, until its own
answer is in; then the next waiter takes over. A single caller thus reads
its own reply directly, with no thread hand-off on the fast path.

A waiter whose call has a higher priority (`Slot.priority`: a synchronous
execution's prepared-model priority) than the reader's takes the reading over:
the reader hands it on after the frame it is reading, and of the waiters the
highest-priority one reads next. So a HIGH execution's reply is read by its
own thread, without a hand-off after it arrives, while LOW executions of other
threads share the connection; the hand-over itself happens while the HIGH
call is still running in the driver.

While reading, the socket is polled every 50 ms and the endpoint's liveness
checked, so a driver that dies surfaces as DEVICE_UNAVAILABLE naming how it
died. A call whose answer does not come within its timeout stops the
endpoint (a private service is killed; a shared one is only disconnected).
After either, every call fails fast with the same error.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc import compact_calls, expected_wait, socket_polling, wire
from mlts.runtime.keepalive import KeepAlive

# How often a waiting reader checks that the driver still lives.
_LIVENESS_POLL_S = 0.05
# A frame the driver started must be complete within this many seconds.
_PARTIAL_FRAME_S = 10.0
_MAX_U32 = compact_calls.MAX_U32
_DONTWAIT = int(socket.MSG_DONTWAIT)
# What `wire.compact_frame_bytes` packs, for `send_call`.
_FIXED_PACK = wire.FIXED_HEADER.pack
_MAGIC_COMPACT = wire.MAGIC_COMPACT
_MAJOR, _MINOR = wire.PROTOCOL_VERSION
# What `_compact_message` reads of an answer's head.
_ANSWER_UNPACK = compact_calls.ANSWER.unpack_from
_ANSWER_SIZE = compact_calls.ANSWER.size
_COMPLETE, _FENCED_DONE = compact_calls.COMPLETE, compact_calls.FENCED_DONE


class Endpoint(Protocol):
    """What a connection needs from whatever is behind its socket (a private process or a shared service)."""

    name: str
    sock: Any

    def alive(self) -> bool: ...

    def stop_for_hang(self) -> str: ...

    def death_message(self, method: str) -> str: ...

    def close_socket(self) -> None: ...


class _Timeout(Exception):
    pass


@dataclass(slots=True)
class Slot:
    """One call in flight: its reply (and fds), and for an asynchronous call the completion handler."""

    id: int
    method: str
    on_notify: Callable[[dict[str, Any] | None, HalError | None], None] | None = None
    reply: dict[str, Any] | None = None
    fds: tuple[int, ...] = ()
    notified: bool = False
    #: The call's priority (a Priority code; -1: none): a waiter of a higher one takes the reading over.
    priority: int = -1
    #: What the call depends on and leaves behind (mlts.runtime.remote: the mapMemories call sent before
    #: it, temporary pools to free after it), or None.
    after: Any = None

    def has_reply(self) -> bool:
        return self.reply is not None


class ServiceConnection:
    """Calls over one socket to a driver service; thread-safe."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.name = endpoint.name
        self.sock = endpoint.sock
        # Blocking, but never blocked on: reads follow a poll, sends are bounded explicitly.
        self.sock.settimeout(None)
        self._readable = wire.Readable(self.sock)
        # Polls briefly for an answer before a blocking wait while answers come quickly (socket_polling).
        self._polling = socket_polling.PollingWindow(
            socket_polling.window_us(socket_polling.CLIENT_WINDOW_US), expected_wait.stretch_max_us()
        )
        #: Held while a call's frame is built and sent, so pool-cache ids reach the service in order.
        self.send_lock = threading.RLock()
        # Entered directly (one C call) wherever the condition is not waited on; the same lock.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # Threads waiting on `_cond`: with none (a lone caller), nobody needs notifying.
        self._waiters = 0
        self._reading = False
        # The priority of the reader's call, and how many threads wait to read at each priority (with
        # the highest of them): a reader hands the reading on to a waiter of a higher priority.
        self._reader_priority = -1
        self._wanting: dict[int, int] = {}
        self._want_top = -1
        self._slots: dict[int, Slot] = {}
        self._next_id = 1
        self.dead: HalError | None = None
        # True once the driver's end went away by itself (it died or hung up), not because this side
        # stopped it (a call timeout, close()).
        self.driver_died = False
        #: When this side last sent a call (time.monotonic()): a keep-alive pings a shared service that
        #: would otherwise take the connection as idle (the hello says after how long).
        self.last_sent = time.monotonic()
        self.keepalive: KeepAlive | None = None
        idle = (getattr(endpoint, "hello", None) or {}).get("idle_timeout")
        if isinstance(idle, (int, float)) and not isinstance(idle, bool) and idle > 0:
            self.keepalive = KeepAlive(self, float(idle))

    # ------------------------------------------------------------ sending

    def check_usable(self) -> None:
        dead = self.dead
        if dead is not None:
            raise HalError(dead.status, dead.message)

    def send(
        self,
        method: str,
        args: dict[str, Any],
        fds: Sequence[int] = (),
        timeout: float = 60.0,
        on_notify: Callable[[dict[str, Any] | None, HalError | None], None] | None = None,
        encoded: dict[str, bytes] | None = None,
    ) -> Slot:
        """Send one call; returns its slot to `wait` on. `on_notify` receives the completion of an async call.

        `encoded` holds further arguments already encoded as JSON text (see wire.call_body).
        """
        with self.send_lock:
            self.check_usable()
            with self._lock:
                msg_id = self._next_id
                if msg_id > _MAX_U32 or msg_id in self._slots:
                    msg_id = self._free_id()
                self._next_id = msg_id + 1
                slot = Slot(msg_id, method, on_notify)
                self._slots[msg_id] = slot
            self.last_sent = time.monotonic()
            try:
                # Bounded: a driver that stops reading must not block the client forever.
                if encoded:
                    body = wire.call_body(msg_id, method, args, encoded)
                    wire.send_data(self.sock, wire.frame_bytes(body), fds, timeout)
                else:
                    wire.send_frame(
                        self.sock,
                        {"kind": "call", "id": msg_id, "method": method, "args": args},
                        fds=fds,
                        timeout=timeout,
                    )
            except TimeoutError:
                self.forget(slot)
                raise self.hung(method, timeout) from None
            except OSError:
                self.forget(slot)
                raise self._died(method) from None
        return slot

    def send_compact(
        self,
        method: str,
        body: Callable[[int], bytes],
        fds: Sequence[int] = (),
        timeout: float = 60.0,
        on_notify: Callable[[dict[str, Any] | None, HalError | None], None] | None = None,
    ) -> Slot:
        """Send the compact call `body(call_id)` (protocol 1.4). Call with `send_lock` held."""
        self.check_usable()
        with self._lock:
            msg_id = self._next_id
            if msg_id > _MAX_U32 or msg_id in self._slots:
                msg_id = self._free_id()
            self._next_id = msg_id + 1
            slot = Slot(msg_id, method, on_notify)
            self._slots[msg_id] = slot
        self.last_sent = time.monotonic()
        try:
            wire.send_data(self.sock, wire.compact_frame_bytes(body(msg_id)), fds, timeout)
        except TimeoutError:
            self.forget(slot)
            raise self.hung(method, timeout) from None
        except OSError:
            self.forget(slot)
            raise self._died(method) from None
        except BaseException:
            self.forget(slot)
            raise
        return slot

    def send_call(
        self,
        method: str,
        made: compact_calls.RequestTemplate,
        code: int,
        prepared: int,
        measure: int,
        deadline: int | None,
        loop_timeout: int | None,
        timeout: float = 60.0,
    ) -> Slot:
        """`send_compact` of the call `made.call(code, id, ...)` with no fds and no completion: the same
        steps, inlined for the synchronous path. Call with `send_lock` held."""
        dead = self.dead
        if dead is not None:
            raise HalError(dead.status, dead.message)
        lock = self._lock
        lock.acquire()
        try:
            msg_id = self._next_id
            if msg_id > _MAX_U32 or msg_id in self._slots:
                msg_id = self._free_id()
            self._next_id = msg_id + 1
            slot = Slot(msg_id, method)
            self._slots[msg_id] = slot
        finally:
            lock.release()
        self.last_sent = time.monotonic()
        try:
            body = made.call(code, msg_id, prepared, measure, deadline, loop_timeout)
            if len(body) <= wire.MAX_HEADER_BYTES:
                data = _FIXED_PACK(_MAGIC_COMPACT, _MAJOR, _MINOR, len(body), 0) + body
            else:
                data = wire.compact_frame_bytes(body)  # raises: too long
            # The usual case, `wire.send_data` inlined: the frame fits in the socket's buffer at once.
            try:
                sent = self.sock.send(data, _DONTWAIT)
            except BlockingIOError:
                sent = 0
            if sent != len(data):
                wire.send_data(self.sock, data[sent:], (), timeout)
        except TimeoutError:
            self.forget(slot)
            raise self.hung(method, timeout) from None
        except OSError:
            self.forget(slot)
            raise self._died(method) from None
        except BaseException:
            self.forget(slot)
            raise
        return slot

    def _free_id(self) -> int:
        """A call id in [1, 2**32) no call in flight has, from `_next_id` on, wrapping round (call ids
        stay small enough for compact calls). Lock held."""
        msg_id = self._next_id
        while True:
            if msg_id > _MAX_U32:
                msg_id = 1
            if msg_id not in self._slots:
                return msg_id
            msg_id += 1

    def forget(self, slot: Slot) -> None:
        """Stop waiting for `slot`'s reply (a reply that comes later is dropped)."""
        with self._lock:
            self._slots.pop(slot.id, None)

    # ------------------------------------------------------------ waiting

    def wait_reply(self, slot: Slot, timeout: float) -> dict[str, Any]:
        """The reply message of `slot`; a timeout stops the endpoint (the driver is taken as hung)."""
        # The usual case, `pump` inlined: no other thread reads, so this one reads until its reply is in.
        lock = self._lock
        lock.acquire()
        alone = (
            slot.reply is None and not self._reading and self.dead is None and slot.priority >= self._want_top
        )
        if alone:
            self._reading = True
            self._reader_priority = slot.priority
        lock.release()
        end = time.monotonic() + timeout
        try:
            if alone:
                try:
                    self._read_reply(slot, end)
                finally:
                    lock.acquire()
                    self._reading = False
                    if self._waiters:
                        self._cond.notify_all()
                    lock.release()
            if slot.reply is None:
                self.pump(slot.has_reply, end, slot.method, slot.priority)
        except _Timeout:
            self.forget(slot)
            raise self.hung(slot.method, timeout) from None
        assert slot.reply is not None
        return slot.reply

    def wait_notify(self, slot: Slot, timeout: float | None) -> bool:
        """Read until `slot`'s completion arrived or `timeout` seconds pass; True if it did."""
        try:
            self.pump(
                lambda: slot.notified, None if timeout is None else time.monotonic() + timeout, slot.method
            )
        except _Timeout:
            return False
        return True

    def call(
        self, method: str, args: dict[str, Any], fds: Sequence[int] = (), timeout: float = 60.0
    ) -> dict[str, Any]:
        """Send a call and wait for its reply message (fds that came with it are closed)."""
        slot = self.send(method, args, fds, timeout)
        reply = self.wait_reply(slot, timeout)
        wire.close_fds(slot.fds)
        return reply

    def pump(self, done: Callable[[], bool], deadline: float | None, method: str, priority: int = -1) -> None:
        """Return once `done()`; read the socket meanwhile when no other thread does, unless a waiter of a
        higher `priority` reads next (it then reads for this one too). _Timeout at `deadline`."""
        while True:
            with self._lock:
                taken = False
                try:
                    while True:
                        if done():
                            return
                        if self.dead is not None:
                            raise HalError(self.dead.status, self.dead.message)
                        # Of the threads waiting to read, the highest-priority one reads next.
                        if not self._reading and priority >= self._want_top:
                            self._reading = taken = True
                            self._reader_priority = priority
                            break
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            raise _Timeout
                        self._waiters += 1
                        self._want(priority, 1)
                        try:
                            self._cond.wait(remaining)
                        finally:
                            self._waiters -= 1
                            self._want(priority, -1)
                finally:
                    # Leaving without reading (answered, timed out, dead): the waiters that stood back for
                    # this one must not wait on for it.
                    if not taken and not self._reading and self._waiters:
                        self._cond.notify_all()
            try:
                self._read_until(done, deadline, method)
            finally:
                with self._lock:
                    self._reading = False
                    if self._waiters:
                        self._cond.notify_all()

    def _want(self, priority: int, delta: int) -> None:
        """Count a thread waiting to read at `priority` (delta 1) or no longer (-1). Lock held."""
        wanting = self._wanting
        n = wanting.get(priority, 0) + delta
        if n:
            wanting[priority] = n
            if priority > self._want_top:
                self._want_top = priority
        else:
            del wanting[priority]
            if priority == self._want_top:
                self._want_top = max(wanting) if wanting else -1

    def _read_until(self, done: Callable[[], bool], deadline: float | None, method: str) -> None:
        sock = self.sock
        readable = self._readable
        polling = self._polling

        def wait(partial: bool) -> None:
            if not partial and polling.poll(readable):
                return
            # Half a frame is never abandoned (the stream would be out of step); the service sends whole frames.
            frame_limit = time.monotonic() + _PARTIAL_FRAME_S if partial else 0.0
            try:
                block(partial, frame_limit)
            finally:
                if not partial:
                    polling.waited()

        def block(partial: bool, frame_limit: float) -> None:
            while True:
                now = time.monotonic()
                if partial and now >= frame_limit:
                    raise wire.WireError(f"frame not completed within {_PARTIAL_FRAME_S} s", fatal=True)
                if not partial and deadline is not None and now >= deadline:
                    raise _Timeout
                step = _LIVENESS_POLL_S
                if deadline is not None and not partial:
                    step = min(deadline - now, step)
                if readable(max(0.0, step)):
                    return
                if not self.endpoint.alive():
                    raise wire.ConnectionClosed()

        while not done():
            if self.dead is not None:
                return
            try:
                frame = wire.recv_frame(sock, wait)
            except _Timeout:
                raise
            except (wire.ConnectionClosed, OSError):
                raise self._died(method) from None
            except wire.WireError as e:
                raise self._stop(f"driver {self.name!r} sent a bad frame during {method} ({e})") from None
            except BaseException:
                # Interrupted mid-call (e.g. Ctrl-C): replies would arrive out of step later.
                self._stop(f"driver {self.name!r}: {method} was interrupted")
                raise
            self._dispatch(frame)
            # A waiter of a higher priority than this reader's reads on (read without the lock, between
            # frames: a stale value only moves the hand-over by a frame).
            if self._want_top > self._reader_priority and not done():
                return

    def _read_reply(self, slot: Slot, deadline: float) -> None:
        """`_read_until(slot.has_reply, deadline, slot.method)` for the lone reader, without its
        closures; its own compact reply is taken as `_dispatch` would take it, without the detour."""
        sock = self.sock
        method = slot.method
        polling = self._polling
        readable = self._readable
        partial_wait = self._partial_wait
        lock = self._lock
        while slot.reply is None:
            if self.dead is not None:
                return
            try:
                # The first bytes of the next frame: polled for briefly, then waited for.
                if not polling.poll(readable):
                    try:
                        # `_block`'s first step inlined: the answer usually comes within it.
                        now = time.monotonic()
                        if now >= deadline or not readable(min(deadline - now, _LIVENESS_POLL_S)):
                            if now < deadline and not self.endpoint.alive():
                                raise wire.ConnectionClosed()
                            self._block(deadline)
                    finally:
                        polling.waited()
                frame = wire.recv_frame(sock, partial_wait)
            except _Timeout:
                raise
            except (wire.ConnectionClosed, OSError):
                raise self._died(method) from None
            except wire.WireError as e:
                raise self._stop(f"driver {self.name!r} sent a bad frame during {method} ({e})") from None
            except BaseException:
                # Interrupted mid-call (e.g. Ctrl-C): replies would arrive out of step later.
                self._stop(f"driver {self.name!r}: {method} was interrupted")
                raise
            body = frame.compact
            if body is not None and len(body) >= _ANSWER_SIZE and not frame.fds:
                tag, msg_id = _ANSWER_UNPACK(body)
                if msg_id == slot.id and tag != _COMPLETE and tag != _FENCED_DONE:
                    lock.acquire()
                    try:
                        if self._slots.get(msg_id) is slot:
                            slot.reply = {
                                "kind": "reply",
                                "id": msg_id,
                                "ok": True,
                                "compact": body,
                                "tag": tag,
                            }
                            if slot.on_notify is None:
                                del self._slots[msg_id]
                            if self._waiters:
                                self._cond.notify_all()
                            continue
                    finally:
                        lock.release()
            self._dispatch(frame)
            if self._want_top > self._reader_priority and slot.reply is None:
                return  # a higher-priority waiter reads on (as in `_read_until`); the caller waits in `pump`

    def _block(self, deadline: float) -> None:
        """Wait for the socket to be readable until `deadline` (_Timeout), checking the driver's
        liveness every _LIVENESS_POLL_S (ConnectionClosed when it ended)."""
        readable = self._readable
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise _Timeout
            if readable(max(0.0, min(deadline - now, _LIVENESS_POLL_S))):
                return
            if not self.endpoint.alive():
                raise wire.ConnectionClosed()

    def _partial_wait(self, partial: bool) -> None:
        """`recv_frame`'s wait for `_read_reply`: nothing before a frame (the reader waited already);
        within one, its rest for up to _PARTIAL_FRAME_S, never abandoned earlier (the stream would be
        out of step)."""
        if not partial:
            return
        frame_limit = time.monotonic() + _PARTIAL_FRAME_S
        while True:
            if time.monotonic() >= frame_limit:
                raise wire.WireError(f"frame not completed within {_PARTIAL_FRAME_S} s", fatal=True)
            if self._readable(_LIVENESS_POLL_S):
                return
            if not self.endpoint.alive():
                raise wire.ConnectionClosed()

    def _dispatch(self, frame: wire.Frame) -> None:
        message = frame.message
        if frame.compact is not None:
            message = self._compact_message(frame.compact)
        kind = message.get("kind")
        msg_id = message.get("id")
        with self._lock:
            slot = self._slots.get(msg_id) if type(msg_id) is int else None
            if kind == "reply" and slot is not None and slot.reply is None:
                slot.reply, slot.fds = message, frame.fds
                if slot.on_notify is None:
                    del self._slots[slot.id]
                if self._waiters:
                    self._cond.notify_all()
                return
            if kind == "notify" and slot is not None and slot.on_notify is not None:
                del self._slots[slot.id]
            else:
                slot = None
        frame.close_fds()
        if slot is not None:
            assert slot.on_notify is not None
            slot.on_notify(message, None)
            with self._lock:
                slot.notified = True
                if self._waiters:
                    self._cond.notify_all()
            return
        if kind == "notify":
            return  # a completion nobody waits for any more
        raise self._stop(f"driver {self.name!r} sent an unexpected message {str(message)[:120]}")

    def _compact_message(self, body: bytes) -> dict[str, Any]:
        """A compact answer as the reply or notify message it stands for; the body rides along."""
        if len(body) >= _ANSWER_SIZE:
            tag, msg_id = _ANSWER_UNPACK(body)  # compact_calls.answer_head, inlined
        else:
            try:
                tag, msg_id = compact_calls.answer_head(body)
            except ValueError as e:
                raise self._stop(f"driver {self.name!r} sent a bad compact answer ({e})") from None
        kind = "notify" if tag == _COMPLETE or tag == _FENCED_DONE else "reply"
        return {"kind": kind, "id": msg_id, "ok": True, "compact": body, "tag": tag}

    # ------------------------------------------------------------ failing

    def _fail(self, message: str) -> HalError:
        """Record the connection as unusable with `message`; fail every call in flight; return the error."""
        error = HalError(ErrorStatus.DEVICE_UNAVAILABLE, message)
        if self.keepalive is not None:
            self.keepalive.stop()
        with self._lock:
            if self.dead is None:
                self.dead = error
            slots = list(self._slots.values())
            self._slots.clear()
            self._cond.notify_all()
        self.endpoint.close_socket()
        for slot in slots:
            if slot.on_notify is not None and not slot.notified:
                slot.on_notify(None, HalError(self.dead.status, self.dead.message))
                slot.notified = True
        wire.close_fds([fd for slot in slots for fd in slot.fds])
        return HalError(self.dead.status, self.dead.message)

    def _died(self, method: str) -> HalError:
        if self.dead is not None:
            return HalError(self.dead.status, self.dead.message)
        self.driver_died = True
        return self._fail(self.endpoint.death_message(method))

    def hung(self, method: str, timeout: float) -> HalError:
        """The error of a `method` call unanswered for `timeout` s: the driver is taken as hung and its
        endpoint stopped (or the error the connection already failed with)."""
        if self.dead is not None:
            return HalError(self.dead.status, self.dead.message)
        what = self.endpoint.stop_for_hang()
        return self._fail(f"driver {self.name!r}: no reply within {timeout:.1f} s to {method}; {what}")

    def _stop(self, text: str) -> HalError:
        what = self.endpoint.stop_for_hang()
        return self._fail(f"{text}; {what}")

    def close(self, message: str) -> None:
        """Mark the connection closed by this side (calls in flight fail with `message`)."""
        self._fail(message)
