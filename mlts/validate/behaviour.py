"""The `behaviour` suite: what a driver must do beyond validating (VTS's behaviour tests).

- queries: capabilities, type, version, extensions and cache-file counts the
  same after a restart; capabilities well formed (positive, sorted by type);
- Timing on every path: UINT64_MAX when not measured; when measured, either
  UINT64_MAX or timeInDriver >= timeOnDevice;
- deadlines on prepare and on every path: one already passed gives
  MISSED_DEADLINE_*, one that passes during a long execution stops it with
  MISSED_DEADLINE_* (or the execution ends before it), a WHILE loop timeout
  stops the loop, a generous deadline changes nothing; asked of the driver
  itself (a client of a service that does not pre-validate, when there is
  one), on the fenced and burst paths too;
- priorities: every priority prepares and gives the same results; a bad one
  is refused by the driver itself; a HIGH execution launched while LOW ones
  of the same client run finishes first (they must be paused: starting it
  before the queued ones is not enough), and so does one of another client;
- compilation cache, extensions and cross-client isolation:
  `behaviour_isolation`;
- the service under hostile clients (unsealed burst rings, a client that does
  not read its replies, a quota hog): `behaviour_service`.

The long-running model is a WHILE loop counting x up to a limit given as an
input (about 0.1 ms per iteration on the sample driver), so durations are
set by data, not by model size. A case whose model uses an operation the
driver does not claim (getSupportedOperations) is skipped, saying which, as
VTS skips them: a driver need not run WHILE or float32 ADD.
"""

from __future__ import annotations

import functools
import math
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from mlts.hal import deadlines
from mlts.hal.codec import UINT64_MAX
from mlts.hal.enums import ErrorStatus, MeasureTiming, OperationType, Priority, name_of_code
from mlts.hal.errors import HalError
from mlts.hal.types import Capabilities, Model, Request
from mlts.runtime.execution import ExecutionMode, execute
from mlts.validate import behaviour_isolation, behaviour_service
from mlts.validate.behaviour_isolation import simple_case
from mlts.validate.control_flow_mutations import while_model
from mlts.validate.core import CaseBody, CaseResult, SuiteOptions, Target, run_case
from mlts.validate.request_mutations import valid_request

SUITE = "behaviour"
Outcome = tuple[str, str] | str | None
Emit = Callable[[CaseResult], None]
MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
#: Iterations of the counting loop that make a "long" execution, and the deadline given to it.
LONG_ITERATIONS = 12_000
LONG_DEADLINE_S = 0.05


def counting_request(model: Model, limit: float) -> Request:
    """A request for `while_model`: x from 0 up to `limit`."""
    return valid_request(model, [struct.pack("<f", 0.0), struct.pack("<f", float(limit))])


def _output_float(request: Request) -> float:
    pool = request.pools[1]
    return struct.unpack_from("<f", pool.buffer, 0)[0]  # type: ignore[union-attr]


def _queries(device) -> dict[str, object]:
    return {
        "capabilities": device.getCapabilities(),
        "type": device.getType(),
        "version": device.getVersionString(),
        "extensions": device.getSupportedExtensions(),
        "cache files": device.getNumberOfCacheFilesNeeded(),
    }


def check_capabilities(caps: Capabilities) -> str | None:
    """The HAL's rules for a Capabilities record: finite positive numbers, operandPerformance sorted by type."""
    infos = [
        ("relaxed scalar", caps.relaxed_float32_to_float16_performance_scalar),
        ("relaxed tensor", caps.relaxed_float32_to_float16_performance_tensor),
        ("IF", caps.if_performance),
        ("WHILE", caps.while_performance),
    ] + [(f"operand type {o.type}", o.info) for o in caps.operand_performance]
    for what, info in infos:
        for field in ("exec_time", "power_usage"):
            value = getattr(info, field)
            if not (math.isfinite(value) and value > 0):
                return f"{what} {field} is {value}; performance numbers must be finite and > 0"
    types = [o.type for o in caps.operand_performance]
    if types != sorted(set(types)):
        return f"operandPerformance is not sorted by type without repeats: {types}"
    return None


def case_queries_stable(target: Target) -> str | None:
    first = _queries(target.device())
    bad = check_capabilities(first["capabilities"])  # type: ignore[arg-type]
    if bad:
        return bad
    for n in range(2):
        if not target.shared:
            target.restart(f"behaviour: queries stable across restarts: a deliberate restart ({n + 1} of 2)")
        again = _queries(target.device())
        for key, value in first.items():
            if again[key] != value:
                where = "after a restart" if not target.shared else "on a second connection"
                return f"{key} changed {where} ({n + 1}): {_difference(value, again[key])}"
    return None


def _difference(old: object, new: object) -> str:
    """The first field that differs between two records (or the two values), shortly."""
    for name in getattr(old, "__dataclass_fields__", ()):
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            return f"{name}: {a!r:.120} then {b!r:.120}"
    return f"{old!r:.120} then {new!r:.120}"


def unclaimed(device: Any, model: Model, what: str) -> tuple[str, str] | None:
    """("skip", why) when the driver does not claim every operation of `model`'s main subgraph, else None."""
    claimed = device.getSupportedOperations(model)
    if all(claimed):
        return None
    names = sorted(
        {
            name_of_code(OperationType, op.type)
            for op, ok in zip(model.main.operations, claimed, strict=True)
            if not ok
        }
    )
    return "skip", f"the driver does not support {', '.join(names)}, which {what} needs"


def case_timing(target: Target, mode: ExecutionMode) -> Outcome:
    model, request = simple_case()
    skip = unclaimed(target.device(), model, "the float32 ADD of this case")
    if skip:
        return skip
    prepared = target.device().prepareModel(model)
    try:
        plain = execute(prepared, request, MeasureTiming.NO, mode).timing
        if (plain.time_on_device, plain.time_in_driver) != (UINT64_MAX, UINT64_MAX):
            return f"timing not requested, but the driver reported {plain}; both fields must be UINT64_MAX"
        for _ in range(3):
            timing = execute(prepared, request, MeasureTiming.YES, mode).timing
            on, total = timing.time_on_device, timing.time_in_driver
            if on != UINT64_MAX and total != UINT64_MAX and total < on:
                return f"timeInDriver {total} µs < timeOnDevice {on} µs"
            for name, value in (("timeOnDevice", on), ("timeInDriver", total)):
                if value != UINT64_MAX and value > 60_000_000:
                    return f"{name} {value} µs for a 16-element ADD (over a minute): not a duration"
    finally:
        prepared.close()
    return None


def _expect_missed(what: str, call: Callable[[], object]) -> str | None:
    try:
        call()
    except HalError as e:
        if e.status in MISSED:
            return None
        return f"{what} answered {e.status.name} ({e.message}), not MISSED_DEADLINE_*"
    return f"{what} succeeded although its deadline had passed"


def case_deadline_prepare(target: Target) -> Outcome:
    model, _ = simple_case()
    device = _unjudged(target)
    skip = unclaimed(device, model, "the float32 ADD of this case")
    if skip:
        return skip
    past = deadlines.after_ms(-1)
    result = _expect_missed(
        "prepareModel with a passed deadline", lambda: device.prepareModel(model, deadline=past)
    )
    if result is not None:
        return result
    prepared = device.prepareModel(model, deadline=deadlines.after_ms(60_000))
    prepared.close()
    return None


def case_deadline_execute(target: Target, mode: ExecutionMode) -> Outcome:
    model, request = simple_case()
    device = _unjudged(target)  # the driver's own answer to a passed deadline, on every path
    skip = unclaimed(device, model, "the float32 ADD of this case")
    if skip:
        return skip
    prepared = device.prepareModel(model)
    try:
        past = deadlines.after_ms(-1)
        result = _expect_missed(
            f"{mode} execution with a passed deadline",
            lambda: execute(prepared, request, mode=mode, deadline=past),
        )
        if result is not None:
            return result
        execute(prepared, request, mode=mode, deadline=deadlines.after_ms(60_000))
    finally:
        prepared.close()
    return None


def case_deadline_during(target: Target, mode: ExecutionMode) -> Outcome:
    """A deadline that passes during a long execution: MISSED_DEADLINE_*, or the execution beat it."""
    model = while_model()
    skip = unclaimed(target.device(), model, "the counting loop of this case")
    if skip:
        return skip
    prepared = target.device().prepareModel(model)
    try:
        request = counting_request(model, LONG_ITERATIONS)
        start = time.monotonic_ns()
        deadline = deadlines.after_ns(int(LONG_DEADLINE_S * 1e9), start)
        try:
            execute(prepared, request, mode=mode, deadline=deadline, loop_timeout=15_000_000_000)
        except HalError as e:
            if e.status in MISSED:
                return None
            return f"answered {e.status.name} ({e.message}), not MISSED_DEADLINE_*"
        late = (time.monotonic_ns() - deadline) / 1e6
        if late > 0:
            return f"finished {late:.1f} ms after its deadline ({LONG_DEADLINE_S * 1e3:.0f} ms) without MISSED_DEADLINE_*"
    finally:
        prepared.close()
    return None


def case_loop_timeout(target: Target) -> Outcome:
    model = while_model()
    skip = unclaimed(target.device(), model, "the counting loop of this case")
    if skip:
        return skip
    prepared = target.device().prepareModel(model)
    try:
        request = counting_request(model, 1e9)
        return _expect_missed(
            "a WHILE loop longer than its 20 ms loop timeout",
            lambda: execute(prepared, request, loop_timeout=20_000_000),
        )
    finally:
        prepared.close()


def case_priorities_accepted(target: Target) -> Outcome:
    model, request = simple_case()
    device = target.device()
    skip = unclaimed(device, model, "the float32 ADD of this case")
    if skip:
        return skip
    results = []
    for priority in Priority:
        prepared = device.prepareModel(model, priority=priority)
        try:
            execute(prepared, request)
            results.append(bytes(request.pools[1].buffer))  # type: ignore[union-attr]
        finally:
            prepared.close()
    if len(set(results)) != 1:
        return "results differ between priorities LOW, MEDIUM and HIGH"
    return None


#: How long each LOW execution of the priority cases should take (long beside the time their launches
#: take on a loaded machine, while LOW executions already run), and the largest WHILE count.
PRIORITY_EXECUTION_S = 0.25
PRIORITY_MAX_COUNT = 1_000_000
#: The HIGH execution counts this many times as far as a LOW one: it can finish first only if the LOW
#: executions running beside it are paused, whatever the machine's scheduling.
HIGH_WORK = 2


def case_priority_refused(target: Target) -> Outcome:
    """A priority that is none of LOW, MEDIUM, HIGH must be refused (INVALID_ARGUMENT) by the driver."""
    model, _ = simple_case()
    device = _unjudged(target)
    skip = unclaimed(device, model, "the float32 ADD of this case")
    if skip:
        return skip
    for bad in (3, -1):
        try:
            device.prepareModel(model, priority=bad).close()
        except HalError as e:
            if e.status != ErrorStatus.INVALID_ARGUMENT:
                return (
                    f"prepareModel with priority {bad} answered {e.status.name} ({e.message}), "
                    "not INVALID_ARGUMENT"
                )
            continue
        return f"prepareModel with priority {bad} succeeded; priorities are LOW 0, MEDIUM 1, HIGH 2"
    return None


def _unjudged(target: Target) -> Any:
    """A client whose service hands the driver deadlines and priorities unjudged (`--no-prevalidate`)
    when the target has one, so the driver's own handling answers; else the normal client."""
    return target.raw_device() if target.raw_available else target.device()


def _count_for(prepared: Any, model: Model) -> int:
    """The WHILE count that makes one execution of `model` take about PRIORITY_EXECUTION_S."""
    probe = 1500
    start = time.perf_counter()
    execute(prepared, counting_request(model, probe), loop_timeout=15_000_000_000)
    took = time.perf_counter() - start
    return int(min(max(probe * PRIORITY_EXECUTION_S / max(took, 1e-6), probe), PRIORITY_MAX_COUNT))


def _high_finishes_first(low: Any, high: Any, model: Model, n_low: int, who: str) -> Outcome:
    """Launch `n_low` LOW executions, then one HIGH execution of twice their work; None when HIGH
    finished first. The launches are asynchronous, LOW ones first: each returns once the service holds
    the execution, so the LOW ones are running (or queued) before HIGH arrives, whatever the load.
    Each waits for a driver answer as long as the device's call timeout."""
    finished: list[tuple[float, str]] = []
    lock = threading.Lock()
    errors: list[str] = []

    def wait(callback: Any, label: str) -> None:
        # One waiting thread per execution, so every connection is read as its completions arrive
        # (the clients may be two connections): the time each result came back orders them.
        try:
            callback.result()
        except HalError as e:
            errors.append(f"{label}: {e.status.name}: {e.message}")
        with lock:
            finished.append((time.monotonic(), label))

    limit = _count_for(low, model)
    launched = [
        (low.execute(counting_request(model, limit), loop_timeout_duration=15_000_000_000), f"low{i}")
        for i in range(n_low)
    ]
    launched.append(
        (
            high.execute(counting_request(model, limit * HIGH_WORK), loop_timeout_duration=15_000_000_000),
            "high",
        )
    )
    waiters = [threading.Thread(target=wait, args=pair, daemon=True) for pair in launched]
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    if errors:
        return "executions failed: " + "; ".join(errors[:3])
    order = [label for _, label in sorted(finished)]
    rank = order.index("high")
    if rank:
        return (
            f"the HIGH execution ({HIGH_WORK}x the work of each LOW one) finished "
            f"{rank + 1}th of {n_low + 1}, after {rank} LOW execution(s) of {who} launched before it: "
            "the LOW executions running were not paused (queueing HIGH first is not enough)"
        )
    return None


def case_priority_order(target: Target) -> Outcome:
    """A HIGH execution launched while LOW executions of the same client run must finish first."""
    model = while_model()
    device = target.device()
    skip = unclaimed(device, model, "the counting loop of this case")
    if skip:
        return skip
    low = device.prepareModel(model, priority=Priority.LOW)
    high = device.prepareModel(model, priority=Priority.HIGH)
    try:
        # Two more than the service's workers usually are: some LOW executions queued, some running.
        return _high_finishes_first(low, high, model, 4, "the same client")
    finally:
        low.close()
        high.close()


def case_priority_across_clients(target: Target) -> Outcome:
    """A HIGH execution of one client, launched while LOW executions of another client run, must finish
    first: a driver's priorities are not confined to the client that set them (seed 002: higher
    priorities may preempt lower ones)."""
    model = while_model()
    skip = unclaimed(target.device(), model, "the counting loop of this case")
    if skip:
        return skip
    one, two = target.new_client(), target.new_client()
    try:
        low = one.prepareModel(model, priority=Priority.LOW)
        high = two.prepareModel(model, priority=Priority.HIGH)
        return _high_finishes_first(low, high, model, 2, "another client")
    finally:
        one.close()
        two.close()


def run(target: Target, options: SuiteOptions, emit: Emit) -> None:
    cases: list[tuple[str, CaseBody]] = [
        ("queries stable across restarts", lambda: case_queries_stable(target)),
        ("deadline: prepareModel", lambda: case_deadline_prepare(target)),
        ("deadline: WHILE loop timeout", lambda: case_loop_timeout(target)),
        ("priority: every priority accepted", lambda: case_priorities_accepted(target)),
        ("priority: a bad one refused by the driver", lambda: case_priority_refused(target)),
        ("priority: HIGH overtakes queued LOW", lambda: case_priority_order(target)),
        ("priority: another client's HIGH preempts LOW", lambda: case_priority_across_clients(target)),
    ]
    for mode in target.paths:
        cases += [
            (f"timing [{mode}]", functools.partial(case_timing, target, mode)),
            (f"deadline: passed [{mode}]", functools.partial(case_deadline_execute, target, mode)),
            (
                f"deadline: passes during execution [{mode}]",
                functools.partial(case_deadline_during, target, mode),
            ),
        ]
    cases += behaviour_isolation.cases(target, options)
    cases += behaviour_service.cases(target, options)
    for name, body in cases:
        if options.wants(name):
            run_case(target, SUITE, name, body, emit)
