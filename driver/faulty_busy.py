"""sample-faulty's busy executions (`busy_us`): no model work, a wait of known length on the clock."""

from __future__ import annotations

import time

from mlts.hal.enums import MeasureTiming
from mlts.hal.types import ExecutionResult, Model, OutputShape, Timing

#: The last microseconds of a busy-wait spin without letting go of the GIL (see busy_execution).
BUSY_YIELD_US = 500


def busy_execution(model: Model, busy_us: float, measure: MeasureTiming) -> ExecutionResult:
    """An execution that does no model work: a busy-wait of `busy_us`, the model's declared output
    shapes, its outputs left untouched, and the time it actually spent as its Timing.

    The wait spins on the clock. While more than BUSY_YIELD_US remain, each turn lets go of the GIL
    (sleep(0)), so a shared service's other threads are held up by at most the last BUSY_YIELD_US,
    which are a pure spin: a sleep(0) returns only after the kernel's timer slack (50 µs by default
    on Linux), which would make the wait overshoot by tens of microseconds. A wait is thus exact to about a
    microsecond unless the process is preempted; the Timing says what it really took."""
    start = time.perf_counter_ns()
    end = start + int(busy_us * 1000)
    yield_until = end - BUSY_YIELD_US * 1000
    while time.perf_counter_ns() < yield_until:
        time.sleep(0)
    while time.perf_counter_ns() < end:
        pass
    shapes = tuple(OutputShape(model.main.operands[i].dimensions) for i in model.main.output_indexes)
    spent = (time.perf_counter_ns() - start) // 1000
    return ExecutionResult(shapes, Timing(spent, spent) if measure == MeasureTiming.YES else Timing())
