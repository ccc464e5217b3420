"""Driver-quality figures of a benchmark row: first execution, the cost of MeasureTiming, the driver
process's CPU per execution and memory after preparation and while executing; their record, report
table and `mlts compare` lines."""

from __future__ import annotations

import json
import os
import time

from click.testing import CliRunner

from mlts.bench import driver_quality as dq
from mlts.cli import main
from mlts.hal.enums import MeasureTiming
from mlts.records import BenchmarkRow, DriverQuality
from mlts.report.driver_quality import quality_changes, quality_lines, quality_view
from tests.cli.clikit import FAST, tiny_conv_model


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Session:
    """Each run takes 2 ms with timing measured, 1 ms without (on the fake clock)."""

    def __init__(self, clock: _Clock) -> None:
        self.clock, self.measure, self.calls = clock, MeasureTiming.YES, []

    def run(self, feed) -> None:
        self.calls.append((feed, self.measure))
        self.clock.now += 0.002 if self.measure == MeasureTiming.YES else 0.001


def test_timing_pairs_alternate_their_order_and_give_each_median(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(dq.time, "perf_counter", clock)
    session = _Session(clock)
    probe = dq.DriverQualityProbe(None, None)
    probe.timing_cost(session, ["a", "b"], median_s=0.01, duration_s=1.0)  # 0.2 s for 20 ms pairs: 10
    assert probe.timing_pairs == 10 and len(session.calls) == 20
    assert [m for _, m in session.calls[:4]] == [MeasureTiming.YES, MeasureTiming.NO] + [
        MeasureTiming.NO,
        MeasureTiming.YES,
    ]
    assert session.measure == MeasureTiming.YES  # restored
    assert abs(probe.timing_on - 2.0) < 1e-9 and abs(probe.timing_off - 1.0) < 1e-9
    probe.timing_cost(session, ["a"], median_s=10.0, duration_s=1.0)
    assert probe.timing_pairs == dq.MIN_TIMING_PAIRS


def test_the_first_execution_is_timed_and_the_cpu_counted_from_the_first_timed_call(monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(dq.time, "perf_counter", clock)
    # The driver's CPU seconds: at the first call (in case there is no warm-up), again at the first
    # timed call (what counts), and at the end.
    reads = iter([1.0, 5.0, 7.5])
    monkeypatch.setattr(dq, "process_cpu_seconds", lambda pid: next(reads))
    probe = dq.DriverQualityProbe(None, pid=12345)
    durations = iter([0.050] + [0.001] * 9)

    def call(index: int) -> None:
        clock.now += next(durations)

    wrapped = probe.wrap(call)
    for index in (0, 1, 2, 3):  # the warm-up: the first is the first execution
        wrapped(index)
    clock.now = 200.0
    for index in range(6):  # the timed run counts from 0 again
        wrapped(index)
    probe.timed(6)
    assert abs(probe.first_ms - 50.0) < 1e-9
    assert probe.cpu_executions == 6 and abs(probe.cpu_ms_per_execution - 2500.0 / 6) < 1e-9
    assert abs(probe.cpu_share - 2.5 / 0.006) < 1e-6
    record = DriverQuality.from_json(probe.to_json(1.0), "driver_quality")
    assert abs(record.first_vs_steady - 50.0) < 1e-9


def test_this_process_cpu_and_memory_are_read_from_proc() -> None:
    before = dq.process_cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    after = dq.process_cpu_seconds(os.getpid())
    assert before is not None and after is not None and after - before >= 0.03
    assert (dq.resident_mb(os.getpid()) or 0) > 1
    assert dq.process_cpu_seconds(2**22 + 7) is None and dq.resident_mb(2**22 + 7) is None


def _row(**quality) -> BenchmarkRow:
    return BenchmarkRow(
        model="m",
        backend="driver:x",
        status="ok",
        driver_quality=DriverQuality(**quality) if quality else None,
    )


def test_the_record_report_and_compare_read_the_figures() -> None:
    q = DriverQuality(
        first_execution_ms=8.0,
        steady_median_ms=2.0,
        timing_on_median_ms=2.2,
        timing_off_median_ms=2.0,
        timing_pairs=10,
        driver_cpu_ms_per_execution=1.5,
        driver_cpu_share=0.75,
        driver_cpu_executions=100,
        driver_rss_after_prepare_mb=60.0,
        driver_rss_peak_execution_mb=64.5,
    )
    assert DriverQuality.from_json(json.loads(json.dumps(q.to_json()))) == q
    assert q.first_vs_steady == 4.0 and abs(q.timing_overhead - 0.1) < 1e-9
    view = quality_view([BenchmarkRow(model="m", backend="driver:x", status="ok", driver_quality=q), _row()])
    (row,) = view["rows"]
    assert row["cells"] == [
        "8.000",
        "2.000",
        "4.0x",
        "2.200",
        "2.000",
        "+10.0%",
        "1.500",
        "0.75",
        "60.0",
        "64.5",
    ]
    new = BenchmarkRow(
        model="m",
        backend="driver:x",
        status="ok",
        driver_quality=DriverQuality(first_execution_ms=4.0, driver_cpu_ms_per_execution=None),
    )
    old = BenchmarkRow(model="m", backend="driver:x", status="ok", driver_quality=q)
    changes = quality_changes(old, new)
    assert changes == {"first execution ms": {"old": 8.0, "new": 4.0, "change": -0.5}}
    lines = quality_lines([{"model": "m", "backend": "driver:x", "driver_quality": changes}])
    assert lines[-1] == "  m on driver:x: first execution ms 8.000 -> 4.000 (-50%)"
    assert quality_changes(old, _row()) == {}


def test_a_benchmark_row_of_a_driver_service_carries_the_figures(tmp_path) -> None:
    model = tmp_path / "tiny.onnx"
    tiny_conv_model(model)
    out = tmp_path / "o"
    args = [
        "benchmark",
        "--model",
        str(model),
        "--drivers",
        "^sample-all$",
        "--images",
        "1",
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(main, [*args, *FAST, "--no-compilation"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "results.json").read_text())
    (row,) = [row for row in doc["results"] if row["backend"].startswith("driver:")]
    q = DriverQuality.from_json(row["driver_quality"])
    assert q.first_execution_ms > 0 and q.steady_median_ms > 0
    assert q.timing_on_median_ms > 0 and q.timing_off_median_ms > 0 and q.timing_pairs >= dq.MIN_TIMING_PAIRS
    assert q.driver_cpu_ms_per_execution is not None and q.driver_cpu_executions == row["run"]["iterations"]
    assert 0 < q.driver_rss_after_prepare_mb <= q.driver_rss_peak_execution_mb
    assert row["memory_mb"]["driver_peak_rss"] >= q.driver_rss_peak_execution_mb
    assert all("driver_quality" not in r for r in doc["results"] if r["backend"] == "cpu:onnxruntime")
    assert "Driver quality" in (out / "report.html").read_text()
