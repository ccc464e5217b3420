"""Handlers of the PreparedModel methods: admission of every execution, synchronous and asynchronous ones, pools.

Every execution is admitted on the client's reader thread (arguments,
handles, pools, the request checked against the model) and then run on the
service's execution pool, ordered by its prepared model's priority. What it
uses is reference-counted, so releasing a model or freeing a pool while an
execution is queued or running is safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mlts.hal import codec, qos, trace, validate
from mlts.hal.buffer_use import bind_buffers, bound_state
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError, invalid
from mlts.hal.memory import FileMemory, SharedMemory, file_pools_in, file_pools_out
from mlts.hal.types import ExecutionResult, Request
from mlts.ipc import compact_calls
from mlts.ipc.burst_messages import POOL_TOKEN
from mlts.ipc.service import request_cache
from mlts.ipc.service.args import arg, enum_value, int_list, opt_deadline, opt_ns, pool_token
from mlts.ipc.service.buffer_calls import guard_buffers, hold_buffer
from mlts.ipc.service.client import DEFERRED, Call, Client, Handler
from mlts.ipc.service.device_calls import PreparedEntry, close_memory, map_memory
from mlts.ipc.service.handles import HandleTable, Kind, Resource
from mlts.ipc.service.transport import error_dict, ok_reply


@dataclass
class Job:
    """An admitted execution: what to run and every reference it holds until it ends."""

    entry: PreparedEntry
    request: Request
    measure: MeasureTiming
    deadline: TimePoint | None
    loop_timeout: int | None
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

    def run(self, deadline: TimePoint | None = None) -> ExecutionResult:
        if trace.enabled:
            started = trace.now_ns()
            if self.admitted_ns:
                trace.span("queue", "service", self.admitted_ns, started, client_pid=self.client_pid)
            try:
                return self._run_files(deadline)
            finally:
                trace.span("execute", "service", started, trace.now_ns(), client_pid=self.client_pid)
        return self._run_files(deadline)

    def _run_files(self, deadline: TimePoint | None) -> ExecutionResult:
        if self.files:
            pending = file_pools_in(self.request)
            result = self._run(deadline)
            file_pools_out(pending)
            return result
        return self._run(deadline)

    def _run(self, deadline: TimePoint | None) -> ExecutionResult:
        # The driver tells clients (and their apps) apart by these keys.
        # The client's reader thread acts for it already (Client.serve): an inline run sets nothing.
        if qos.current_client() == self.client_key:
            result = self.entry.prepared.executeSynchronously(
                self.request, self.measure, self.deadline if deadline is None else deadline, self.loop_timeout
            )
        else:
            with qos.serving_client(self.client_key, self.app):
                result = self.entry.prepared.executeSynchronously(
                    self.request,
                    self.measure,
                    self.deadline if deadline is None else deadline,
                    self.loop_timeout,
                )
        if result.operation_times is not None and not self.request.measure_operations:
            result = replace(result, operation_times=None)  # a client that did not ask gets none
        return result

    def finish(self) -> None:
        for memory in self.transient:
            close_memory(memory)
        self.transient.clear()
        if self.charged and self.table is not None:
            self.table.release_bytes(self.charged)
            self.charged = 0
        for resource in self.held:
            resource.release()
        self.held.clear()


def _closer(memory: SharedMemory) -> Callable[[], None]:
    return lambda: close_memory(memory)


def _resolve_pools(client: Client, call: Call, refs: list[dict[str, Any]], job: Job) -> list[Any]:
    """Request pools from their references (held by `job`).

    Every reference that brings an fd is mapped (and cached when it has an id)
    before anything else is checked, so client and service agree on the cache
    even when the call then fails.
    """
    pools: list[Any] = []
    m = call.method
    for n, ref in enumerate(refs):
        what = f"request.pools[{n}]"
        if "token" in ref:
            token = pool_token(ref, m, what)
            hold_buffer(client, m, token).release()  # this client's buffer (not held: see buffers_of)
            pools.append(token)
            continue
        mem_id = arg(ref, f"{m} {what}", "memory", (int, type(None)), None)
        if "fd" in ref:
            size = arg(ref, f"{m} {what}", "size", int)
            if mem_id is not None:
                client.handles.check_bytes(size, m)
                if client.handles.peek(Kind.MEMORY, mem_id) is None:
                    client.handles.check_room(Kind.MEMORY, m)
            else:
                # A pool for this call only: it counts against the budget while the call holds it.
                client.handles.reserve_bytes(max(size, 0), m)
                job.table = client.handles
                job.charged += max(size, 0)
            memory = map_memory(call, ref, what)
            if mem_id is None:
                job.transient.append(memory)
            else:
                resource = Resource(memory, _closer(memory), memory.size)
                client.handles.add(Kind.MEMORY, resource, m, key=mem_id)
                job.held.append(resource.acquire())
            pools.append(memory)
        elif mem_id is not None:
            try:
                resource = client.handles.get(Kind.MEMORY, mem_id, m)
            except HalError:
                raise invalid(
                    f"{m}: {what} names memory id {mem_id}, which this client has not mapped (or freed)"
                ) from None
            job.held.append(resource)
            pools.append(resource.value)
        else:
            raise invalid(f"{m}: {what} needs 'fd' and 'size', 'memory', or 'token'")
    return pools


def _buffer_of(client: Client, method: str, token: int) -> Any:
    resource = client.handles.peek(Kind.BUFFER, token)
    if resource is None:
        raise invalid(f"{method}: buffer token {token} is not a live buffer of this client")
    return resource.value


def admit(client: Client, call: Call) -> Job:
    """Check an execution call and take everything it needs; the caller must `finish()` the job.

    A request equal to one this prepared model already ran on the same pools is not decoded and
    validated again (mlts.ipc.service.request_cache); the pools and the model are still looked up
    in the client's handle table first, as on every call.
    """
    m = call.method
    compact = call.compact
    if compact is not None:
        job = _admit_compact(client, call, compact)
        if trace.enabled:
            job.admitted_ns, job.client_pid = trace.now_ns(), client.pid
        return job
    request_doc = arg(call.args, m, "request", dict)
    job = Job(None, None, MeasureTiming.NO, None, None)  # type: ignore[arg-type]
    job.client_key, job.app = client.key, client.app
    try:
        descs = codec.request_pool_descs(request_doc)
        pools = _resolve_pools(client, call, descs, job)
        args = call.args

        def timing() -> tuple[MeasureTiming, TimePoint | None, int | None]:
            measure = int(arg(args, m, "measure", (bool, int), False))
            return (
                enum_value(MeasureTiming, m, "measure", measure),
                opt_deadline(args, m, "deadline"),
                opt_ns(args, m, "loop_timeout"),
            )

        _admit_request(
            client,
            job,
            m,
            arg(call.args, m, "prepared", int),
            timing,
            request_doc,
            pools,
            lambda: codec.request_from_dict(request_doc, tuple(pools)),
            request_cache.cacheable(descs),
        )
    except BaseException:
        job.finish()
        raise
    if trace.enabled:
        job.admitted_ns, job.client_pid = trace.now_ns(), client.pid
    return job


#: id(pools of a decoded compact call) -> (those pools, (position, memory id) of each memory among them,
#: whether they name driver buffers). A connection decodes each distinct request once and hands out
#: its pools tuple again (compact_calls.CallDecoder), so a request naming many driver buffers is not
#: walked pool by pool on every call.
_REFS: dict[int, tuple[tuple[Any, ...], tuple[tuple[int, int], ...], bool]] = {}
MAX_KNOWN_POOLS = 256


def _memory_refs(pools: tuple[Any, ...]) -> tuple[tuple[tuple[int, int], ...], bool]:
    """(position, memory id) of each memory among a compact call's pools, and whether any is a token."""
    known = _REFS.get(id(pools))
    if known is not None and known[0] is pools:
        return known[1], known[2]
    refs = tuple((n, value) for n, (kind, value) in enumerate(pools) if kind != POOL_TOKEN)
    found = (pools, refs, len(refs) != len(pools))
    if len(_REFS) >= MAX_KNOWN_POOLS:
        _REFS.clear()
    _REFS[id(pools)] = found
    return refs, found[2]


def _admit_compact(client: Client, call: Call, c: compact_calls.CompactCall) -> Job:
    """`admit` for a compact call (protocol 1.4): its pools are memory ids and buffer tokens."""
    m = call.method
    job = Job(None, None, MeasureTiming.NO, None, None)  # type: ignore[arg-type]
    job.client_key, job.app = client.key, client.app
    try:
        refs, tokens = _memory_refs(c.pools)
        memories: list[Any] = []  # the call's key places the tokens: the memories identify the rest
        for n, value in refs:
            try:
                resource = client.handles.get(Kind.MEMORY, value, m)
            except HalError:
                raise invalid(
                    f"{m}: request.pools[{n}] names memory id {value}, which this client has not mapped "
                    "(or freed)"
                ) from None
            job.held.append(resource)
            memories.append(resource.value)

        def every_pool() -> tuple[Any, ...]:
            """The pools in order, tokens among the memories (only when the request is built)."""
            it = iter(memories)
            return tuple(value if kind == POOL_TOKEN else next(it) for kind, value in c.pools)

        _admit_request(
            client,
            job,
            m,
            c.prepared,
            lambda: (c.measure, c.deadline, c.loop_timeout),
            c.key,
            memories,
            lambda: Request(c.inputs, c.outputs, every_pool(), c.measure_operations),
            True,  # memory ids and buffer tokens only
            (memories, ()),
            # Driver buffers: looked up and bound once, then guarded (buffer_calls.BufferGuard).
            (lambda: [value for kind, value in c.pools if kind == POOL_TOKEN]) if tokens else None,
        )
    except BaseException:
        job.finish()
        raise
    return job


def _admit_request(
    client: Client,
    job: Job,
    m: str,
    prepared_handle: int,
    timing: Callable[[], tuple[MeasureTiming, TimePoint | None, int | None]],
    key: object,
    pools: list[Any],
    build: Callable[[], Request],
    cacheable: bool,
    bound: tuple[list[Any], tuple] | None = None,
    tokens: Callable[[], list[int]] | None = None,
) -> None:
    """The checks both encodings share: the model, the timing arguments, the request.

    `bound`: what identifies the pools, and the state of the buffers they name, when the caller has
    them (mlts.hal.buffer_use.bound_state). `tokens`: a compact call naming driver buffers (whose key
    places them; `bound` then holds its memories only), giving the tokens: the request is reused while
    the guard it was kept with holds (buffer_calls.BufferGuard), else the tokens are looked up and it
    is bound again."""
    prepared = client.handles.get(Kind.PREPARED, prepared_handle, m)
    job.held.append(prepared)
    job.entry = prepared.value
    job.measure, job.deadline, job.loop_timeout = timing()
    cache = job.entry.requests
    guard = None
    if tokens is not None and bound is not None:
        ident: list[Any] = bound[0]
        known = cache.get(key, ident)
        if known is None:
            guard = guard_buffers(client, m, tokens())
    else:
        # Buffer tokens: the request is reused while the buffers it was bound to are as they were then.
        ident, state = bound_state(pools, lambda t: _buffer_of(client, m, t)) if bound is None else bound
        if state:
            key = (key, state)
        known = cache.get(key, ident)
    job.files = any(type(p) is FileMemory for p in ident)
    if known is not None:
        job.request = known
        return
    job.request = build()
    if job.entry.model is not None:
        # A service that does not pre-validate hands the driver the request as it came: its driver
        # buffers' roles, dimensions and contents are the driver's to judge (they are this client's
        # buffers: `hold_buffer` made sure).
        if client.host.prevalidate:
            job.request = bind_buffers(job.request, job.entry.prepared, lambda t: _buffer_of(client, m, t))
            validate.validate_request(job.request, job.entry.model)
        if cacheable:
            cache.put(key, ident, job.request, guard)


def _inline_slot(client: Client, priority: int) -> Callable[[], None] | None:
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
    pool, app = client.host.exec_pool, client.app
    if pool.try_inline(app, priority):
        return lambda: pool.end_inline(app, priority)
    return None


# ------------------------------------------------------------ synchronous


def execute_synchronously(client: Client, call: Call) -> dict[str, Any]:
    job = admit(client, call)
    compact = call.compact is not None
    slot = _inline_slot(client, job.entry.priority)
    if slot is not None:
        # As on the pool's threads (Client.defer): the driver's priority ticket is left once the reply
        # is sent, so the executions this one outranks stay paused until the answer is on its way.
        with qos.holding_tickets() as held:
            try:
                result = job.run()
            finally:
                slot()
                job.finish()
            if compact:
                answer = compact_calls.result_answer(compact_calls.RESULT, call.id or 0, result)
                client.end()
                client.conn.send_compact(answer)
            else:
                reply = ok_reply(call.id or 0, codec.execution_result_to_dict(result))
                client.end()
                client.conn.send(reply)
            if held:
                client.linger(held, job.entry.priority)
            return DEFERRED
    if compact:
        return client.defer(
            client.host.exec_pool,
            call,
            job.run,
            job.finish,
            job.entry.priority,
            lambda r: compact_calls.result_answer(compact_calls.RESULT, call.id or 0, r),
        )
    return client.defer(
        client.host.exec_pool,
        call,
        lambda: codec.execution_result_to_dict(job.run()),
        job.finish,
        job.entry.priority,
    )


# ------------------------------------------------------------ asynchronous


def execute(client: Client, call: Call) -> dict[str, Any]:
    """Launch: the reply says the execution started; a notify `executionComplete` (same id) ends it."""
    job = admit(client, call)
    msg_id = call.id
    compact = call.compact is not None

    def run() -> None:
        # The priority ticket is left once the completion is sent (or a moment later: Client.linger).
        with qos.holding_tickets() as held:
            complete()
            if held:
                client.linger(held, job.entry.priority)

    def complete() -> None:
        notify: dict[str, Any] = {"kind": "notify", "event": "executionComplete", "id": msg_id}
        answer = b""
        try:
            if client.closed.is_set():
                return
            result = job.run()
            if compact:
                answer = compact_calls.result_answer(compact_calls.COMPLETE, msg_id or 0, result)
            else:
                notify.update(status=0, result=codec.execution_result_to_dict(result))
        except HalError as e:
            client.refused("execute", e)
            notify.update(status=int(e.status), error=error_dict(e))
        except Exception as e:
            error = HalError(ErrorStatus.GENERAL_FAILURE, f"execute: {type(e).__name__}: {e}")
            client.driver_raised("execute", e, error)
            notify.update(status=int(error.status), error=error_dict(error))
        finally:
            job.finish()
            client.end()
        if "status" in notify:
            client.conn.send(notify)
        else:
            client.conn.send_compact(answer)

    # The launch reply goes first, so the client knows the id before any completion can arrive.
    if compact:
        client.conn.send_compact(compact_calls.launched_answer(msg_id or 0))
    else:
        client.conn.send({"kind": "reply", "id": msg_id, "ok": True, "result": {}})
    try:
        client.host.exec_pool.submit(run, job.entry.priority, client.app)
    except RuntimeError:
        job.finish()
        client.end()
        error = HalError(ErrorStatus.DEVICE_UNAVAILABLE, "execute: the service is stopping")
        client.conn.send(
            {
                "kind": "notify",
                "event": "executionComplete",
                "id": msg_id,
                "status": int(error.status),
                "error": error_dict(error),
            }
        )
    return DEFERRED


# ------------------------------------------------------------ pools


def free_memory(client: Client, call: Call) -> dict[str, Any]:
    ids = int_list(call.args, call.method, "ids", client.host.limits.max_memories)
    freed = 0
    for mem_id in ids:
        resource = client.handles.peek(Kind.MEMORY, mem_id)
        if not client.handles.remove(Kind.MEMORY, mem_id):
            continue
        freed += 1
        if resource is not None:
            # Requests naming the pool go from every cache at once (a later call could not reach them:
            # the id is unknown now; this only lets the mapping go).
            for entry in client.handles.values(Kind.PREPARED):
                entry.requests.forget(resource.value)
    return {"freed": freed}


HANDLERS: dict[str, Handler] = {
    "executeSynchronously": execute_synchronously,
    "execute": execute,
    "freeMemory": free_memory,
}
