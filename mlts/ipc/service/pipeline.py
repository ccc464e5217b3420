"""The service's execution pipeline: admit -> schedule -> run -> answer, for every execution.

Every execution of every path goes through here: synchronous, asynchronous
and fenced socket calls (compact, and JSON from clients of protocol 1.3 and
older, converted to the same request message at the door) and burst requests
read from a ring. A path supplies only what is its own: where the request's
bytes and pools come from (`execution_calls` for the socket's memory ids and
JSON references, `burst_calls` for burst slots) and how the answer goes out
(a compact frame, a JSON reply or notify, a result-ring message, a fence signal
and report: `execution_calls`, `fenced_calls`, `burst_calls`).

- **admit** (`admit`): the prepared model, the request message looked up in the
  model's request cache by its stable bytes (decoded only when new), its pools
  resolved by the path (held for the execution), the record validated on those
  very mappings reused or built, bound and validated (and kept); the per-call
  fields (timing, deadline, loop timeout) are the path's, read and checked on
  every call.
- **schedule** (`inline_slot`, `worker_slot`, `submit`, `run_waited`): on the
  caller's thread when a worker slot is free, else on the execution pool by
  priority (started at once on an extra thread when it preempts).
- **run** (`Job.run`, `outcome`): within the client's identity, file pools read
  in and written back, trace spans, operation times only for a client that
  asked; a HalError is the answer's status, anything else a driver bug
  answered GENERAL_FAILURE (`failure`).
- **answer** (`answered`): the path's encoder and sender, the call's count in
  flight ended, the priority tickets handed to the linger.

The one invalidation point of the request cache is `unreachable`: a mapping
that stops being reachable (a memory id freed or replaced, a burst slot freed,
replaced or released with its burst) takes with it every record built on it,
on every prepared model of the client. A client's going needs nothing more:
its prepared models, and their caches, go with its handle table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mlts.hal import qos, trace, validate
from mlts.hal.buffer_use import bind_buffers
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError, invalid
from mlts.hal.memory import FileMemory, SharedMemory, file_pools_in, file_pools_out
from mlts.hal.types import ExecutionResult, Request
from mlts.ipc.burst_messages import BurstRequest, decode_request
from mlts.ipc.compact_calls import RequestKey
from mlts.ipc.service.buffer_calls import guard_buffers
from mlts.ipc.service.client import Client
from mlts.ipc.service.device_calls import PreparedEntry, close_memory
from mlts.ipc.service.handles import HandleTable, Kind, Resource
from mlts.ipc.service.request_cache import Known

_PREPARED = Kind.PREPARED
_BUFFER = Kind.BUFFER


@dataclass(slots=True)
class Job:
    """An admitted execution: what to run and every reference it holds until it ends."""

    entry: PreparedEntry = None  # type: ignore[assignment]
    request: Request = None  # type: ignore[assignment]
    measure: MeasureTiming = MeasureTiming.NO
    deadline: TimePoint | None = None
    loop_timeout: int | None = None
    held: list[Resource] = field(default_factory=list)
    transient: list[SharedMemory] = field(default_factory=list)
    client_key: int = 0
    app: int = 0
    files: bool = False  # a pool is a client's file (FileMemory): read in before, outputs written after
    admitted_ns: int = 0  # when admission ended (CLOCK_MONOTONIC), while tracing (mlts.hal.trace)
    client_pid: int = 0
    #: The client's table, and the bytes of `transient` counted against its mapped-memory budget.
    table: HandleTable | None = None
    charged: int = 0
    #: What runs the request: the prepared model's executeSynchronously, or the driver's burst object's
    #: execute (same arguments).
    execute: Callable[..., ExecutionResult] | None = None
    #: The trace spans' `path` (bursts say so); empty for socket calls.
    path: str = ""

    def run(self, deadline: TimePoint | None = None, acting: bool = False) -> ExecutionResult:
        """Run the admitted request (with `deadline` instead of the call's, when given); `acting`: the
        calling thread acts for the client already (a burst's listener), else it is looked up."""
        if trace.enabled:
            return self._traced(deadline)
        if self.files:
            return self._run_files(deadline)
        if acting:
            return self._plain(deadline)
        return self._run(deadline)

    def _traced(self, deadline: TimePoint | None) -> ExecutionResult:
        started = trace.now_ns()
        labels = {"client_pid": self.client_pid, **({"path": self.path} if self.path else {})}
        if self.admitted_ns:
            trace.span("queue", "service", self.admitted_ns, started, **labels)
        try:
            return self._run_files(deadline) if self.files else self._run(deadline)
        finally:
            trace.span("execute", "service", started, trace.now_ns(), **labels)

    def _run_files(self, deadline: TimePoint | None) -> ExecutionResult:
        """`_run`, the client's files among the pools read in before and outputs written back after."""
        pending = file_pools_in(self.request)
        result = self._run(deadline)
        file_pools_out(pending)
        return result

    def _run(self, deadline: TimePoint | None) -> ExecutionResult:
        execute = self.execute
        if execute is None:
            execute = self.entry.prepared.executeSynchronously
        if deadline is None:
            deadline = self.deadline
        # The driver tells clients (and their apps) apart by these keys.
        # The client's reader thread, and a burst's listener, act for it already: an inline run sets nothing.
        if qos.current_client() == self.client_key:
            result = execute(self.request, self.measure, deadline, self.loop_timeout)
        else:
            with qos.serving_client(self.client_key, self.app):
                result = execute(self.request, self.measure, deadline, self.loop_timeout)
        if result.operation_times is not None and not self.request.measure_operations:
            result = replace(result, operation_times=None)  # a client that did not ask gets none
        return result

    def _plain(self, deadline: TimePoint | None) -> ExecutionResult:
        """`_run` on a thread that acts for the client (no files, no tracing)."""
        execute = self.execute
        if execute is None:
            execute = self.entry.prepared.executeSynchronously
        result = execute(
            self.request, self.measure, self.deadline if deadline is None else deadline, self.loop_timeout
        )
        if result.operation_times is not None and not self.request.measure_operations:
            result = replace(result, operation_times=None)  # a client that did not ask gets none
        return result

    def finish(self) -> None:
        """Give back what the job holds (transient pools, their budget, its references)."""
        if self.transient:
            for memory in self.transient:
                close_memory(memory)
            self.transient.clear()
        if self.charged and self.table is not None:
            self.table.release_bytes(self.charged)
            self.charged = 0
        if self.held:
            for resource in self.held:
                resource.release()
            self.held.clear()


# ------------------------------------------------------------ admit


def admit(
    client: Client,
    job: Job,
    method: str,
    entry: PreparedEntry | None,
    refused: HalError | None,
    key: RequestKey | None,
    message: bytes | BurstRequest,
    bad: str,
    resolve: Callable[[Known], tuple[Any, ...]],
    keep: Callable[[Known, tuple[Any, ...], Request, Any, bool], None] | None = None,
) -> None:
    """Admission, the part every path shares: sets `job.entry`, `job.request` and `job.files` (the
    path has set the per-call fields: measure, deadline, loop timeout).

    `entry`: the prepared model (None when `refused`, the error naming it, which is raised once the
    pools are resolved: a call naming unknown pools is told so first, as on every path).
    `key` and `message`: the request message's stable bytes (None: not kept, e.g. a pool for this call
    only) and the message itself (or, from a JSON call, its decoded form); a message that does not
    decode is INVALID_ARGUMENT "`bad`: what is wrong".
    `resolve(known)`: the mappings of the request's memory pools (`known.slots`), in order, looked up
    by the path on every call (and held until the job ends, as the path needs).
    `keep`: how the path keeps a validated record (a burst checks under its lock that its slots did
    not change meanwhile); by default the cache's `keep`.
    """
    known = entry.requests.known(key) if entry is not None and key is not None else None
    if known is None:
        if type(message) is BurstRequest:
            decoded = message
        else:
            try:
                decoded = decode_request(message)  # type: ignore[arg-type]
            except ValueError as e:
                raise invalid(f"{bad}: {e}") from None
        known = Known(decoded) if entry is None else entry.requests.learn(key, decoded)
    memories = resolve(known)
    if entry is None:
        assert refused is not None
        raise refused
    cache = entry.requests
    job.entry = entry
    found = cache.validated(known, memories)
    if found is not None:
        job.request, job.files = found
        return
    guard = guard_buffers(client, method, known.tokens) if known.tokens else None
    decoded = known.decoded
    request = Request(decoded.inputs, decoded.outputs, known.pools(memories), decoded.measure_operations)
    files = any(type(p) is FileMemory for p in memories)
    if entry.model is not None:
        # A service that does not pre-validate hands the driver the request as it came: its driver
        # buffers' roles, dimensions and contents are the driver's to judge (they are this client's
        # buffers: the path made sure).
        if client.host.prevalidate:
            request = bind_buffers(request, entry.prepared, lambda t: buffer_of(client, method, t))
            validate.validate_request(request, entry.model)
        if key is not None:
            (cache.keep if keep is None else keep)(known, memories, request, guard, files)
    job.request, job.files = request, files


def buffer_of(client: Client, method: str, token: int) -> Any:
    """The buffer behind a token of this client (as binding looks them up)."""
    resource = client.handles.peek(_BUFFER, token)
    if resource is None:
        raise invalid(f"{method}: buffer token {token} is not a live buffer of this client")
    return resource.value


def unreachable(handles: HandleTable, memory: object) -> None:
    """The one invalidation point of the request caches: `memory` stops being reachable (its memory id
    freed or replaced, its burst slot freed or replaced, its burst released), so every record built on
    it, on every prepared model of the client, goes."""
    for entry in handles.values(_PREPARED):
        entry.requests.forget(memory)


# ------------------------------------------------------------ schedule


def inline_slot(client: Client, priority: int) -> Callable[[], None] | None:
    """A lone synchronous call on an idle service may run on the reader's thread (saving a thread
    hand-off), counted in the pool at its priority (so higher-priority work preempts it). With other
    calls of this client in flight or waiting on the socket it goes to the pool, so they can run beside
    it. Returns what gives the slot back, or None (no slot taken).

    Work that outranks what every worker runs goes to the pool too, which starts it at once on an
    extra thread: run on the reader's thread, it would make the reader a busy thread, and on a CPU kept
    busy by the executions it preempts the scheduler then wakes the reader late for the next call
    (measured: HIGH latency under a LOW load twice as long).

    A call below the highest priority this connection prepared a model at goes to the pool too: while
    it ran on the reader's thread, a call of that higher priority from the same connection (another
    thread of the client) would wait on the socket, unread, until the lower one ended.

    Asynchronous and fenced executions always go to the pool: their launches must be answered at once,
    one after the other, however long each execution takes."""
    # Only this thread (the reader) adds calls in flight: a stale count is a higher one, so reading it
    # without the lock errs towards the pool.
    if client.in_flight_now != 1 or client.conn.pending() or priority < client.top_priority:
        return None
    return worker_slot(client, priority)


def worker_slot(client: Client, priority: int) -> Callable[[], None] | None:
    """A worker slot of the execution pool for a run on the calling thread (a burst's listener runs
    each request so, one at a time), counted at `priority`; what gives it back, or None (no free slot,
    or the run outranks what every worker runs: it goes to the pool, see `inline_slot`)."""
    pool, app = client.host.exec_pool, client.app
    if pool.try_inline(app, priority):
        return lambda: pool.end_inline(app, priority)
    return None


def submit(client: Client, method: str, work: Callable[[], None], priority: int) -> None:
    """`work` on the execution pool by priority among the client's work (apps take turns);
    DEVICE_UNAVAILABLE when the service is stopping."""
    try:
        client.host.exec_pool.submit(work, priority, client.app)
    except RuntimeError:
        raise HalError(ErrorStatus.DEVICE_UNAVAILABLE, f"{method}: the service is stopping") from None


def run_waited(client: Client, method: str, job: Job) -> ExecutionResult:
    """`job` run on an execution worker (queued by priority, or started at once when it preempts),
    waited for: for a path that answers on its own thread (a burst's listener)."""
    done = threading.Event()
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append((True, job.run()))
        except BaseException as e:
            outcome.append((False, e))
        finally:
            done.set()

    submit(client, method, work, job.entry.priority)
    done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


# ------------------------------------------------------------ run and answer


def failure(client: Client, method: str, exc: Exception, refuse: bool = True, named: bool = True) -> HalError:
    """The error an execution's answer carries: a HalError as it is (counted in the refusal log unless
    `refuse` is false), anything else a driver bug, GENERAL_FAILURE "method: Type: text" (the method
    left out unless `named`: a burst's result says only what was raised), logged with its traceback."""
    if isinstance(exc, HalError):
        if refuse:
            client.refused(method, exc)
        return exc
    text = f"{type(exc).__name__}: {exc}"
    error = HalError(ErrorStatus.GENERAL_FAILURE, f"{method}: {text}" if named else text)
    client.driver_raised(method, exc, error)
    return error


class Answer:
    """How one execution's outcome goes out: `encode(result)` (the success's message, made within the
    error mapping), `send(message)` and `error(HalError)` (sends the failure)."""

    __slots__ = ("encode", "send", "error")

    def __init__(
        self,
        encode: Callable[[ExecutionResult], Any],
        send: Callable[[Any], object],
        error: Callable[[HalError], object],
    ) -> None:
        self.encode = encode
        self.send = send
        self.error = error


def answered(
    client: Client, method: str, job: Job, answer: Answer, slot: Callable[[], None] | None = None
) -> None:
    """Run `job` on this thread and answer it: the job's references and the call's count in flight end
    before the answer goes (and `slot`, the inline worker slot, before those); the driver's priority
    ticket is left once the answer is sent, or a moment later while lower-priority work waits
    (Client.linger), so the executions this one outranks stay paused until the answer is on its way.
    A client already gone gets nothing."""
    with qos.holding_tickets() as held:
        message: Any = None
        error: HalError | None = None
        try:
            if client.closed.is_set():
                return  # the client is gone: nobody to answer
            message = answer.encode(job.run())
        except Exception as e:
            error = failure(client, method, e)
        finally:
            if slot is not None:
                slot()
            job.finish()
            client.end()
        if error is None:
            answer.send(message)
        else:
            answer.error(error)
        if held:
            client.linger(held, job.entry.priority)
