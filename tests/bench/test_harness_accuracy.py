"""The harness's self-test: a driver whose executions take a known time, timed as the benchmark times drivers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from driver.faulty import SampleFaulty, parse_options
from mlts.bench.overhead import harness_overhead
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


def test_a_busy_execution_takes_at_least_its_time_and_does_no_model_work():
    model = harness_accuracy.one_add_model()
    device = SampleFaulty(busy_us="2000")
    with Session(device, model, measure=True) as session:
        outputs, result = session.run([np.ones(1, np.float32), np.full(1, 2.0, np.float32)])
    # The busy driver leaves the output unwritten: the real ADD would give 3.
    assert outputs[0].shape == (1,) and outputs[0][0] != 3.0
    assert [s.dimensions for s in result.output_shapes] == [(1,)]
    assert 2000 <= result.timing.time_on_device == result.timing.time_in_driver


def test_harness_overhead_is_measured_on_a_connection_and_absent_in_process():
    assert harness_overhead(SampleFaulty()) is None
    with RemoteDevice.start(FACTORY, name="sample-faulty") as device:
        overhead = harness_overhead(device, calls=20)
    assert overhead is not None and overhead["method"] == "ping" and overhead["calls"] == 20
    lo, hi = overhead["median_ci95_us"]
    assert 0 < lo <= overhead["median_us"] <= hi


def test_the_report_says_ok_or_short_with_the_worst_figure():
    def m(median, lo, hi):
        return harness_accuracy.Measured(median, lo, hi)

    good = harness_accuracy.Case(1000.0, "private", [m(1300, 1290, 1310)] * 4, [m(300, 295, 305)] * 4, 250.0)
    lines = harness_accuracy.report([good])
    assert lines[-1].startswith("ok") and "coverage 100%" in lines[-1]
    off = harness_accuracy.Case(1000.0, "shared", [m(1400, 1250, 1410)] * 4, [m(300, 295, 305)] * 4, 250.0)
    last = harness_accuracy.report([good, off])[-1]
    # The interval still covers the truth (1300 us), but the median is 100 us off where 20 are allowed.
    assert last == "short: median off by 100.0 us (allowed 20.0) at X=1000 us on a shared service"
    wide = harness_accuracy.Case(
        10000.0, "private", [m(10300, 10000, 10310)] * 4, [m(400, 395, 405)] * 4, 1.0
    )
    assert harness_accuracy.report([wide])[-1].startswith("short: coverage 0% (goal 90%) at X=10000 us")


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
    rows = [line.split() for line in lines[2:-1]]
    assert [row[:2] for row in rows] == [["1000", "private"], ["1000", "shared"]]
    for row in rows:
        overhead, empty, ping = float(row[2]), float(row[3]), float(row[4])
        # The busy-wait guarantees X per call, so the harness can never report less than X.
        assert overhead > 0 and empty > 0 and ping > 0
        assert row[-1].endswith("%")
    assert lines[-1].startswith(("ok", "short: "))
