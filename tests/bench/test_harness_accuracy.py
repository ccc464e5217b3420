"""The harness's self-test: a driver whose executions take a known time, timed as the benchmark times drivers."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from driver.faulty import SampleFaulty, parse_options
from mlts.bench.overhead import harness_overhead
from mlts.bench.timing import RunControl
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.types import ExecutionResult, Timing
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "harness_accuracy.py"
FACTORY = "driver.faulty:SampleFaulty"

sys.path.insert(0, str(ROOT / "benchmarks"))
import harness_accuracy  # noqa: E402


def test_busy_option_parses_and_refuses_bad_values():
    assert parse_options({"busy_us": "250"}).busy_us == 250.0
    assert parse_options({"busy_us": "0"}).busy_us == 0.0  # an empty execution
    assert parse_options({}).busy_us is None
    for bad in ("-1", "nan", "1e9", "fast"):
        try:
            parse_options({"busy_us": bad})
        except ValueError as e:
            assert "busy_us" in str(e) and "microseconds" in str(e)
        else:
            raise AssertionError(f"busy_us={bad} was accepted")


def test_busy_every_makes_one_execution_in_n_busy():
    assert parse_options({"busy_us": "500", "busy_every": "3"}).busy_every == 3
    for bad in (
        {"busy_every": "3"},
        {"busy_us": "5", "busy_every": "0"},
        {"busy_us": "5", "busy_every": "x"},
    ):
        try:
            parse_options(bad)
        except ValueError as e:
            assert "busy_every" in str(e)
        else:
            raise AssertionError(f"{bad} was accepted")
    model = harness_accuracy.one_add_model()
    with Session(SampleFaulty(busy_us="1000", busy_every="3"), model) as session:
        times = [session.run([np.ones(2, np.float32)] * 2)[1].timing.time_in_driver for _ in range(7)]
    busy = [t >= 1000 for t in times]
    assert busy == [True, False, False, True, False, False, True], times


def test_a_busy_execution_takes_at_least_its_time_and_does_no_model_work():
    model = harness_accuracy.one_add_model()
    device = SampleFaulty(busy_us="2000")
    with Session(device, model, measure=True) as session:
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        outputs, result = session.run([np.ones(2, np.float32), np.full(2, 2.0, np.float32)])
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    # No ADD (it would give 3, 3): the output holds the clock at the end of the wait, an int64.
    assert outputs[0].shape == (2,)
    stamp = int(outputs[0].view(np.int64)[0])
    assert before + 2_000_000 <= stamp <= after
    assert [s.dimensions for s in result.output_shapes] == [(2,)]
    assert 2000 <= result.timing.time_on_device == result.timing.time_in_driver


def test_a_busy_execution_stamps_only_an_output_with_room_for_the_clock():
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, (1,))
    z = b.add_operand(OperandType.TENSOR_FLOAT32, (1,))
    b.add_operation(OperationType.ADD, [x, x, b.add_scalar(0, OperandType.INT32)], [z])
    b.mark_outputs(z)
    with Session(SampleFaulty(busy_us="0"), b.build()) as session:
        outputs, _ = session.run([np.full(1, 7.0, np.float32)])
    # 4 bytes: no room for the stamp, so no partial one; no model work either (ADD would give 14).
    assert outputs[0].shape == (1,) and outputs[0][0] != 14.0
    assert outputs[0].view(np.int32)[0] == 0  # the output pool's fresh bytes, unwritten


def test_harness_overhead_is_measured_on_a_connection_and_absent_in_process():
    assert harness_overhead(SampleFaulty()) is None
    with RemoteDevice.start(FACTORY, name="sample-faulty") as device:
        overhead = harness_overhead(device, calls=20)
    assert overhead is not None and overhead["method"] == "ping" and overhead["calls"] == 20
    lo, hi = overhead["median_ci95_us"]
    assert 0 < lo <= overhead["median_us"] <= hi


def _repeat(median, lo, hi, executed, empty):
    return harness_accuracy.Repeat(harness_accuracy.Measured(median, lo, hi), executed, empty, 2.0)


def test_the_truth_is_the_drivers_execution_time_plus_the_empty_calls_cost():
    r = _repeat(1310.0, 1300.0, 1320.0, 1005.0, 302.0)
    # 1005 us executed (5 over X) + 300 us of harness (302 us per empty call, 2 of them in the driver).
    assert r.overhead_us == 300.0 and r.truth_us == 1305.0
    case = harness_accuracy.Case(1000.0, "private", [r, _repeat(1290.0, 1280.0, 1300.0, 1001.0, 302.0)], 80.0)
    assert case.overhead_us() == 300.0  # reported median minus X, averaged
    assert case.wait_error_us() == 3.0
    assert case.worst_error_us() == 11.0  # |1290 - 1301|; the first repeat is off by 5
    assert case.coverage() == 0.5  # the second interval [1280, 1300] misses its truth 1301


def test_the_report_says_ok_or_short_with_the_worst_figure():
    good = harness_accuracy.Case(1000.0, "private", [_repeat(1300, 1290, 1310, 1000, 302)] * 4, 250.0)
    lines = harness_accuracy.report([good])
    assert lines[-1].startswith("ok") and "coverage 100%" in lines[-1]
    off = harness_accuracy.Case(1000.0, "shared", [_repeat(1400, 1250, 1410, 1000, 302)] * 4, 250.0)
    last = harness_accuracy.report([good, off])[-1]
    # The interval still covers the truth (1300 us), but the median is 100 us off where 20 are allowed.
    assert last == "short: median off by 100.0 us (allowed 20.0) at X=1000 us on a shared service"
    wide = harness_accuracy.Case(10000.0, "private", [_repeat(10300, 10000, 10310, 10000, 402)] * 4, 1.0)
    assert harness_accuracy.report([wide])[-1].startswith("short: coverage 0% (goal 90%) at X=10000 us")


def test_coverage_is_judged_over_all_runs_and_a_case_only_when_its_misses_are_significant():
    hit, miss = _repeat(1300, 1290, 1310, 1000, 302), _repeat(1300, 1301, 1310, 1000, 302)
    # 2 misses in 10: 26% likely for an interval that holds the truth 90% of the time, not significant.
    assert abs(harness_accuracy.misses_tail(2, 10) - 0.2639) < 1e-4
    two = [
        harness_accuracy.Case(1000.0, kind, [miss] * 2 + [hit] * 8, 80.0) for kind in ("private", "shared")
    ]
    assert harness_accuracy.report(two)[-1] == "short: coverage 80% over all 20 runs (goal 90%)"
    # 1 miss in 20 runs: 95% over all, ok.
    one = harness_accuracy.Case(1000.0, "private", [miss] + [hit] * 9, 80.0)
    full = harness_accuracy.Case(1000.0, "shared", [hit] * 10, 80.0)
    assert (
        harness_accuracy.report([one, full])[-1].startswith("ok (")
        and "95% over all 20 runs" in (harness_accuracy.report([one, full])[-1])
    )
    # 5 misses in 10 are significant for that case even when the other runs lift the whole to 90%.
    half = harness_accuracy.Case(100.0, "private", [miss] * 5 + [hit] * 5, 80.0)
    many = harness_accuracy.Case(1000.0, "shared", [hit] * 40, 80.0)
    assert (
        harness_accuracy.report([half, many])[-1]
        == "short: coverage 50% (goal 90%) at X=100 us on a private service"
    )


def test_a_loaded_machine_is_named():
    assert harness_accuracy.load_note((0.3, 0.2, 0.1), (0.9, 0.5, 0.2), 2) is None
    note = harness_accuracy.load_note((2.5, 1.0, 0.5), (0.4, 0.5, 0.5), 2)
    assert note is not None and note.startswith("note: load average up to 2.50 on 2 cores")


def test_short_run_of_the_script():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    args = [
        "--busy-us",
        "1000",
        "--services",
        "private,shared",
        "--repeats",
        "2",
        "--warmup",
        "0",
        "--duration",
        "0.05",
    ]
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("harness self-test:") and "load average" in lines[0]
    rows = [line.split() for line in lines[2:-1] if not line.startswith("note:")]
    assert [row[:2] for row in rows] == [["1000", "private"], ["1000", "shared"]]
    for row in rows:
        overhead, empty, ping = float(row[2]), float(row[3]), float(row[4])
        # The busy-wait guarantees X per call, so the harness can never report less than X.
        assert overhead > 0 and empty > 0 and ping > 0
        assert row[-1].endswith("%")
    assert lines[-1].startswith(("ok", "short: "))


class _FakeSession:
    """A session whose driver makes every PERIOD-th execution (from its `first`) busy: Timing only, no wait."""

    def __init__(self, busy_us: float, first: int = 0) -> None:
        self.busy_us, self.calls, self.first = busy_us, 0, first

    def run(self, feed):
        busy = (self.calls - self.first) % harness_accuracy.PERIOD == 0
        self.calls += 1
        spent = int(self.busy_us) + 1 if busy else 3
        # The end-of-wait stamp: 50 ms ago for a busy call, 10 ms ago for an empty one.
        stamp = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - (50_000_000 if busy else 10_000_000)
        return [np.array([stamp], np.int64).view(np.float32)], ExecutionResult((), Timing(spent, spent))


def test_timed_runs_tell_busy_and_empty_calls_apart_across_warm_ups():
    control = RunControl(0.01, 0.01, 4 * harness_accuracy.PERIOD)
    session, counter = _FakeSession(500.0), [0]
    runs = [harness_accuracy.timed_run(session, 500.0, control, counter) for _ in range(3)]
    assert counter[0] == session.calls  # the harness counted every execution, warm-ups included
    for r in runs:
        assert r.executed_us == 501 and r.empty_executed_us == 3 and r.late == 0
        # The busy calls' way back is 40 ms longer (give or take the microseconds the harness took).
        assert 35_000.0 < r.back_us < 45_000.0
        assert r.truth_us == r.executed_us + r.overhead_us + r.back_us
        assert r.busy.lo_us <= r.busy.median_us <= r.busy.hi_us
    # A driver out of step with the harness (its busy call one later) is refused, not misread.
    with pytest.raises(RuntimeError, match="did not make one execution in 5 busy"):
        harness_accuracy.timed_run(_FakeSession(500.0, first=1), 500.0, control, [0])


def test_the_platforms_wake_up_cost_is_shown_beside_the_truth():
    r = dataclasses.replace(_repeat(1320.0, 1310.0, 1330.0, 1005.0, 302.0), wake_us=15.0)
    case = harness_accuracy.Case(1000.0, "private", [r], 80.0)
    assert r.truth_us == 1005.0 + 300.0 and case.worst_error_us() == 15.0 and case.wake_us() == 15.0
    # Measured by two bare processes: a finite figure (its size depends on the machine).
    bare = harness_accuracy.BarePair()
    try:
        wake = bare.wake_cost_us(200.0, 50.0, 0.02)
    finally:
        bare.close()
    assert wake == wake and abs(wake) < 1e5
