"""Handlers of fenced executions: executeFenced, getExecutionInfo and releaseExecution.

A fenced execution is admitted like every socket execution (`execution_calls.
admit`, the execution pipeline's admission), answered at once with its handle
and a new sync fence, and queued on the execution pool once its input fences
are signalled (`fence_watcher`); its end posts the report (a compact client's,
unasked) and then signals the fence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from mlts.hal import codec, deadlines, operation_times
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError, invalid
from mlts.hal.fence import SyncFence
from mlts.hal.operation_times import OperationTimes
from mlts.hal.types import ExecutionResult, Timing
from mlts.ipc import compact_calls
from mlts.ipc.service import pipeline
from mlts.ipc.service.args import arg, handle, int_list, opt_ns
from mlts.ipc.service.client import DEFERRED, Call, Client, Handler
from mlts.ipc.service.execution_calls import admit
from mlts.ipc.service.handles import Kind, Resource
from mlts.ipc.service.pipeline import Job

#: At most this many input fences per fenced execution.
MAX_WAIT_FOR = 32


class FencedExecution:
    """What `getExecutionInfo` reports about one fenced execution, and the fence it signals."""

    def __init__(self, fence: SyncFence, measure: MeasureTiming) -> None:
        self.fence = fence
        self.measure = measure
        self.launched_ns = time.monotonic_ns()
        self.done = threading.Event()
        self.status = ErrorStatus.NONE
        self.message = ""
        self.timing_launched = Timing()
        self.timing_fenced = Timing()
        self.operation_times: OperationTimes | None = None
        #: Called with this record once it is complete, before the fence signals (compact calls send
        #: the report then, so a client that saw the fence finds it on the socket).
        self.announce: Callable[[FencedExecution], None] | None = None

    def complete(self, fenced_ns: int | None, result: ExecutionResult | None, error: HalError | None) -> None:
        end = time.monotonic_ns()
        if error is None and result is not None and result.operation_times is not None:
            try:
                self.operation_times = operation_times.checked_by_service(result.operation_times)
            except HalError as e:
                error = e
        if error is not None:
            self.status, self.message = error.status, error.message
        elif result is not None and self.measure == MeasureTiming.YES and fenced_ns is not None:
            on_device = result.timing.time_on_device
            self.timing_launched = Timing(on_device, (end - self.launched_ns) // 1000)
            self.timing_fenced = Timing(on_device, (end - fenced_ns) // 1000)
        if self.announce is not None:
            self.announce(self)
        self.done.set()
        self.fence.signal(ok=error is None)
        self.fence.close()

    def info(self) -> dict[str, Any]:
        if not self.done.is_set():
            return {"finished": False}
        info = {
            "finished": True,
            "status": int(self.status),
            "message": self.message,
            "timingLaunched": codec.timing_to_dict(self.timing_launched),
            "timingFenced": codec.timing_to_dict(self.timing_fenced),
        }
        if self.operation_times is not None:
            info["operationTimes"] = operation_times.to_list(self.operation_times)
        return info


def execute_fenced(client: Client, call: Call) -> dict[str, Any]:
    """Reply at once with the execution's handle and its fence; run once every input fence is signalled."""
    m = call.method
    client.handles.check_room(Kind.FENCED, m)
    if call.compact is not None:
        # A compact call waits for every fd of its frame, in order.
        if len(call.fds) > MAX_WAIT_FOR:
            raise invalid(f"{m}: 'wait_for' has {len(call.fds)} entries; at most {MAX_WAIT_FOR} are allowed")
        indexes = list(range(len(call.fds)))
        after_fence = call.compact.timeout_after_fence
    else:
        indexes = int_list(call.args, m, "wait_for", MAX_WAIT_FOR)
        after_fence = opt_ns(call.args, m, "timeout_after_fence")
    fences: list[SyncFence] = []
    try:
        for n, i in enumerate(indexes):
            fences.append(SyncFence.from_fd(call.take_fd(i, f"wait_for[{n}]"), f"{m}: wait_for[{n}]"))
        job = admit(client, call)
    except BaseException:
        for fence in fences:
            fence.close()
        raise
    out = SyncFence.create()
    execution = FencedExecution(out, job.measure)
    try:
        number = client.handles.add(Kind.FENCED, Resource(execution, out.close), m)
    except BaseException:
        out.close()
        for fence in fences:
            fence.close()
        job.finish()
        raise
    fenced = _FencedRun(client, call, job, execution, number, after_fence)
    if call.compact is not None:
        execution.announce = fenced.announce
        client.conn.send_compact(compact_calls.fenced_answer(call.id or 0, number), [out.fd])
    else:
        client.conn.send(
            {"kind": "reply", "id": call.id, "ok": True, "result": {"execution": number, "fence": 0}},
            [out.fd],
        )
    fenced.start(fences)
    return DEFERRED


class _FencedRun:
    """One admitted fenced execution from its reply on: waiting for its input fences (up to its
    deadline or the service's limit), running on the execution pool, and finishing (the record
    completed, its fence signalled, its handle released for a compact client)."""

    def __init__(
        self,
        client: Client,
        call: Call,
        job: Job,
        execution: FencedExecution,
        number: int,
        after_fence: int | None,
    ) -> None:
        self.client = client
        self.method = call.method
        self.msg_id = call.id or 0
        self.job = job
        self.execution = execution
        self.number = number
        self.after_fence = after_fence

    def announce(self, done: FencedExecution) -> None:
        """A compact client's report, sent unasked (and `finish` releases the record): a compact
        client never calls getExecutionInfo or releaseExecution for it."""
        self.client.conn.send_compact(
            compact_calls.fenced_done_answer(
                self.msg_id,
                done.status,
                done.message,
                done.timing_launched,
                done.timing_fenced,
                done.operation_times,
            )
        )

    def start(self, fences: list[SyncFence]) -> None:
        """Fail a passed deadline at once, else wait for `fences` (if any), then run."""
        m, host = self.method, self.client.host
        now_ns = time.monotonic_ns()
        # A service that does not pre-validate leaves deadlines to the driver: a passed one reaches
        # it as on the other paths, and the fences are waited for up to the service's limit alone.
        judged = self.job.deadline if host.prevalidate else None
        if deadlines.has_passed(judged, now_ns):  # before waiting for the fences, as NNAPI's driver
            for fence in fences:
                fence.close()
            self.finish(
                None,
                None,
                HalError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, f"{m}: the deadline had already passed"),
            )
            return
        if not fences:
            self.ready(None)
            return
        # Waiting ends at the deadline, or after the service's longest fence wait.
        limit = time.monotonic() + host.fence_wait_limit
        wait_until = limit if judged is None else min(limit, time.monotonic() + (judged - now_ns) / 1e9)
        expired = HalError(
            ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            f"{m}: the input fences were not all signalled "
            + (
                "before the deadline"
                if judged is not None and wait_until < limit
                else f"within {host.fence_wait_limit:g} s"
            ),
        )
        host.fences.add(self.client, fences, wait_until, expired, self.ready)

    def ready(self, error: HalError | None) -> None:
        """The input fences are signalled (or their wait failed with `error`): queue the run."""
        if error is not None:
            self.finish(None, None, error)
            return
        fenced_ns = time.monotonic_ns()
        try:
            pipeline.submit(self.client, self.method, lambda: self.run(fenced_ns), self.job.entry.priority)
        except HalError as e:
            self.finish(None, None, e)

    def run(self, fenced_ns: int) -> None:
        m, client = self.method, self.client
        if client.closed.is_set():
            self.finish(
                fenced_ns, None, HalError(ErrorStatus.DEVICE_UNAVAILABLE, f"{m}: the client disconnected")
            )
            return
        try:
            deadline = self.job.deadline
            if self.after_fence is not None:
                limit_ns = deadlines.after_ns(self.after_fence, fenced_ns)
                deadline = limit_ns if deadline is None else min(deadline, limit_ns)
            result = self.job.run(deadline)
        except Exception as e:
            # Its report carries the error (not counted as a refusal of the call, answered already).
            self.finish(fenced_ns, None, pipeline.failure(client, m, e, refuse=False))
        else:
            self.finish(fenced_ns, result, None)

    def finish(self, fenced_ns: int | None, result: ExecutionResult | None, error: HalError | None) -> None:
        client, execution = self.client, self.execution
        self.job.finish()
        held = None
        if execution.announce is not None:
            # The record leaves the table before the report is sent: a client that read the report
            # (or saw the fence) and then names the execution finds it released. Its fence stays
            # open until it has been signalled.
            held = client.handles.peek(Kind.FENCED, self.number)
            if held is not None:
                try:
                    held.acquire()
                except HalError:
                    held = None
            client.handles.remove(Kind.FENCED, self.number)
        execution.complete(fenced_ns, result, error)
        if held is not None:
            held.release()
        client.end()


def get_execution_info(client: Client, call: Call) -> dict[str, Any]:
    """The execution's report; with `release` true a finished execution's handle is released too."""
    number = handle(call.args, call.method, "execution")
    release = arg(call.args, call.method, "release", bool, False)
    resource = client.handles.get(Kind.FENCED, number, call.method)
    try:
        info = resource.value.info()
    finally:
        resource.release()
    if release and info["finished"]:
        client.handles.remove(Kind.FENCED, number)
    return info


def release_execution(client: Client, call: Call) -> dict[str, Any]:
    number = handle(call.args, call.method, "execution")
    if not client.handles.remove(Kind.FENCED, number):
        raise invalid(f"{call.method}: unknown fenced execution handle {number}")
    return {}


HANDLERS: dict[str, Handler] = {
    "executeFenced": execute_fenced,
    "getExecutionInfo": get_execution_info,
    "releaseExecution": release_execution,
}
