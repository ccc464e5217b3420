"""What a vendor asks of a driver beyond its median latency (seed 000), measured around one benchmark row.

- first execution: the wall time of the first execution after preparation (the client's view, as
  every latency sample), against the steady state (the timed run's median): a driver that builds
  its workspaces, maps memory or loads firmware on the first call shows it here;
- MeasureTiming: latency with timing measured (YES) and not (NO), in pairs of calls alternating the
  order (YES, NO), (NO, YES), ... after the timed run, so drift of the machine hits both alike; the
  cost of asking the driver for its Timing is the difference of the medians;
- driver CPU time per execution: the driver service's user and system CPU time (/proc/PID/stat,
  every thread of the process) from the first to the last timed call, divided by the timed calls,
  and that time per second of the timed run (`driver_cpu_share`: 1.0 is one core kept busy); an
  accelerator driver that burns host CPU while its device works shows it here;
- memory: the driver process's resident set just after preparation and its peak from then to the
  end of the timed run (Linux VmHWM, reset after preparation by the row's memory watch), so what
  executions take is told apart from what the model needs once prepared.

CPU and memory need the driver in a process of its own on this machine (a private or local shared
service); for a driver loaded in this process they are null. Readers: `mlts.records.benchmark.
DriverQuality`, the report's driver-quality table and `mlts compare`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from mlts.bench.memory import MemoryWatch
from mlts.hal.enums import MeasureTiming

#: Pairs of calls (one with timing measured, one without) after the timed run: at least, at most.
MIN_TIMING_PAIRS = 5
MAX_TIMING_PAIRS = 50
#: The share of the timed run's duration the pairs may take (at least MIN_TIMING_PAIRS are made).
TIMING_SHARE = 0.2

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time (s) of every thread of process `pid` so far; None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: fields are counted after it.
    fields = text.rsplit(")", 1)[-1].split()
    try:
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    except (IndexError, ValueError):
        return None
    return (utime + stime) / _TICKS


def resident_mb(pid: int) -> float | None:
    """The current resident set (VmRSS) of process `pid` in MiB; None when unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024.0, 2)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


class DriverQualityProbe:
    """Collects one row's driver-quality figures; `to_json()` gives the row's `driver_quality`."""

    def __init__(self, watch: MemoryWatch | None, pid: int | None) -> None:
        self.watch = watch
        self.pid = pid
        self.first_ms: float | None = None
        self.rss_after_prepare: float | None = None
        self.rss_peak_execution: float | None = None
        self._cpu_start: float | None = None
        self._wall_start = 0.0
        self.cpu_ms_per_execution: float | None = None
        self.cpu_share: float | None = None
        self.cpu_executions: int | None = None
        self.timing_on: float | None = None
        self.timing_off: float | None = None
        self.timing_pairs: int | None = None

    # ------------------------------------------------------------ phases, in order

    def prepared(self) -> None:
        """The model is prepared, nothing executed yet: the driver's resident set now; the peak from here."""
        if self.pid is None:
            return
        self.rss_after_prepare = resident_mb(self.pid)
        if self.watch is not None and self.watch.driver is not None:
            self.watch.driver.restart()

    def wrap(self, call: Callable[[int], None]) -> Callable[[int], None]:
        """The timed loop's call, timing the very first execution and starting the CPU count at the first
        timed call (the loop counts its calls from 0 again after the warm-up)."""
        made = [0]

        def first_call(index: int) -> None:
            if index == 0 and (made[0] > 0 or self._cpu_start is None):
                self._start_cpu()
            made[0] += 1
            if made[0] == 1:
                start = time.perf_counter()
                call(index)
                self.first_ms = (time.perf_counter() - start) * 1000.0
                return
            call(index)

        return first_call

    def _start_cpu(self) -> None:
        self._cpu_start = process_cpu_seconds(self.pid) if self.pid is not None else None
        self._wall_start = time.perf_counter()

    def timed(self, iterations: int) -> None:
        """The timed run ended after `iterations` calls: CPU per execution and the peak memory."""
        if self.pid is None:
            return
        wall = time.perf_counter() - self._wall_start
        end = process_cpu_seconds(self.pid)
        if self._cpu_start is not None and end is not None and iterations > 0:
            used = max(0.0, end - self._cpu_start)
            self.cpu_ms_per_execution = used * 1000.0 / iterations
            self.cpu_executions = iterations
            self.cpu_share = used / wall if wall > 0 else None
        if self.watch is not None and self.watch.driver is not None:
            self.rss_peak_execution = self.watch.driver.peak_since_restart_mb()

    def timing_cost(self, session: Any, feeds: Sequence[Any], median_s: float, duration_s: float) -> None:
        """Pairs of calls with MeasureTiming YES and NO (the order alternating), their medians."""
        budget = max(duration_s * TIMING_SHARE, 0.0)
        pairs = int(budget / (2 * median_s)) if median_s > 0 else MAX_TIMING_PAIRS
        pairs = max(MIN_TIMING_PAIRS, min(MAX_TIMING_PAIRS, pairs))
        before = session.measure
        on: list[float] = []
        off: list[float] = []
        try:
            for k in range(pairs):
                order = (
                    (MeasureTiming.YES, MeasureTiming.NO)
                    if k % 2 == 0
                    else (MeasureTiming.NO, MeasureTiming.YES)
                )
                for measure in order:
                    session.measure = measure
                    start = time.perf_counter()
                    session.run(feeds[k % len(feeds)])
                    (on if measure == MeasureTiming.YES else off).append(time.perf_counter() - start)
        finally:
            session.measure = before
        self.timing_on, self.timing_off = _median(on) * 1000.0, _median(off) * 1000.0
        self.timing_pairs = pairs

    # ------------------------------------------------------------ the record

    def to_json(self, steady_median_ms: float | None) -> dict[str, Any]:
        return {
            "first_execution_ms": self.first_ms,
            "steady_median_ms": steady_median_ms,
            "timing_on_median_ms": self.timing_on,
            "timing_off_median_ms": self.timing_off,
            "timing_pairs": self.timing_pairs,
            "driver_cpu_ms_per_execution": self.cpu_ms_per_execution,
            "driver_cpu_share": self.cpu_share,
            "driver_cpu_executions": self.cpu_executions,
            "driver_rss_after_prepare_mb": self.rss_after_prepare,
            "driver_rss_peak_execution_mb": self.rss_peak_execution,
            "method": "driver process /proc"
            if self.pid is not None
            else "driver in this process: no CPU or memory",
        }
