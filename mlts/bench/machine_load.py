"""How busy the machine was around a run: load average, CPU steal and runnable processes, sampled.

`LoadMonitor` reads /proc/loadavg and /proc/stat before the run, every few
seconds during it (a daemon thread) and after it, and gives the
`environment.load` record of the results document:

    {"before": SAMPLE, "during": [SAMPLE, ...], "after": SAMPLE, "interval_s": 5.0}

with SAMPLE = {"t_s": seconds since the monitor started, "loadavg": [1, 5, 15 minutes],
"procs_running": runnable tasks now, "steal_pct": the CPU time stolen by the hypervisor over the
interval since the previous sample (of all CPU time), "busy_pct": the CPU time not idle over the same
interval}. Where /proc is missing (not Linux) the record is null: nothing is invented.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Seconds between samples during the run.
INTERVAL_S = 5.0
#: The `before` sample's steal and busy shares are measured over this window before the run.
BEFORE_WINDOW_S = 0.25
#: At most this many `during` samples are kept: beyond it every other one is dropped and the
#: interval doubles, so a day-long run keeps a record of bounded size.
MAX_DURING = 720


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The aggregate `cpu` line of /proc/stat: total jiffies, idle (idle + iowait) and steal."""

    total: int
    idle: int
    steal: int


def parse_stat(text: str) -> tuple[CpuTimes | None, int | None]:
    """(the aggregate CPU times, procs_running) of /proc/stat's text; None for what it lacks."""
    cpu: CpuTimes | None = None
    running: int | None = None
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "cpu" and len(fields) >= 5:
            values = [int(v) for v in fields[1:11] if v.isdigit()]
            # user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
            # counted in user and nice, so the total stops at steal.
            total = sum(values[:8])
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            steal = values[7] if len(values) > 7 else 0
            cpu = CpuTimes(total, idle, steal)
        elif fields[0] == "procs_running" and len(fields) == 2 and fields[1].isdigit():
            running = int(fields[1])
    return cpu, running


def parse_loadavg(text: str) -> list[float] | None:
    """The 1, 5 and 15 minute load averages of /proc/loadavg's text (None when malformed)."""
    parts = text.split()
    try:
        return [float(p) for p in parts[:3]] if len(parts) >= 3 else None
    except ValueError:
        return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _percent(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole > 0 else None


class LoadMonitor:
    """Samples the machine's load around a run; `record()` is `environment.load` (None without /proc).

    `reader(path)` returns a /proc file's text or None and `clock()` the seconds, so tests can feed
    both; `start()` takes the `before` sample and starts the sampling thread, `stop()` the `after`.
    """

    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        reader: Callable[[str], str | None] = _read,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"the sampling interval must be positive, got {interval_s}")
        self.interval_s = interval_s
        self._reader = reader
        self._clock = clock
        self._sleep = sleep
        self._t0 = clock()
        self._last: CpuTimes | None = None
        self._lock = threading.Lock()
        self._before: dict[str, Any] | None = None
        self._during: list[dict[str, Any]] = []
        self._after: dict[str, Any] | None = None
        self._available = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ sampling

    def sample(self) -> dict[str, Any] | None:
        """One sample now: load average, runnable processes, steal and busy shares since the last one."""
        stat_text, load_text = self._reader("/proc/stat"), self._reader("/proc/loadavg")
        if stat_text is None or load_text is None:
            return None
        cpu, running = parse_stat(stat_text)
        out: dict[str, Any] = {
            "t_s": round(self._clock() - self._t0, 3),
            "loadavg": parse_loadavg(load_text),
            "procs_running": running,
            "steal_pct": None,
            "busy_pct": None,
        }
        with self._lock:
            last, self._last = self._last, cpu
        if cpu is not None and last is not None:
            total = cpu.total - last.total
            out["steal_pct"] = _percent(cpu.steal - last.steal, total)
            out["busy_pct"] = _percent(total - (cpu.idle - last.idle), total)
        return out

    def start(self, thread: bool = True) -> LoadMonitor:
        """The `before` sample (steal and busy over a short window), then sampling every interval."""
        if self.sample() is None:  # the window's start
            self._available = False
            return self
        self._sleep(BEFORE_WINDOW_S)
        self._before = self.sample()
        if thread:
            self._thread = threading.Thread(target=self._loop, name="load-monitor", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def tick(self) -> None:
        """Take one `during` sample (the thread's step; tests call it directly)."""
        s = self.sample()
        if s is None:
            return
        with self._lock:
            self._during.append(s)
            if len(self._during) > MAX_DURING:
                self._during = self._during[1::2]
                self.interval_s *= 2

    def stop(self) -> dict[str, Any] | None:
        """End the sampling with the `after` sample; returns `record()`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._available and self._after is None:
            self._after = self.sample()
        return self.record()

    # ------------------------------------------------------------ the record

    def record(self) -> dict[str, Any] | None:
        """{"before", "during", "after" (null until the run ended), "interval_s"}, or None without /proc."""
        if not self._available or self._before is None:
            return None
        with self._lock:
            during = list(self._during)
        return {
            "before": self._before,
            "during": during,
            "after": self._after,
            "interval_s": self.interval_s,
        }


def all_samples(load: Any) -> list[dict[str, Any]]:
    """The samples of an `environment.load` record in time order (before, during..., after)."""
    if not isinstance(load, dict):
        return []
    out = [load.get("before")] + list(load.get("during") or []) + [load.get("after")]
    return [s for s in out if isinstance(s, dict)]
