"""Per-operation times: an optional extension of an execution's result (not part of NN HAL 1.3).

A client asks for them with `Request.measure_operations`; a driver that can
measure them returns, with the execution's result, one `OperationTime` per
operation of the main subgraph it ran: the operation's index in
`model.main.operations` and the nanoseconds it took inside the driver. Time
spent in the referenced subgraphs of an IF or WHILE counts as that IF's or
WHILE's own; a driver that fuses operations may report the fused group under
one of them and omit the others. A driver that cannot measure them returns
none (`ExecutionResult.operation_times is None`), which every client must
accept. The record is refused when it is malformed: more entries than the
model has operations (or than `MAX_OPERATION_TIMES`), an index reported twice
or out of range, a duration that is not an int in [0, MAX_DURATION_NS].
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError, invalid

#: At most this many entries per execution, whatever the model (the size check before anything else).
MAX_OPERATION_TIMES = 65_536
#: One operation taking more than a day is not a measurement.
MAX_DURATION_NS = 86_400 * 10**9


@dataclass(frozen=True, slots=True)
class OperationTime:
    """One operation of the main subgraph (by index) and the nanoseconds it took in the driver."""

    operation: int
    duration_ns: int


OperationTimes = tuple[OperationTime, ...]


def from_pairs(pairs: Iterable[tuple[int, int]]) -> OperationTimes:
    """The record of (operation index, duration ns) pairs, as `driver.executor.Plan.run` collects them."""
    return tuple(OperationTime(int(op), int(ns)) for op, ns in pairs)


def check_operation_times(
    record: Sequence[OperationTime],
    num_operations: int | None = None,
    where: str = "operation times",
    max_ns: int = MAX_DURATION_NS,
) -> OperationTimes:
    """`record` as a tuple when it is well formed; INVALID_ARGUMENT naming the first problem otherwise.

    `num_operations` (the model's main subgraph, when the checker knows the model) bounds the count
    and the indexes; `max_ns` bounds each duration (no operation takes longer than the whole
    execution in the driver, when the checker knows that).
    """
    max_ns = min(max_ns, MAX_DURATION_NS)
    limit = MAX_OPERATION_TIMES if num_operations is None else min(num_operations, MAX_OPERATION_TIMES)
    if len(record) > limit:
        raise invalid(f"{where}: {len(record)} entries, more than the {limit} operations that could run")
    seen: set[int] = set()
    for n, entry in enumerate(record):
        if not isinstance(entry, OperationTime):
            raise invalid(f"{where}[{n}]: {type(entry).__name__} is not an OperationTime")
        op, ns = entry.operation, entry.duration_ns
        if type(op) is not int or not 0 <= op < (MAX_OPERATION_TIMES if num_operations is None else limit):
            raise invalid(f"{where}[{n}]: operation index {op!r} is not an operation of the model")
        if op in seen:
            raise invalid(f"{where}[{n}]: operation {op} is reported twice")
        seen.add(op)
        if type(ns) is not int or not 0 <= ns <= max_ns:
            raise invalid(f"{where}[{n}]: duration {ns!r} ns of operation {op} is not in [0, {max_ns}]")
    return tuple(record)


def checked_by_service(record: Sequence[OperationTime]) -> OperationTimes:
    """A driver's record checked before the service sends it: a malformed one is the driver's GENERAL_FAILURE."""
    try:
        return check_operation_times(record)
    except HalError as e:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"the driver returned malformed {e.message}") from None


def to_list(record: Sequence[OperationTime]) -> list[list[int]]:
    """The wire form: [[operation, duration_ns], ...] (checked first, so a driver's bad record is never sent)."""
    return [[e.operation, e.duration_ns] for e in checked_by_service(record)]


def from_list(value: Any, path: str = "operationTimes") -> OperationTimes:
    """The inverse of `to_list`; a hostile value gives INVALID_ARGUMENT, never an exception of another kind."""
    if type(value) is not list:
        raise invalid(
            f"{path}: expected a list of [operation, duration_ns] pairs, got {type(value).__name__}"
        )
    if len(value) > MAX_OPERATION_TIMES:
        raise invalid(f"{path}: {len(value)} entries, more than {MAX_OPERATION_TIMES}")
    out = []
    for n, pair in enumerate(value):
        if type(pair) is not list or len(pair) != 2 or any(type(x) is not int for x in pair):
            raise invalid(f"{path}[{n}]: expected [operation, duration_ns] (two ints), got {pair!r:.60}")
        out.append(OperationTime(pair[0], pair[1]))
    return check_operation_times(out, None, path)


def check_result_times(
    record: Sequence[OperationTime], num_operations: int, time_in_driver_us: int, driver: str
) -> OperationTimes:
    """What a client checks of a driver's record, knowing the model and the result's Timing
    (`time_in_driver_us`, UINT64_MAX when not measured): GENERAL_FAILURE naming the driver and the problem."""
    max_ns = (
        MAX_DURATION_NS if time_in_driver_us >= MAX_DURATION_NS // 1000 else (time_in_driver_us + 1) * 1000
    )
    try:
        return check_operation_times(record, num_operations, "operation times", max_ns)
    except HalError as e:
        raise HalError(
            ErrorStatus.GENERAL_FAILURE, f"driver {driver!r} returned malformed {e.message}"
        ) from None


def total_ns(record: Sequence[OperationTime]) -> int:
    return sum(e.duration_ns for e in record)
