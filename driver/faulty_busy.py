"""sample-faulty's busy executions (`busy_us`): no model work, a wait of known length on the clock."""

from __future__ import annotations

import os
import time

from driver.operands import pool_view
from mlts.hal.enums import MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.types import ExecutionResult, Model, OutputShape, Request, Timing

#: The last microseconds of a busy-wait spin without letting go of the GIL (see busy_execution).
BUSY_YIELD_US = 500
#: Bytes of the end-of-wait stamp written into the first output (see busy_execution).
STAMP_BYTES = 8


def busy_execution(
    model: Model, busy_us: float, measure: MeasureTiming, request: Request | None = None
) -> ExecutionResult:
    """An execution that does no model work: a busy-wait of `busy_us`, the model's declared output
    shapes, and the time it actually spent as its Timing.

    The wait spins on the clock. While more than BUSY_YIELD_US remain, each turn lets go of the GIL
    (os.sched_yield, which gives the CPU only to a thread that is ready to run and never sleeps), so a
    shared service's other threads can take it (at the latest after CPython's switch interval, 5 ms);
    the last BUSY_YIELD_US are a pure spin. A sleep would let the CPU halt (waking a halted virtual CPU
    costs tens of microseconds) and returns only after the kernel's timer slack (50 µs by default on
    Linux), overshooting the wait. A wait is thus exact to about a microsecond unless the process is
    preempted; the Timing says what it really took.

    The outputs are left untouched but for one stamp: when the request's first output holds at least
    STAMP_BYTES bytes in a pool of this process, its first 8 bytes receive the clock at the end of the
    wait (CLOCK_MONOTONIC in nanoseconds, a little-endian int64), which every process on the machine
    reads alike: a client can tell how long the answer took to reach it."""
    start = time.perf_counter_ns()
    end = start + int(busy_us * 1000)
    yield_until = end - BUSY_YIELD_US * 1000
    while time.perf_counter_ns() < yield_until:
        os.sched_yield()
    while time.perf_counter_ns() < end:
        pass
    spent = (time.perf_counter_ns() - start) // 1000
    if request is not None and request.outputs:
        _stamp(request)
    shapes = tuple(OutputShape(model.main.operands[i].dimensions) for i in model.main.output_indexes)
    return ExecutionResult(shapes, Timing(spent, spent) if measure == MeasureTiming.YES else Timing())


def _stamp(request: Request) -> None:
    arg = request.outputs[0]
    if arg.has_no_value or arg.location.length < STAMP_BYTES:
        return
    try:
        view = pool_view(request.pools, arg.location, "output 0")
    except HalError:
        return  # a driver-managed buffer or a bad location: nothing to stamp
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    view[:STAMP_BYTES] = now.to_bytes(STAMP_BYTES, "little", signed=True)
