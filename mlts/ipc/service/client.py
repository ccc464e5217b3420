"""One client of the service: its connection, its handle table, and the dispatch of its calls.

The client's reader thread decodes every call and does all the checking and
bookkeeping that must happen in arrival order (argument types, handle
lookups, mapping and caching pools). Cheap queries are answered at once;
work that takes time is handed to a worker pool and answered from there, so
several calls of one client may be in flight and their replies may arrive
in any order.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlts.hal import qos
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError, invalid
from mlts.ipc import compact_calls, expected_wait, socket_polling, wire
from mlts.ipc.service.args import type_name
from mlts.ipc.service.handles import HandleTable, Kind
from mlts.ipc.service.profiling import run_profiled
from mlts.ipc.service.scheduler import WorkerPool
from mlts.ipc.service.transport import Connection, error_reply, ok_reply

if TYPE_CHECKING:
    from mlts.ipc.service.host import ServiceHost

log = logging.getLogger("mlts.ipc.service")

#: Connection identities: one per client connection, never reused while the service runs.
_KEYS = itertools.count(1)

#: What a handler returns when the reply will be sent later, by the work it queued.
DEFERRED: dict[str, Any] = {}


@dataclass
class Call:
    """One call being served: its id, method, arguments and the fds it brought."""

    id: int | None
    method: str
    args: dict[str, Any]
    fds: tuple[int, ...]
    taken: set[int] = field(default_factory=set)
    #: A compact call (protocol 1.4): its decoded fields instead of `args`; answered compactly.
    compact: compact_calls.CompactCall | None = None

    def take_fd(self, index: object, what: str) -> int:
        """Take ownership of fd number `index` of the frame (each at most once)."""
        if type(index) is not int or not 0 <= index < len(self.fds):
            raise invalid(
                f"{self.method}: {what} refers to fd {index!r}, but the frame carries {len(self.fds)} fds"
            )
        if index in self.taken:
            raise invalid(f"{self.method}: {what} reuses fd {index}, which another argument already took")
        self.taken.add(index)
        return self.fds[index]

    def close_untaken(self) -> None:
        if not self.fds:
            return
        wire.close_fds([fd for i, fd in enumerate(self.fds) if i not in self.taken])


Handler = Callable[["Client", Call], dict[str, Any]]


class Client:
    """A connected client, identified by its peer pid and uid."""

    def __init__(self, host: ServiceHost, conn: Connection) -> None:
        self.host = host
        self.conn = conn
        #: Who the client is (the transport's word, never the client's).
        self.peer = conn.peer
        self.pid = conn.pid
        self.uid = conn.uid
        #: When the client last sent anything or its last call ended (time.monotonic()): the idle clock.
        self.last_activity = time.monotonic()
        self.key = next(_KEYS)  # tells this connection apart from another of the same pid
        #: The program behind the connection (mlts.ipc.service.apps): the scheduler serves apps in turn.
        self.app = host.apps.join(self.peer)
        self.handles = HandleTable(host.limits)
        self._lock = threading.Lock()
        self._in_flight = 0
        #: The highest priority any model of this connection was prepared at (-1: none yet); never
        #: lowered. A call below it never runs on the reader thread, which must stay free to read a
        #: call that outranks it (mlts.ipc.service.pipeline.inline_slot).
        self.top_priority = -1
        self.calls = 0
        self.compact_calls = 0  # of `calls`, those that came as compact frames (protocol 1.4)
        self.closed = threading.Event()
        #: Decodes this connection's compact calls (used by the reader thread only).
        self.decoder = compact_calls.CallDecoder()

    # ------------------------------------------------------------ serving

    def serve(self) -> None:
        """Send the hello, then read and dispatch calls until the client hangs up.

        With MLTS_SERVICE_PROFILE=PREFIX in the service's environment, the reader thread runs under
        cProfile and writes its statistics to PREFIX.PID.KEY when the client hangs up.
        """
        # Everything this thread runs (checks, inline executions) acts for this client.
        with qos.serving_client(self.key, self.app):
            run_profiled(str(self.key), self._serve)

    def _serve(self) -> None:
        if not self.conn.send(self.host.hello()):
            return
        conn = self.conn
        pool = self.host.exec_pool
        idle = self.host.idle_timeout
        # Polls briefly for the client's next call before blocking, while calls follow each other
        # quickly and no execution needs the CPUs (socket_polling).
        polling = socket_polling.PollingWindow(
            socket_polling.window_us(socket_polling.SERVICE_WINDOW_US),
            expected_wait.stretch_max_us(expected_wait.SERVICE_STRETCH_MAX_US),
        )
        while True:
            # A client whose replies pile up unread gets no new call taken until it reads them.
            if not conn.wait_for_room():
                return
            try:
                polled = polling.poll(conn.readable, pool.idle())
                if not polled and idle is not None and not self._await_call(idle):
                    return
                frame = conn.receive()
                self.last_activity = time.monotonic()
                if not polled:
                    polling.waited()
            except wire.ConnectionClosed:
                log.info("client %s closed the connection", self.peer.describe())
                return
            except wire.WireError as e:
                self.host.refusals.note(self.peer, f"bad frame: {e}")
                status = (
                    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT if e.exhausted else ErrorStatus.INVALID_ARGUMENT
                )
                error = HalError(status, f"bad frame: {e}")
                sent = self.conn.send(error_reply(e.msg_id, error))
                if e.fatal or not sent:
                    log.warning(
                        "closing the connection of client %s after a frame that cannot be resynchronised (%s)",
                        self.peer.describe(),
                        e,
                    )
                    return
                continue
            except OSError as e:
                log.warning("connection of client %s failed: %s", self.peer.describe(), e)
                return
            if frame.compact is not None:
                self.host.dispatch_compact(self, frame)
            else:
                self._dispatch(frame)
            if self.conn.broken:
                return

    def _await_call(self, idle: float) -> bool:
        """Wait for the client's next bytes; False (the client is disconnected) once it has been idle for
        `idle` seconds: no call in flight and nothing received, on the socket or its bursts' rings."""
        conn = self.conn
        while True:
            left = self.last_activity + idle - time.monotonic()
            if left <= 0:
                if self._in_flight:
                    # Work still running counts as activity; its end restarts the idle clock.
                    left = idle
                else:
                    log.warning(
                        "disconnecting client %s: idle for %g s (no call in flight, nothing received)",
                        self.peer.describe(),
                        idle,
                    )
                    return False
            if conn.readable(min(left, 60.0)):
                return True

    def _dispatch(self, frame: wire.Frame) -> None:
        message = frame.message
        raw_id = message.get("id")
        msg_id = raw_id if type(raw_id) is int else None
        call = Call(msg_id, str(message.get("method")), {}, frame.fds)
        try:
            if message.get("kind") != "call":
                raise invalid(
                    f"message kind {message.get('kind')!r:.40} is not accepted here; expected 'call'"
                )
            if msg_id is None:
                raise invalid(f"call id must be an integer, got {type_name(raw_id)}")
            method = message.get("method")
            if not isinstance(method, str):
                raise invalid(f"call method must be a string, got {type_name(method)}")
            args = message.get("args", {})
            if not isinstance(args, dict):
                raise invalid(f"{method}: args must be a JSON object, got {type_name(args)}")
            call.args = args
            handler = self.host.handlers.get(method)
            if handler is None:
                known = ", ".join(sorted(self.host.handlers))
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"method {method!r:.60} is not implemented by this service; implemented: {known}",
                )
        except HalError as e:
            self.calls += 1
            self.refused(call.method, e)
            call.close_untaken()
            self.conn.send(error_reply(msg_id, e))
            return
        self.run_call(call, handler)

    def run_call(self, call: Call, handler: Handler) -> None:
        """Count the call in flight, run its handler and reply (or leave the reply to deferred work)."""
        msg_id = call.id
        self.calls += 1
        counted = False
        try:
            self.begin()
            counted = True
            result = handler(self, call)
        except HalError as e:
            self.refused(call.method, e)
            self.conn.send(error_reply(msg_id, e))
            if counted:
                self.end()
            return
        except Exception as e:
            # A driver bug: report it to the client, keep serving.
            error = HalError(ErrorStatus.GENERAL_FAILURE, f"{call.method}: {type(e).__name__}: {e}")
            self.driver_raised(call.method, e, error)
            self.conn.send(error_reply(msg_id, error))
            if counted:
                self.end()
            return
        finally:
            call.close_untaken()
        if result is not DEFERRED:
            assert msg_id is not None
            self.conn.send(ok_reply(msg_id, result))
            self.end()

    def prepared_at(self, priority: int) -> None:
        """A model of this connection was prepared at `priority` (the priority its executions queue at)."""
        if priority > self.top_priority:
            self.top_priority = priority

    # ------------------------------------------------------------ failures

    def refused(self, method: str, error: HalError) -> None:
        """Count a call answered with `error` in the service's refusal log (written in aggregate)."""
        self.host.refusals.note(self.peer, f"{method}: {error.status.name}: {error.message}")

    def driver_raised(self, method: str, exc: BaseException, error: HalError) -> None:
        """A Device method raised something other than HalError (a driver bug): counted like a refusal,
        with the traceback in the log for the first of each window."""
        if self.host.refusals.note(self.peer, f"{method}: {error.status.name}: {error.message}"):
            log.error("%s raised %s: %s", method, type(exc).__name__, exc, exc_info=exc)

    # ------------------------------------------------------------ calls in flight

    def begin(self) -> None:
        """Count one more call in flight; RESOURCE_EXHAUSTED_TRANSIENT beyond the client's limit."""
        with self._lock:
            if self._in_flight >= self.host.limits.max_in_flight:
                raise HalError(
                    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                    f"this client already has {self._in_flight} calls in flight "
                    f"(at most {self.host.limits.max_in_flight}); wait for some to finish",
                )
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self.last_activity = time.monotonic()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def in_flight_now(self) -> int:
        """`in_flight` read without the lock (for the reader thread, the only one that adds calls)."""
        return self._in_flight

    def defer(
        self,
        pool: WorkerPool,
        call: Call,
        work: Callable[[], Any],
        cleanup: Callable[[], None] | None = None,
        priority: int = 1,
        compact: Callable[[Any], bytes] | None = None,
    ) -> dict[str, Any]:
        """Run `work` on `pool` and reply with its result or error; returns DEFERRED.

        With `compact`, a result is answered by the compact message `compact(result)`.
        """
        msg_id = call.id
        method = call.method

        def run() -> None:
            # The driver's priority ticket is left once the reply is sent: the client's lower-priority
            # executions stay paused until then instead of competing with the reply for the CPU (and a
            # moment longer, for the client's next call, while lower-priority work waits: `linger`).
            with qos.holding_tickets() as held:
                answer()
                if held and pool is self.host.exec_pool:
                    self.linger(held, priority)

        def answer() -> None:
            body = b""
            reply: dict[str, Any] = {}
            try:
                if self.closed.is_set():
                    return  # the client is gone: nobody to answer
                if compact is not None:
                    body = compact(work())
                else:
                    reply = ok_reply(msg_id, work())  # type: ignore[arg-type]
            except HalError as e:
                self.refused(method, e)
                reply = error_reply(msg_id, e)
            except Exception as e:
                error = HalError(ErrorStatus.GENERAL_FAILURE, f"{method}: {type(e).__name__}: {e}")
                self.driver_raised(method, e, error)
                reply = error_reply(msg_id, error)
            finally:
                if cleanup is not None:
                    cleanup()
                self.end()
            if reply:
                self.conn.send(reply)
            else:
                self.conn.send_compact(body)

        try:
            pool.submit(run, priority, self.app)
        except RuntimeError:
            if cleanup is not None:
                cleanup()
            raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, f"{method}: the service is stopping") from None
        return DEFERRED

    def linger(self, held: list[Callable[[], None]], priority: int) -> None:
        """Hand the tickets an answered execution of `priority` holds (`held`, from
        `qos.holding_tickets()`) to the service's linger when lower-priority work is in the execution
        pool (mlts.ipc.service.linger); otherwise they are left as the block ends."""
        if self.host.linger.seconds > 0 and self.host.exec_pool.runs_below(priority):
            self.host.linger.keep(held)

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        """Release everything the client holds (calls still running release theirs when they end)."""
        if not self.closed.is_set():
            self.host.apps.leave(self.peer)
        self.closed.set()
        self.host.fences.cancel(self, HalError(ErrorStatus.DEVICE_UNAVAILABLE, "the client disconnected"))
        self.handles.close_all()

    def status(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "uid": self.uid,
            "app": self.app,
            "handles": self.handles.counts(),
            "in_flight": self.in_flight,
            "mapped_bytes": self.handles.mapped_bytes,
            "queued_bytes": self.conn.queued_bytes,
            "calls": self.calls,
            "compact_calls": self.compact_calls,
            # Executions that reused a request already decoded and validated (request_cache).
            "request_cache_hits": sum(e.requests.hits for e in self.handles.values(Kind.PREPARED)),
            # Waits of the bursts' listeners stretched over the gap the client leaves between its
            # requests (mlts.ipc.expected_wait), over its bursts now open.
            "burst_stretches": sum(
                b.expected.stretches for b in self.handles.values(Kind.BURST) if b.expected is not None
            ),
        }
