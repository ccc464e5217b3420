"""Peak resident memory of a process over one measured stretch (Linux /proc; other systems: since start).

Linux keeps a high-water mark of each process's resident set (VmHWM in
/proc/PID/status). Writing "5" to /proc/PID/clear_refs resets it to the
current resident size, so resetting before a model × backend run and reading
after gives that run's peak, not the whole process's. Where the reset is not
allowed or /proc is missing, the figure is the peak since the process started
(getrusage for this process, nothing for another) and `method` says so.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass

METHOD_WINDOW = "VmHWM after clear_refs"
METHOD_SINCE_START = "peak since process start"


@dataclass
class PeakWatch:
    """One process's peak RSS over a stretch: `start()` resets the mark, `peak_mb()` reads it."""

    pid: int
    windowed: bool = False
    #: The peak before the last `restart()` (MiB), kept so `peak_mb()` still covers the whole stretch.
    earlier_mb: float | None = None

    def start(self) -> None:
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
            self.windowed = True
        except OSError:
            self.windowed = False

    def restart(self) -> None:
        """Reset the mark within the stretch (the peak so far is kept): `peak_since_restart_mb()` then
        reads the peak of what follows, `peak_mb()` still the whole stretch's."""
        peak = self.peak_mb()
        self.start()
        self.earlier_mb = peak

    def peak_since_restart_mb(self) -> float | None:
        """The peak since `restart()` (since the start, without one); None where the mark cannot be reset."""
        if not self.windowed:
            return None
        kib = _vm_hwm_kib(self.pid)
        return None if kib is None else round(kib / 1024.0, 2)

    def peak_mb(self) -> float | None:
        kib = _vm_hwm_kib(self.pid)
        if kib is None and self.pid == os.getpid():
            kib = _rusage_kib()
        mb = None if kib is None else round(kib / 1024.0, 2)
        if self.earlier_mb is not None and (mb is None or self.earlier_mb > mb):
            return self.earlier_mb
        return mb

    @property
    def method(self) -> str:
        return METHOD_WINDOW if self.windowed else METHOD_SINCE_START


def _vm_hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _rusage_kib() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # macOS reports bytes, Linux KiB


class MemoryWatch:
    """The client's and (when it runs in its own process) the driver's peak RSS over one run."""

    def __init__(self, driver_pid: int | None) -> None:
        self.client = PeakWatch(os.getpid())
        self.driver = PeakWatch(driver_pid) if driver_pid is not None else None

    def start(self) -> MemoryWatch:
        self.client.start()
        if self.driver is not None:
            self.driver.start()
        return self

    def result(self) -> dict:
        """{"client_peak_rss", "driver_peak_rss" (None: in-process or not a driver), "method"} in MiB."""
        methods = {self.client.method} | ({self.driver.method} if self.driver else set())
        return {
            "client_peak_rss": self.client.peak_mb(),
            "driver_peak_rss": self.driver.peak_mb() if self.driver is not None else None,
            "method": " / ".join(sorted(methods)),
        }


def driver_pid(device: object) -> int | None:
    """The pid of a driver running in its own process (a RemoteDevice), else None."""
    process = getattr(device, "process", None)
    pid = getattr(process, "pid", None)
    return pid if isinstance(pid, int) else None
