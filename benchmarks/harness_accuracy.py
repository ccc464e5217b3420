"""Does the benchmark harness measure correctly? It times a driver whose executions take a known time.

usage: python benchmarks/harness_accuracy.py [--quick] [--busy-us X ...] [--services private,shared]
       [--repeats N] [--warmup S] [--duration S]

sample-faulty with `busy_us=X busy_every=5` does no model work: one execution in 5 busy-waits X µs in
the driver, the other four are empty (docs/faulty-driver.md). The harness times it exactly as
`mlts benchmark` times a driver (a Session on a one-operation model, the `RunControl` loop of warm-up
then timed calls, the median and its distribution-free 95% interval from `mlts.bench.stats.describe`
over the busy calls), for X = 100 µs, 1 ms and 10 ms, on a private service (the benchmark's default)
and on a shared one (`mlts driver serve`, reached over its socket).

The truth for a busy call is what its execution really took, plus the harness's own cost per call,
plus what the platform charges for waking a client that waited longer:

- the execution part is the median Timing the driver reports for the busy calls (X plus the
  busy-wait's own error, which the `wait err` column shows: about a microsecond on a quiet machine,
  more when the driver is preempted);
- the harness's cost is the median wall time of the empty calls (less their driver Timing), which
  run interleaved with the busy ones on the same connection, in the same timed loop: drift of the
  machine's load or clock speed hits both alike, and no second process has to wake up. There are four
  empty calls to each busy one, so the truth is known more finely than the median it is compared with;
- the platform's part (`back+`): a client that waited X more is woken more slowly than one that
  waited as long as an empty call (on a virtual machine an idle CPU halts and the hypervisor must wake
  it); every latency pays it, whatever measures it. It is measured on these very calls: the driver
  writes the clock (CLOCK_MONOTONIC, which every process reads alike) into the output at the end of
  its wait, the harness reads the clock when the call returns, and `back+` is the median of that way
  back on the busy calls less its median on the empty ones. The harness's code on that way back is the
  same for both kinds of call; what differs is how long the client waited.

So the self-test checks that the harness adds the same cost before and around the driver whatever X
is, and that its median and interval are right; the platform's wake-up is charged to the platform,
and shown. Two bare processes on a socket pair measure it once more without mlts (`wake`), in the
same busy/empty pattern with the same waits, right after each timed run for half its time: a
cross-check, erratic on a loaded machine (the other work decides when a waiting process runs again).

Printed per X and service, over --repeats repeated runs:

- overhead: the reported median minus X, averaged over the repeats (what the harness adds per call),
  with the empty calls' cost and the empty round trip (`ping`, what each benchmark row records as
  `harness_overhead`) beside it;
- wait err: the driver's reported execution time minus X; late: the share of busy calls the driver
  was preempted in (more than 20 µs over X); after wait: how much more a busy call's own overhead
  (its wall time less its driver Timing) is than an empty call's; back+: the part of it on the way
  back from the driver's end of the wait (in the truth), and wake: the bare pair's figure (both large
  on a loaded machine);
- error: |reported median - truth|, the worst repeat, against the goal max(1% of the truth, 20 µs);
- coverage: how many repeats' 95% interval of the median holds the truth. The goal (>= 90%) is
  judged over all runs of all X and services together; one X and service alone falls short only when
  its misses would happen with less than 1% probability at 90% (5 or more of 10 repeats, 7 or more
  of 20), because even a perfect 95% interval misses 3 or more times in 20 repeats by chance alone
  in 7.5% of cases.

The last line is `ok` when every goal is met, else `short:` and the worst figure. Timing figures
depend on the machine's load: the header prints the load average, and a `note:` line before the last
says when it was above half the number of cores during the run; read the result on a quiet machine.
Thread counts are fixed to 1 (OPENBLAS_NUM_THREADS etc.) in the driver processes.

The socket paths' polling windows are off (MLTS_SOCKET_POLLING_US=0, unless the environment sets
it): they adapt to the length of the last wait, so with them on an empty call right after a busy one
waits differently from the other empty calls, and the empty calls no longer measure one constant cost
of the harness. Set MLTS_SOCKET_POLLING_US to see the figures with them on.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("MLTS_SOCKET_POLLING_US", "0")  # see the module docstring
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from mlts.bench.overhead import harness_overhead  # noqa: E402
from mlts.bench.stats import describe  # noqa: E402
from mlts.bench.timing import RunControl  # noqa: E402
from mlts.hal.builder import ModelBuilder  # noqa: E402
from mlts.hal.enums import OperandType, OperationType  # noqa: E402
from mlts.hal.types import Model  # noqa: E402
from mlts.runtime.discovery import thread_env  # noqa: E402
from mlts.runtime.remote import RemoteDevice  # noqa: E402
from mlts.runtime.session import Session  # noqa: E402
from mlts.runtime.shared import SharedService  # noqa: E402

FACTORY = "driver.faulty:SampleFaulty"
BUSY_US = (100.0, 1000.0, 10000.0)
SERVICES = ("private", "shared")
ERROR_FRACTION = 0.01  # goal: the median within 1% of the truth ...
ERROR_FLOOR_US = 20.0  # ... or within 20 µs, whichever is larger
COVERAGE_GOAL = 0.90
# One X and service is short of the coverage goal only when its misses would be this unlikely at 90%:
# 20 repeats of a perfect 95% interval miss 3 or more times in 7.5% of cases, by chance alone.
SIGNIFICANCE = 0.01
PERIOD = 5  # one execution in PERIOD busy-waits, the others are empty: the truth is measured more finely than the median
LATE_US = 20.0  # a busy call whose execution took this much over X was preempted
LOADED_FRACTION = 0.5  # a load average above this many per core: the machine is not quiet


@dataclass(frozen=True)
class Measured:
    """One timed run's busy calls: the median and its 95% interval, in µs (what the harness reports)."""

    median_us: float
    lo_us: float
    hi_us: float


@dataclass(frozen=True)
class Repeat:
    """One timed run: the busy calls as the harness reports them, and the truth measured beside them.

    executed_us: the median Timing the driver reported for the busy calls (the execution part, as it
    really ran: X plus the busy-wait's own error). empty_us and empty_executed_us: the median wall time
    and driver Timing of the empty calls interleaved with them. late: the fraction of busy calls whose
    execution took more than LATE_US over X (the driver was preempted: a loaded machine). rest_us: the
    median of a busy call's wall time less its driver Timing (the harness's cost on the busy calls
    themselves, which includes waking the client after a longer wait). back_us: the median way back of
    a busy call (from the driver's end-of-wait stamp to the call's return) less that of an empty call:
    the platform's cost of waking a client that waited longer, in the truth. wake_us: what the bare pair
    measured right after this run (BarePair.wake_cost_us), a cross-check shown beside the truth.
    """

    busy: Measured
    executed_us: float
    empty_us: float
    empty_executed_us: float
    late: float = 0.0
    rest_us: float = float("nan")
    back_us: float = 0.0
    wake_us: float = 0.0

    @property
    def overhead_us(self) -> float:
        """The harness's own cost per call: an empty call's wall time less the driver's part of it."""
        return self.empty_us - self.empty_executed_us

    @property
    def truth_us(self) -> float:
        return self.executed_us + self.overhead_us + self.back_us


@dataclass(frozen=True)
class Case:
    """All repeats of one X on one kind of service."""

    busy_us: float
    service: str
    runs: list[Repeat]
    ping_us: float

    def overhead_us(self) -> float:
        """Reported median minus X, averaged over the repeats."""
        return statistics.fmean(r.busy.median_us - self.busy_us for r in self.runs)

    def measured_overhead_us(self) -> float:
        return statistics.fmean(r.overhead_us for r in self.runs)

    def wait_error_us(self) -> float:
        """The busy-wait's own error: the driver's reported execution time minus X, averaged."""
        return statistics.fmean(r.executed_us - self.busy_us for r in self.runs)

    def after_wait_us(self) -> float:
        """What a busy call's own overhead exceeds an empty call's by (waking up after a longer wait)."""
        return statistics.fmean(r.rest_us - r.overhead_us for r in self.runs)

    def back_us(self) -> float:
        return statistics.fmean(r.back_us for r in self.runs)

    def wake_us(self) -> float:
        return statistics.fmean(r.wake_us for r in self.runs)

    def late(self) -> float:
        return statistics.fmean(r.late for r in self.runs)

    def worst_error_us(self) -> float:
        return max(abs(r.busy.median_us - r.truth_us) for r in self.runs)

    def allowed_error_us(self) -> float:
        return max(ERROR_FRACTION * statistics.fmean(r.truth_us for r in self.runs), ERROR_FLOOR_US)

    def coverage(self) -> float:
        hits = sum(r.busy.lo_us <= r.truth_us <= r.busy.hi_us for r in self.runs)
        return hits / len(self.runs)


def one_add_model() -> Model:
    """The smallest real model: ADD of two 2-element float32 tensors (input and output copies cost ~0;
    the output's 8 bytes hold the busy driver's end-of-wait stamp)."""
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, (2,))
    y = b.add_input(OperandType.TENSOR_FLOAT32, (2,))
    z = b.add_operand(OperandType.TENSOR_FLOAT32, (2,))
    b.add_operation(OperationType.ADD, [x, y, b.add_scalar(0, OperandType.INT32)], [z])
    b.mark_outputs(z)
    return b.build()


class Service:
    """A sample-faulty service whose every PERIOD-th execution busy-waits X µs and the others are empty:
    private (its own process per connection) or shared (`mlts driver serve`, reached over its socket)."""

    def __init__(self, kind: str, busy_us: float) -> None:
        self.kind = kind
        self.options = {"busy_us": repr(busy_us), "busy_every": str(PERIOD)}
        self.shared = (
            SharedService.start(FACTORY, name="sample-faulty", options=self.options, env=thread_env(1))
            if kind == "shared"
            else None
        )

    def connect(self) -> RemoteDevice:
        if self.shared is not None:
            return RemoteDevice.connect(self.shared.path)
        return RemoteDevice.start(FACTORY, name="sample-faulty", options=self.options, env=thread_env(1))

    def stop(self) -> None:
        if self.shared is not None:
            self.shared.stop()


def timed_run(session: Session, busy_us: float, control: RunControl, counter: list[int]) -> Repeat:
    """One run of the benchmark's own timed loop (mlts.bench.timing) over the service's executions.

    The driver makes one execution in PERIOD busy (the 1st, PERIOD+1-th, ... it serves) and the others
    empty, on this one connection: the busy calls' samples are what `mlts benchmark` would report, the
    empty ones beside them measure the harness's cost under the same conditions (drift in load or clock
    speed hits both alike). `counter` holds the executions the service has served so far; the Timing
    the driver reports for each call confirms which kind it was.
    """
    feed = [np.ones(2, np.float32), np.ones(2, np.float32)]
    # call index -> (busy?, the driver's Timing in µs, the way back in µs: from the driver's
    # end-of-wait stamp to the return); the timed run overwrites the warm-up's entries
    executed: dict[int, tuple[bool, int, float]] = {}
    clock, monotonic = time.clock_gettime_ns, time.CLOCK_MONOTONIC

    def call(i: int) -> None:
        busy = counter[0] % PERIOD == 0
        counter[0] += 1
        outputs, result = session.run(feed)
        back = clock(monotonic) - int.from_bytes(outputs[0].tobytes()[:8], "little", signed=True)
        executed[i] = (busy, result.timing.time_in_driver, back / 1000)

    timed = control.run(call)
    calls = range(len(timed.samples))
    busy_calls = [i for i in calls if executed[i][0]]
    empty_calls = [i for i in calls if not executed[i][0]]
    # A busy call cannot end early; an empty one may be preempted now and then, but not most of them.
    empty_median = statistics.median(executed[i][1] for i in empty_calls)
    if any(executed[i][1] < busy_us for i in busy_calls) or empty_median >= busy_us / 2:
        raise RuntimeError(f"the driver did not make one execution in {PERIOD} busy (busy_every={PERIOD})")
    stats = describe([timed.samples[i] for i in busy_calls], p99_wanted=False)
    lo, hi = stats["median_ci95"]
    busy_executed = [executed[i][1] for i in busy_calls]
    back_busy = statistics.median(executed[i][2] for i in busy_calls)
    back_empty = statistics.median(executed[i][2] for i in empty_calls)
    if not 0 <= back_empty < 1e6:
        raise RuntimeError(
            "the driver did not stamp its outputs with the end of its wait (an old sample-faulty?)"
        )
    return Repeat(
        Measured(stats["median"] * 1000.0, lo * 1000.0, hi * 1000.0),
        statistics.median(busy_executed),
        statistics.median(timed.samples[i] for i in empty_calls) * 1e6,
        empty_median,
        sum(t > busy_us + LATE_US for t in busy_executed) / len(busy_executed),
        statistics.median(timed.samples[i] * 1e6 - executed[i][1] for i in busy_calls),
        back_busy - back_empty,
    )


class BarePair:
    """Two bare processes on a socket pair, no mlts: they measure the platform's own cost of a longer wait.

    The server is forked at once (while this process has one thread) and serves until close().
    """

    def __init__(self) -> None:
        self.client, server = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:  # the server: no mlts, no threads
            self.client.close()
            try:
                while data := server.recv(32):
                    start = time.perf_counter_ns()
                    end = start + int(data)
                    while time.perf_counter_ns() < end:
                        pass
                    server.send(str(time.perf_counter_ns() - start).encode())
            finally:
                os._exit(0)
        server.close()

    def wake_cost_us(self, busy_us: float, base_us: float, seconds: float) -> float:
        """What waking a client that waited X longer costs more, measured for `seconds`.

        The client sends, the server busy-waits base + X (one round trip in PERIOD) or base (the
        others; base: as long as an empty call of the harness keeps its client waiting, since the cost
        depends on how long the client waited) and answers with the time it spent, in the same pattern
        as the timed runs. Returned: the median round trip after a wait of base + X less the server's
        time, less the same for the round trips after base.
        """
        busy_ns, base_ns = str(int((base_us + busy_us) * 1000)).encode(), str(int(base_us * 1000)).encode()
        busy: list[float] = []
        empty: list[float] = []
        stop = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < stop or len(busy) < 20:
            is_busy = i % PERIOD == 0
            t0 = time.perf_counter()
            self.client.send(busy_ns if is_busy else base_ns)
            spent_ns = int(self.client.recv(32))
            (busy if is_busy else empty).append((time.perf_counter() - t0) * 1e6 - spent_ns / 1000)
            i += 1
        return statistics.median(busy) - statistics.median(empty)

    def close(self) -> None:
        self.client.close()
        os.waitpid(self.pid, 0)


def measure(busy_us: float, kind: str, repeats: int, control: RunControl, model: Model) -> Case:
    """Repeated timed runs of the harness, each followed by the bare pair's wake-up cost at its waits."""
    bare = BarePair()  # before the service starts: this process has one thread, so it may fork
    try:
        service = Service(kind, busy_us)
        try:
            device = service.connect()
            try:
                counter = [0]  # executions the service has served
                runs = []
                with Session(device, model) as session:
                    for _ in range(repeats):
                        run = timed_run(session, busy_us, control, counter)
                        base = max(0.0, run.overhead_us)
                        wake = bare.wake_cost_us(busy_us, base, max(control.min_duration_s / 2, 0.05))
                        runs.append(replace(run, wake_us=wake))
                overhead = harness_overhead(device)
                ping = overhead["median_us"] if overhead else float("nan")
            finally:
                device.close()
        finally:
            service.stop()
    finally:
        bare.close()
    return Case(busy_us, kind, runs, ping)


def report(cases: list[Case]) -> list[str]:
    """The table, then `ok` or `short: <worst figure>` as the last line."""
    lines = [
        f"{'X us':>8} {'service':<8} {'overhead us':>11} {'empty us':>9} {'ping us':>8} {'wait err':>8} "
        f"{'late':>5} {'after wait':>10} {'back+':>6} {'wake':>6} {'worst err us':>12} {'allowed':>8} {'coverage':>8}"
    ]
    shortfalls: list[tuple[float, int, str]] = []
    for c in cases:
        error, allowed, coverage = c.worst_error_us(), c.allowed_error_us(), c.coverage()
        lines.append(
            f"{c.busy_us:>8.0f} {c.service:<8} {c.overhead_us():>11.1f} {c.measured_overhead_us():>9.1f} "
            f"{c.ping_us:>8.1f} {c.wait_error_us():>8.1f} {100 * c.late():>4.0f}% {c.after_wait_us():>10.1f} {c.back_us():>6.1f} {c.wake_us():>6.1f} "
            f"{error:>12.1f} {allowed:>8.1f} {100 * coverage:>7.0f}%"
        )
        where = f"X={c.busy_us:g} us on a {c.service} service"
        if error > allowed:
            shortfalls.append(
                (error / allowed, 2, f"median off by {error:.1f} us (allowed {allowed:.1f}) at {where}")
            )
        misses = round((1 - coverage) * len(c.runs))
        if coverage < COVERAGE_GOAL and misses_tail(misses, len(c.runs)) < SIGNIFICANCE:
            # Misses relative to the misses the goal allows, comparable with error / allowed.
            shortfalls.append(
                (
                    (1 - coverage) / (1 - COVERAGE_GOAL),
                    1,
                    f"coverage {100 * coverage:.0f}% (goal 90%) at {where}",
                )
            )
    runs = sum(len(c.runs) for c in cases)
    pooled = sum(c.coverage() * len(c.runs) for c in cases) / runs
    if pooled < COVERAGE_GOAL:
        shortfalls.append(
            (
                (1 - pooled) / (1 - COVERAGE_GOAL),
                0,
                f"coverage {100 * pooled:.0f}% over all {runs} runs (goal 90%)",
            )
        )
    if shortfalls:
        lines.append(f"short: {max(shortfalls)[2]}")
    else:
        worst = max(cases, key=lambda c: c.worst_error_us() / c.allowed_error_us())
        lines.append(
            f"ok (worst: median off by {worst.worst_error_us():.1f} us at X={worst.busy_us:g} us, "
            f"coverage {100 * pooled:.0f}% over all {runs} runs, lowest {100 * min(c.coverage() for c in cases):.0f}%)"
        )
    return lines


def misses_tail(misses: int, runs: int) -> float:
    """P(at least `misses` misses in `runs`) for intervals that hold the truth 90% of the time (the goal)."""
    p = 1 - COVERAGE_GOAL
    return math.fsum(math.comb(runs, k) * p**k * (1 - p) ** (runs - k) for k in range(misses, runs + 1))


def load_note(before: tuple[float, ...], after: tuple[float, ...], cores: int) -> str | None:
    """A warning line when other work shared the machine during the run, else None."""
    busiest = max(before[0], after[0])
    if busiest <= LOADED_FRACTION * cores:
        return None
    return (
        f"note: load average up to {busiest:.2f} on {cores} cores: other work shared the machine, "
        "so the figures are partly its (see 'late'); read the result on a quiet machine"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 repeats of 0.1 s warm-up and 0.3 s timing")
    ap.add_argument(
        "--busy-us", type=float, action="append", help="X in µs (repeatable; default 100, 1000, 10000)"
    )
    ap.add_argument(
        "--services", default=",".join(SERVICES), help="private, shared or both (comma-separated)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="repeated runs per case (default 20; 10 with --quick)"
    )
    ap.add_argument("--warmup", type=float, default=None, help="warm-up seconds per run (default 0.5)")
    ap.add_argument("--duration", type=float, default=None, help="timed seconds per run (default 2)")
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.services.split(",") if k.strip()]
    if not kinds or any(k not in SERVICES for k in kinds):
        ap.error(f"--services: expected private, shared or both, got {args.services!r}")
    busy = args.busy_us or list(BUSY_US)
    if any(not 0 < x <= 1_000_000 for x in busy):
        ap.error("--busy-us: expected microseconds in (0, 1000000]")
    repeats = args.repeats or (10 if args.quick else 20)
    if repeats < 1:
        ap.error("--repeats: expected at least 1")
    control = RunControl(
        args.warmup if args.warmup is not None else (0.1 if args.quick else 0.5),
        args.duration if args.duration is not None else (0.3 if args.quick else 2.0),
        20 * PERIOD,  # at least 20 busy calls
    )
    load = os.getloadavg()
    print(
        f"harness self-test: sample-faulty busy_us=X busy_every={PERIOD}, {repeats} repeats of {control.warmup_s:g} s warm-up + "
        f"{control.min_duration_s:g} s timed; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"socket polling window {os.environ['MLTS_SOCKET_POLLING_US']} us"
    )
    model = one_add_model()
    cases = [measure(x, kind, repeats, control, model) for x in busy for kind in kinds]
    lines = report(cases)
    note = load_note(load, os.getloadavg(), len(os.sched_getaffinity(0)))
    for line in lines[:-1] + ([note] if note else []) + lines[-1:]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
