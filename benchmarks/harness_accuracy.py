"""Does the benchmark harness measure correctly? It times a driver whose executions take a known time.

usage: python benchmarks/harness_accuracy.py [--quick] [--busy-us X ...] [--services private,shared]
       [--repeats N] [--warmup S] [--duration S]

sample-faulty with `busy_us=X` does no model work: each execution busy-waits X µs in the driver
(docs/faulty-driver.md). The harness times it exactly as `mlts benchmark` times a driver (a Session
on a one-operation model, `RunControl` warm-up then timed calls, the median and its distribution-free
95% interval from `mlts.bench.stats.describe`), for X = 100 µs, 1 ms and 10 ms, on a private service
(the benchmark's default) and on a shared one (`mlts driver serve`, reached over its socket).

The truth for a call is X plus the harness's own cost per call. That cost is measured on its own:
the same timing of the same model on a twin service whose executions are empty (`busy_us=0`), run
just before each repeat. Printed per X and service, over --repeats repeated runs:

- overhead: median reported minus X, averaged over the repeats (what the harness adds per call),
  with the empty execution's median and the empty round trip (`ping`, what each benchmark row
  records as `harness_overhead`) beside it;
- error: |reported median - (X + measured overhead)|, the worst repeat, against the goal
  max(1% of the truth, 20 µs);
- coverage: how many repeats' 95% interval of the median holds X + the measured overhead (goal >= 90%).

The last line is `ok` when every goal is met, else `short:` and the worst figure. Timing figures
depend on the machine's load: the header prints the load average; read the result on a quiet machine.
Thread counts are fixed to 1 (OPENBLAS_NUM_THREADS etc.) in the driver processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


@dataclass(frozen=True)
class Measured:
    """One timed run: the median and its 95% interval, in µs."""

    median_us: float
    lo_us: float
    hi_us: float


@dataclass(frozen=True)
class Case:
    """All repeats of one X on one kind of service."""

    busy_us: float
    service: str
    runs: list[Measured]
    empty: list[Measured]  # the twin service's empty executions, one run before each repeat
    ping_us: float

    def truth_us(self, k: int) -> float:
        return self.busy_us + self.empty[k].median_us

    def overhead_us(self) -> float:
        return statistics.fmean(r.median_us - self.busy_us for r in self.runs)

    def worst_error_us(self) -> float:
        return max(abs(r.median_us - self.truth_us(k)) for k, r in enumerate(self.runs))

    def allowed_error_us(self) -> float:
        return max(
            ERROR_FRACTION * (self.busy_us + statistics.fmean(e.median_us for e in self.empty)),
            ERROR_FLOOR_US,
        )

    def coverage(self) -> float:
        hits = sum(r.lo_us <= self.truth_us(k) <= r.hi_us for k, r in enumerate(self.runs))
        return hits / len(self.runs)


def one_add_model() -> Model:
    """The smallest real model: ADD of two 1-element float32 tensors (so input and output copies cost ~0)."""
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, (1,))
    y = b.add_input(OperandType.TENSOR_FLOAT32, (1,))
    z = b.add_operand(OperandType.TENSOR_FLOAT32, (1,))
    b.add_operation(OperationType.ADD, [x, y, b.add_scalar(0, OperandType.INT32)], [z])
    b.mark_outputs(z)
    return b.build()


class Service:
    """A sample-faulty service with `busy_us`: private (its own process per connection) or shared."""

    def __init__(self, kind: str, busy_us: float) -> None:
        self.kind = kind
        self.options = {"busy_us": repr(busy_us)}
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


def timed_run(device: RemoteDevice, model: Model, control: RunControl) -> Measured:
    """The benchmark's timing of `model` on `device`: warm-up, timed calls, median and its 95% interval."""
    feed = [np.ones(1, np.float32), np.ones(1, np.float32)]
    with Session(device, model) as session:
        timed = control.run(lambda i: session.run(feed))
    stats = describe(timed.samples, p99_wanted=False)
    lo, hi = stats["median_ci95"]
    return Measured(stats["median"] * 1000.0, lo * 1000.0, hi * 1000.0)


def measure(busy_us: float, kind: str, repeats: int, control: RunControl, model: Model) -> Case:
    busy, empty = Service(kind, busy_us), Service(kind, 0.0)
    try:
        busy_device, empty_device = busy.connect(), empty.connect()
        try:
            runs, empties = [], []
            for _ in range(repeats):
                empties.append(timed_run(empty_device, model, control))
                runs.append(timed_run(busy_device, model, control))
            overhead = harness_overhead(busy_device)
            ping = overhead["median_us"] if overhead else float("nan")
        finally:
            busy_device.close()
            empty_device.close()
    finally:
        busy.stop()
        empty.stop()
    return Case(busy_us, kind, runs, empties, ping)


def report(cases: list[Case]) -> list[str]:
    """The table, then `ok` or `short: <worst figure>` as the last line."""
    lines = [
        f"{'X us':>8} {'service':<8} {'overhead us':>11} {'empty us':>9} {'ping us':>8} "
        f"{'worst err us':>12} {'allowed':>8} {'coverage':>8}"
    ]
    shortfalls: list[tuple[float, str]] = []
    for c in cases:
        error, allowed, coverage = c.worst_error_us(), c.allowed_error_us(), c.coverage()
        empty = statistics.fmean(e.median_us for e in c.empty)
        lines.append(
            f"{c.busy_us:>8.0f} {c.service:<8} {c.overhead_us():>11.1f} {empty:>9.1f} {c.ping_us:>8.1f} "
            f"{error:>12.1f} {allowed:>8.1f} {100 * coverage:>7.0f}%"
        )
        where = f"X={c.busy_us:g} us on a {c.service} service"
        if error > allowed:
            shortfalls.append(
                (error / allowed, f"median off by {error:.1f} us (allowed {allowed:.1f}) at {where}")
            )
        if coverage < COVERAGE_GOAL:
            # Misses relative to the misses the goal allows, comparable with error / allowed.
            shortfalls.append(
                (
                    (1 - coverage) / (1 - COVERAGE_GOAL),
                    f"coverage {100 * coverage:.0f}% (goal 90%) at {where}",
                )
            )
    if shortfalls:
        lines.append(f"short: {max(shortfalls)[1]}")
    else:
        worst = max(cases, key=lambda c: c.worst_error_us() / c.allowed_error_us())
        lines.append(
            f"ok (worst: median off by {worst.worst_error_us():.1f} us at X={worst.busy_us:g} us, "
            f"lowest coverage {100 * min(c.coverage() for c in cases):.0f}%)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 repeats of 0.1 s warm-up and 0.3 s timing")
    ap.add_argument(
        "--busy-us", type=float, action="append", help="X in µs (repeatable; default 100, 1000, 10000)"
    )
    ap.add_argument(
        "--services", default=",".join(SERVICES), help="private, shared or both (comma-separated)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="repeated runs per case (default 20; 5 with --quick)"
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
    repeats = args.repeats or (5 if args.quick else 20)
    if repeats < 1:
        ap.error("--repeats: expected at least 1")
    control = RunControl(
        args.warmup if args.warmup is not None else (0.1 if args.quick else 0.5),
        args.duration if args.duration is not None else (0.3 if args.quick else 2.0),
        20,
    )
    load = os.getloadavg()
    print(
        f"harness self-test: sample-faulty busy_us=X, {repeats} repeats of {control.warmup_s:g} s warm-up + "
        f"{control.min_duration_s:g} s timed; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    model = one_add_model()
    cases = [measure(x, kind, repeats, control, model) for x in busy for kind in kinds]
    for line in report(cases):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
