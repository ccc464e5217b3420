"""The socket's execution calls: executeSynchronously and execute (compact or JSON), and freeMemory.

What is the socket's own on the execution pipeline (mlts.ipc.service.pipeline):
where a call's request and pools come from (a compact call's request message
naming memory ids of the client's table and buffer tokens; a JSON call's
request, whose pools with fds are mapped first, converted to the same message)
and how its answer goes out (a compact frame, or the JSON reply or notify of
the client's protocol version). Every execution is admitted on the client's
reader thread and run there (a lone synchronous call on an idle service) or on
the service's execution pool, ordered by its prepared model's priority. What it
uses is reference-counted, so releasing a model or freeing a pool while an
execution is queued or running is safe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from mlts.hal import codec, trace
from mlts.hal.enums import MeasureTiming
from mlts.hal.errors import HalError, invalid
from mlts.hal.memory import SharedMemory
from mlts.ipc import compact_calls
from mlts.ipc.burst_messages import POOL_TOKEN, BurstRequest, PoolRef, encode_request
from mlts.ipc.service import pipeline
from mlts.ipc.service.args import arg, enum_value, int_list, opt_deadline, opt_ns, pool_token
from mlts.ipc.service.buffer_calls import hold_buffer
from mlts.ipc.service.client import DEFERRED, Call, Client, Handler
from mlts.ipc.service.device_calls import close_memory, map_memory
from mlts.ipc.service.handles import Kind, Resource
from mlts.ipc.service.pipeline import Answer, Job
from mlts.ipc.service.request_cache import Known
from mlts.ipc.service.transport import error_dict, error_reply, ok_reply

_PREPARED = Kind.PREPARED
_MEMORY = Kind.MEMORY


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
                old = client.handles.peek(_MEMORY, mem_id)
                client.handles.add(_MEMORY, resource, m, key=mem_id)
                if old is not None:  # the id now names another mapping: the old one is unreachable
                    pipeline.unreachable(client.handles, old.value)
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


def admit(client: Client, call: Call) -> Job:
    """Admit a socket execution call (compact or JSON) through the pipeline; the caller must `finish()`
    the job."""
    job = Job()
    job.client_key, job.app = client.key, client.app
    try:
        if call.compact is not None:
            _admit_compact(client, call, call.compact, job)
        else:
            _admit_json(client, call, job)
    except BaseException:
        job.finish()
        raise
    if trace.enabled:
        job.admitted_ns, job.client_pid = trace.now_ns(), client.pid
    return job


def _admit_compact(client: Client, call: Call, c: compact_calls.CompactCall, job: Job) -> None:
    """A compact call (protocol 1.4): its pools are memory ids of the client's table and buffer tokens;
    its per-call fields were read and checked with its fixed part (compact_calls.CallDecoder.head)."""
    m = call.method
    handles = client.handles
    refused = None
    try:
        prepared = handles.get(_PREPARED, c.prepared, m)
    except HalError as e:  # told after the pools, as on the JSON path
        entry, refused = None, e
    else:
        job.held.append(prepared)
        entry = prepared.value
    job.measure, job.deadline, job.loop_timeout = c.measure, c.deadline, c.loop_timeout

    def memories(known: Known) -> tuple[Any, ...]:
        held = job.held
        found = []
        for value in known.slots:
            try:
                resource = handles.get(_MEMORY, value, m)
            except HalError:
                n = _position(known, value)
                raise invalid(
                    f"{m}: request.pools[{n}] names memory id {value}, which this client has not mapped "
                    "(or freed)"
                ) from None
            held.append(resource)
            found.append(resource.value)
        return tuple(found)

    pipeline.admit(client, job, m, entry, refused, c.key, c.request, "bad compact call", memories)


def _position(known: Known, value: int) -> int:
    """The position among the request's pools of the first memory named `value`."""
    return next(n for n, (kind, v) in enumerate(known.decoded.pools) if kind != POOL_TOKEN and v == value)


def _admit_json(client: Client, call: Call, job: Job) -> None:
    """A JSON call (protocol 1.3 and older): its pools are mapped first (those with fds, and cached
    under their ids: client and service then agree on the cache even when the call fails), the model
    and the timing arguments checked, and its request converted to the request message every path
    admits (burst_messages), which keys the request cache unless a pool is for this call only."""
    m = call.method
    args = call.args
    request_doc = arg(args, m, "request", dict)
    descs = codec.request_pool_descs(request_doc)
    pools = _resolve_pools(client, call, descs, job)
    prepared = client.handles.get(_PREPARED, arg(args, m, "prepared", int), m)
    job.held.append(prepared)
    measure = int(arg(args, m, "measure", (bool, int), False))
    job.measure = enum_value(MeasureTiming, m, "measure", measure)
    job.deadline = opt_deadline(args, m, "deadline")
    job.loop_timeout = opt_ns(args, m, "loop_timeout")
    cache = prepared.value.requests
    converted = cache.converted
    if converted is not None and same_document(converted[0], request_doc):
        decoded, key = converted[1], converted[2]
    else:
        decoded, key = _converted(request_doc, descs, pools)
        cache.converted = (request_doc, decoded, key)
    memories = tuple(p for p in pools if type(p) is not int)
    pipeline.admit(client, job, m, prepared.value, None, key, decoded, "request", lambda _known: memories)


def same_document(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same document: equal, and of the same types throughout
    (`==` alone takes `false`, `0` and `0.0` for one another, which the request's checks do not)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same_document(v, b[k]) for k, v in a.items())
    if type(a) is list:
        return len(a) == len(b) and all(map(same_document, a, b))
    return bool(a == b)


def _converted(
    request_doc: dict[str, Any], descs: list[dict[str, Any]], pools: list[Any]
) -> tuple[BurstRequest, compact_calls.RequestKey | None]:
    """A JSON request (its structure checked, `codec.request_from_dict`) as a request message, and the
    message's key in the request cache (None: a pool for this call only, or a field the message cannot
    carry; such a request is checked as it is and not kept)."""
    request = codec.request_from_dict(request_doc, tuple(pools))
    refs = tuple(_pool_ref(d) for d in descs)
    decoded = BurstRequest(
        0,
        tuple(_TRANSIENT if r is None else r for r in refs),
        request.inputs,
        request.outputs,
        measure_operations=request.measure_operations,
    )
    if None in refs:
        return decoded, None
    try:
        return decoded, compact_calls.request_head(encode_request(decoded))[4]
    except (ValueError, OverflowError, struct.error):
        return decoded, None


#: The reference a pool for one call only takes in its request message (never kept: no key).
_TRANSIENT = PoolRef.slot(0)


def _pool_ref(desc: dict[str, Any]) -> PoolRef | None:
    """The request-message reference of a JSON pool description (resolved already): a memory id, a
    buffer token, or None (a pool for this call only)."""
    if "token" in desc:
        return PoolRef.token(desc["token"])
    mem_id = desc.get("memory")
    return None if mem_id is None else PoolRef.slot(mem_id)


# ------------------------------------------------------------ synchronous


def execute_synchronously(client: Client, call: Call) -> dict[str, Any]:
    job = admit(client, call)
    msg_id = call.id or 0
    conn = client.conn
    if call.compact is not None:
        answer = Answer(
            lambda r: compact_calls.result_answer(compact_calls.RESULT, msg_id, r),
            conn.send_compact,
            lambda e: conn.send(error_reply(msg_id, e)),
        )
    else:
        answer = Answer(
            lambda r: ok_reply(msg_id, codec.execution_result_to_dict(r)),
            conn.send,
            lambda e: conn.send(error_reply(msg_id, e)),
        )
    priority = job.entry.priority
    slot = pipeline.inline_slot(client, priority)
    if slot is not None:
        pipeline.answered(client, call.method, job, answer, slot)
        return DEFERRED
    try:
        pipeline.submit(
            client, call.method, lambda: pipeline.answered(client, call.method, job, answer), priority
        )
    except HalError:
        job.finish()
        raise
    return DEFERRED


# ------------------------------------------------------------ asynchronous


def execute(client: Client, call: Call) -> dict[str, Any]:
    """Launch: the reply says the execution started; a notify `executionComplete` (same id) ends it."""
    job = admit(client, call)
    msg_id = call.id
    conn = client.conn

    def failed(error: HalError) -> None:
        conn.send(
            {
                "kind": "notify",
                "event": "executionComplete",
                "id": msg_id,
                "status": int(error.status),
                "error": error_dict(error),
            }
        )

    if call.compact is not None:
        answer = Answer(
            lambda r: compact_calls.result_answer(compact_calls.COMPLETE, msg_id or 0, r),
            conn.send_compact,
            failed,
        )
        # The launch reply goes first, so the client knows the id before any completion can arrive.
        conn.send_compact(compact_calls.launched_answer(msg_id or 0))
    else:
        answer = Answer(
            lambda r: {
                "kind": "notify",
                "event": "executionComplete",
                "id": msg_id,
                "status": 0,
                "result": codec.execution_result_to_dict(r),
            },
            conn.send,
            failed,
        )
        conn.send({"kind": "reply", "id": msg_id, "ok": True, "result": {}})
    try:
        pipeline.submit(
            client, "execute", lambda: pipeline.answered(client, "execute", job, answer), job.entry.priority
        )
    except HalError as e:
        job.finish()
        client.end()
        failed(e)
    return DEFERRED


# ------------------------------------------------------------ pools


def free_memory(client: Client, call: Call) -> dict[str, Any]:
    ids = int_list(call.args, call.method, "ids", client.host.limits.max_memories)
    freed = 0
    for mem_id in ids:
        resource = client.handles.peek(_MEMORY, mem_id)
        if not client.handles.remove(_MEMORY, mem_id):
            continue
        freed += 1
        if resource is not None:
            # A later call could not reach the mapping (the id is unknown now): this lets it go.
            pipeline.unreachable(client.handles, resource.value)
    return {"freed": freed}


HANDLERS: dict[str, Handler] = {
    "executeSynchronously": execute_synchronously,
    "execute": execute,
    "freeMemory": free_memory,
}
