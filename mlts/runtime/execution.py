"""The one execution seam: run a request on a prepared model by a named execution path.

Every tool runs executions through it: an `Executor` (what `Session` holds) bound to one
prepared model and path, or `execute` for a single call, so adding a path means adding it
here only. The paths are the
HAL's: `sync` (executeSynchronously), `async` (execute, then wait for the
completion) and `fenced` (executeFenced with no input fences, then wait for
its sync fence and ask getExecutionInfo) and `burst` (through a burst object
of the prepared model, one per model and thread, kept until the model is
released: executions travel through shared-memory rings and the driver keeps
its memory mappings). Results are the same on every path; only the cost of
getting them differs.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections.abc import Callable
from threading import get_ident

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.interface import Burst, PreparedModel
from mlts.hal.types import ExecutionResult, OptionalTimeoutDuration, OptionalTimePoint, Request


class ExecutionMode(enum.StrEnum):
    """The HAL's execution paths; the value is the name options, results and logs use."""

    SYNC = "sync"
    ASYNC = "async"
    FENCED = "fenced"
    BURST = "burst"

    @classmethod
    def parse(cls, name: str) -> ExecutionMode:
        """The path `name` names, else INVALID_ARGUMENT listing the valid ones."""
        try:
            return cls(name)
        except ValueError:
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                f"execution mode {name!r} is not one of {', '.join(EXECUTION_MODES)}",
            ) from None


#: The execution paths, in the order tools list them.
EXECUTION_MODES: tuple[ExecutionMode, ...] = tuple(ExecutionMode)
DEFAULT_MODE = ExecutionMode.SYNC
# The members as module constants: `execute` compares against them on every call.
_SYNC, _ASYNC, _FENCED, _BURST = EXECUTION_MODES
#: How long a fenced execution's fence is waited for before the driver counts as hung, unless the
#: prepared model's device says how long an execution may take (`execute_timeout`: a remote driver's
#: call timeout, `--call-timeout` of `mlts validate`).
FENCE_WAIT_S = 60.0

_local = threading.local()
_burst_settings: dict[str, int | None] = {"polling_us": None}


def set_burst_polling(polling_us: int | None) -> None:
    """The polling window (µs) of bursts the seam creates from now on; 0 is low-power mode, None the default."""
    if polling_us is not None and not 0 <= polling_us <= 10_000:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT, f"burst polling window {polling_us} µs is outside 0..10000"
        )
    _burst_settings["polling_us"] = polling_us


def burst_for(prepared: PreparedModel) -> Burst:
    """This thread's burst of `prepared` (created on first use; released with the model)."""
    bursts = getattr(_local, "bursts", None)
    if bursts is None:
        bursts = _local.bursts = weakref.WeakKeyDictionary()
    burst = bursts.get(prepared)
    if burst is None or getattr(burst, "closed", False):
        burst = prepared.configureExecutionBurst(polling_us=_burst_settings["polling_us"])
        bursts[prepared] = burst
    return burst


def forget_memory(prepared: PreparedModel | None, memory: object) -> None:
    """Let this thread's burst of `prepared` (if any) drop its cached mapping of `memory`."""
    bursts = getattr(_local, "bursts", None)
    burst = bursts.get(prepared) if bursts is not None and prepared is not None else None
    if burst is not None:
        burst.freeMemory(memory)


def fence_wait_s(prepared: PreparedModel) -> float:
    """How long to wait for a fenced execution of `prepared` before its driver counts as hung: its
    device's execution timeout when it has one (every other path waits that long), else FENCE_WAIT_S."""
    limit = getattr(getattr(prepared, "device", None), "execute_timeout", None)
    return float(limit) if isinstance(limit, (int, float)) and limit > 0 else FENCE_WAIT_S


class Executor:
    """The seam bound to one prepared model, path, timing request and loop timeout: `run(request,
    deadline)` runs one execution; what `execute` does on every call is resolved once here.

    A burst executor holds the burst of the thread that ran it last (`burst_for`): a run from another
    thread, or after that burst was closed, takes that thread's burst. `measure` and `loop_timeout` may
    be changed between runs. Not a retry policy: a caller that retries wraps `run`
    (mlts.runtime.retry), as `Session` does.
    """

    __slots__ = ("_burst", "call", "loop_timeout", "measure", "mode", "prepared")

    def __init__(
        self,
        prepared: PreparedModel,
        mode: ExecutionMode = DEFAULT_MODE,
        measure: MeasureTiming = MeasureTiming.NO,
        loop_timeout: OptionalTimeoutDuration = None,
    ) -> None:
        self.prepared = prepared
        self.mode = mode = ExecutionMode.parse(mode)
        self.measure = measure
        self.loop_timeout = loop_timeout
        # (thread id, its burst of the model) in burst mode.
        self._burst: tuple[int, Burst] | None = None
        #: The path itself, `call(request, measure, deadline, loop_timeout)`: what `run` calls (a caller
        #: running executions back to back may call it directly with the executor's fields).
        self.call: Callable[
            [Request, MeasureTiming, OptionalTimePoint, OptionalTimeoutDuration], ExecutionResult
        ]
        if mode is _SYNC:
            self.call = prepared.executeSynchronously
        elif mode is _ASYNC:
            self.call = self._async
        elif mode is _FENCED:
            self.call = self._fenced
        else:
            self.call = self._bursting

    def run(self, request: Request, deadline: OptionalTimePoint = None) -> ExecutionResult:
        """Run `request` (before `deadline`, an absolute time point); raises its HalError on failure."""
        return self.call(request, self.measure, deadline, self.loop_timeout)

    def _bursting(
        self,
        request: Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> ExecutionResult:
        held = self._burst
        if held is None or held[0] != get_ident() or getattr(held[1], "closed", False):
            held = self._burst = (get_ident(), burst_for(self.prepared))
        return held[1].execute(request, measure, deadline, loop_timeout)

    def _async(
        self,
        request: Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> ExecutionResult:
        return self.prepared.execute(request, measure, deadline, loop_timeout).result()

    def _fenced(
        self,
        request: Request,
        measure: MeasureTiming,
        deadline: OptionalTimePoint,
        loop_timeout: OptionalTimeoutDuration,
    ) -> ExecutionResult:
        """A fenced execution reports no output shapes (the HAL's executeFenced has none): callers use
        the model's declared shapes, so fenced mode needs fully specified outputs. Its timing is
        timingFenced."""
        prepared = self.prepared
        fence, callback = prepared.executeFenced(request, (), measure, deadline, loop_timeout)
        wait_s = fence_wait_s(prepared)
        try:
            if not fence.wait(wait_s):
                hung = HalError(
                    ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                    f"the fenced execution did not signal its fence within {wait_s:g} s",
                )
                hung.retryable = False  # type: ignore[attr-defined]  # a hung driver: retrying waits again
                raise hung
            info = callback.getExecutionInfo()
        finally:
            fence.close()
        if info.status != ErrorStatus.NONE:
            raise HalError(info.status, info.message or f"fenced execution failed with {info.status.name}")
        return ExecutionResult((), info.timing_fenced, info.operation_times)

    def __repr__(self) -> str:
        return f"Executor({self.prepared!r}, {self.mode.value})"


def execute(
    prepared: PreparedModel,
    request: Request,
    measure: MeasureTiming = MeasureTiming.NO,
    mode: ExecutionMode = DEFAULT_MODE,
    deadline: OptionalTimePoint = None,
    loop_timeout: OptionalTimeoutDuration = None,
) -> ExecutionResult:
    """Run `request` on `prepared` by path `mode` (an `Executor` made for the call); raises the
    execution's HalError on failure. A caller running many executions keeps an `Executor` instead.

    A fenced execution reports no output shapes (the HAL's executeFenced has none): callers use the
    model's declared shapes, so fenced mode needs fully specified outputs. Its timing is timingFenced.
    """
    return Executor(prepared, mode, measure, loop_timeout).run(request, deadline)
