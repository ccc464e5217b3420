"""Waitable results of asynchronous and fenced executions, and their generic in-process form.

`ExecutionCallback` is what an asynchronous `execute` returns: it completes
once with a result or an error and can be waited on. `FencedExecutionCallback`
answers `getExecutionInfo` for a fenced execution once its fence is
signalled. `launch_async` and `launch_fenced` give any PreparedModel both
paths on top of its `executeSynchronously`, each on a thread of its own (the
service has its own scheduler and does not use them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlts.hal import deadlines
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.fence import FenceState, SyncFence, wait_fds
from mlts.hal.operation_times import OperationTimes
from mlts.hal.types import ExecutionResult, Timing


class ExecutionCallback:
    """Completes once, with an ExecutionResult or a HalError; thread-safe."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: ExecutionResult | None = None
        self._error: HalError | None = None
        self._lock = threading.Lock()
        self._listeners: list[Callable[[ExecutionCallback], None]] = []

    def notify(self, result: ExecutionResult | None = None, error: HalError | None = None) -> None:
        """Complete with `result` or `error` (the first completion wins)."""
        with self._lock:
            if self._done.is_set():
                return
            self._result, self._error = result, error
            self._done.set()
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(self)

    def on_done(self, listener: Callable[[ExecutionCallback], None]) -> None:
        """Call `listener(self)` when complete (at once if already)."""
        with self._lock:
            if not self._done.is_set():
                self._listeners.append(listener)
                return
        listener(self)

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until complete or `timeout` seconds pass; True once complete."""
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> ExecutionResult:
        """The result once complete; raises its HalError, or MISSED_DEADLINE_TRANSIENT after `timeout`."""
        if not self.wait(timeout):
            raise HalError(
                ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"the execution did not complete within {timeout} s"
            )
        if self._error is not None:
            raise HalError(self._error.status, self._error.message, self._error.output_shapes)
        assert self._result is not None
        return self._result


@dataclass(frozen=True)
class FencedExecutionInfo:
    """What getExecutionInfo reports: the status and the two timings of a fenced execution.

    `operation_times`: the driver's per-operation times when the request asked for them
    (`mlts.hal.operation_times`, an extension of the HAL), else None.
    """

    status: ErrorStatus
    timing_launched: Timing
    timing_fenced: Timing
    message: str = ""
    operation_times: OperationTimes | None = None


class FencedExecutionCallback:
    """The fenced execution's report, available once its fence is signalled."""

    def getExecutionInfo(self) -> FencedExecutionInfo:
        raise NotImplementedError


class LocalFencedCallback(FencedExecutionCallback):
    """Filled in by the thread that ran the execution."""

    def __init__(self) -> None:
        self.info: FencedExecutionInfo | None = None

    def getExecutionInfo(self) -> FencedExecutionInfo:
        if self.info is None:
            raise HalError(
                ErrorStatus.GENERAL_FAILURE, "the fenced execution has not finished; wait for its fence first"
            )
        return self.info


def check_fences(wait_for: Sequence[SyncFence]) -> None:
    """GENERAL_FAILURE when an input fence was signalled with an error."""
    for n, fence in enumerate(wait_for):
        if fence.state() == FenceState.ERROR:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"input fence {n} was signalled with an error")


def launch_async(run: Callable[[], ExecutionResult]) -> ExecutionCallback:
    """Run `run` on a new thread; its result completes the returned callback."""
    callback = ExecutionCallback()

    def target() -> None:
        try:
            callback.notify(run())
        except HalError as e:
            callback.notify(error=e)
        except Exception as e:
            callback.notify(error=HalError(ErrorStatus.GENERAL_FAILURE, f"execute: {type(e).__name__}: {e}"))

    threading.Thread(target=target, name="execute", daemon=True).start()
    return callback


def launch_fenced(
    run: Callable[[TimePoint | None], ExecutionResult],
    wait_for: Sequence[SyncFence],
    measure: MeasureTiming,
    deadline: TimePoint | None,
    timeout_after_fence: int | None,
    fence_wait_limit: float = 60.0,
) -> tuple[SyncFence, LocalFencedCallback]:
    """Wait for `wait_for` on a new thread, then `run(deadline)`, then signal the returned fence.

    As the service's executeFenced (and NNAPI's sample driver): a deadline that passed before the call
    fails it with MISSED_DEADLINE_PERSISTENT without waiting for the fences.
    """
    launched = time.monotonic_ns()
    out = SyncFence.create()
    callback = LocalFencedCallback()
    fds = [f.fd for f in wait_for]

    def target() -> None:
        fenced: int | None = None
        try:
            deadlines.check_before(deadline, "executeFenced", launched)
            limit = fence_wait_limit
            if deadline is not None:
                limit = min(limit, deadlines.seconds_left(deadline, launched))
            if not wait_fds(fds, limit):
                raise HalError(
                    ErrorStatus.MISSED_DEADLINE_TRANSIENT, "the input fences were not all signalled in time"
                )
            check_fences(wait_for)
            fenced = time.monotonic_ns()
            effective = deadline
            if timeout_after_fence is not None:
                after = deadlines.after_ns(timeout_after_fence, fenced)
                effective = after if effective is None else min(effective, after)
            result = run(effective)
            end = time.monotonic_ns()
            if measure == MeasureTiming.YES:
                dev = result.timing.time_on_device
                info = FencedExecutionInfo(
                    ErrorStatus.NONE,
                    Timing(dev, (end - launched) // 1000),
                    Timing(dev, (end - fenced) // 1000),
                    operation_times=result.operation_times,
                )
            else:
                info = FencedExecutionInfo(
                    ErrorStatus.NONE, Timing(), Timing(), operation_times=result.operation_times
                )
            callback.info = info
            out.signal(ok=True)
        except Exception as e:
            error = (
                e if isinstance(e, HalError) else HalError(ErrorStatus.GENERAL_FAILURE, f"executeFenced: {e}")
            )
            callback.info = FencedExecutionInfo(error.status, Timing(), Timing(), error.message)
            out.signal(ok=False)

    threading.Thread(target=target, name="execute-fenced", daemon=True).start()
    return out, callback
