"""What one timed run costs: RAPL energy when the machine exposes it, CPU time otherwise.

A meter is started before a timed run and stopped after it; the stop call
returns a Cost. RAPL (`/sys/class/powercap/intel-rapl:N/energy_uj`, the
top-level package zones only, so sub-zones are not counted twice) gives the
whole machine's energy in joules over the run; a counter that passed its
`max_energy_range_uj` and wrapped is corrected once. Without readable RAPL
zones the cost is CPU seconds: this process's CPU time (every thread) plus,
for a driver in its own process, that process's utime + stime from
/proc/PID/stat (in clock ticks). Ratios of costs per call stand in for the
HAL's powerUsage either way; `source` says which one was measured.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

RAPL_ROOT = Path("/sys/class/powercap")
SOURCE_RAPL = "rapl"
SOURCE_CPU_TIME = "cpu-time"


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost of one stretch: the total (joules or CPU seconds) and its parts by name."""

    total: float
    parts: dict[str, float] = field(default_factory=dict)


Stop = Callable[[], Cost]


class Meter(Protocol):
    """Starts measuring a stretch; calling the returned function ends it and gives its Cost."""

    source: str  # "rapl" or "cpu-time"
    unit: str  # "joule" or "cpu-second"

    def start(self, driver_pid: int | None) -> Stop: ...


# ---------------------------------------------------------------- RAPL


@dataclass(frozen=True, slots=True)
class RaplZone:
    """One RAPL package zone: its name, its energy counter file and the counter's range (µJ)."""

    name: str
    energy_path: Path
    max_range_uj: int


def wrapped_delta(before: int, after: int, max_range_uj: int) -> int:
    """Microjoules between two counter readings; a counter that wrapped past its range is corrected.

    The counter runs from 0 to max_range_uj and then starts again at 0, so a
    reading below the previous one means one wrap: (max_range_uj - before) + after.
    """
    if after >= before:
        return after - before
    return max_range_uj - before + after


def _read_int(path: Path) -> int:
    return int(path.read_text(encoding="ascii").strip())


def rapl_zones(root: Path = RAPL_ROOT) -> list[RaplZone]:
    """The readable top-level RAPL zones under `root` (intel-rapl:N, not the sub-zones intel-rapl:N:M)."""
    zones = []
    for folder in sorted(root.glob("intel-rapl:*")):
        if folder.name.count(":") != 1:
            continue
        try:
            _read_int(folder / "energy_uj")
            max_range = _read_int(folder / "max_energy_range_uj")
            name = (folder / "name").read_text(encoding="ascii").strip() or folder.name
        except (OSError, ValueError):
            continue  # unreadable (often root-only since 2020): no energy from this zone
        zones.append(RaplZone(f"{folder.name} ({name})", folder / "energy_uj", max_range))
    return zones


class RaplMeter:
    """Energy (joules) of all package zones over a stretch, whoever used it."""

    source = SOURCE_RAPL
    unit = "joule"

    def __init__(self, zones: Sequence[RaplZone], read: Callable[[Path], int] = _read_int) -> None:
        if not zones:
            raise ValueError("RAPL needs at least one readable zone")
        self.zones = tuple(zones)
        self._read = read

    def start(self, driver_pid: int | None) -> Stop:
        before = [self._read(z.energy_path) for z in self.zones]

        def stop() -> Cost:
            parts = {
                z.name: wrapped_delta(b, self._read(z.energy_path), z.max_range_uj) / 1e6
                for z, b in zip(self.zones, before, strict=True)
            }
            return Cost(sum(parts.values()), parts)

        return stop


# ---------------------------------------------------------------- CPU time


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` in seconds, from /proc/PID/stat (fields 14 and 15, clock ticks)."""
    text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


class CpuTimeMeter:
    """CPU seconds over a stretch: this process's, plus the driver process's when it has its own."""

    source = SOURCE_CPU_TIME
    unit = "cpu-second"

    def __init__(
        self,
        own_clock: Callable[[], float] = time.process_time,
        other: Callable[[int], float] = process_cpu_seconds,
    ) -> None:
        self._own = own_clock
        self._other = other

    def start(self, driver_pid: int | None) -> Stop:
        own_before = self._own()
        driver_before = self._other(driver_pid) if driver_pid is not None else 0.0

        def stop() -> Cost:
            parts = {"client": self._own() - own_before}
            if driver_pid is not None:
                parts["driver_process"] = self._other(driver_pid) - driver_before
            return Cost(sum(parts.values()), parts)

        return stop


def default_meter(root: Path = RAPL_ROOT) -> Meter:
    """RAPL when a package zone is readable, else CPU time."""
    zones = rapl_zones(root)
    return RaplMeter(zones) if zones else CpuTimeMeter()
