"""Peak resident memory per measured stretch: the mark is reset at start and follows real allocations."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

import pytest

from mlts.bench.memory import METHOD_WINDOW, MemoryWatch, PeakWatch, driver_pid

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")

# A child that touches 200 MiB, frees it, then waits: its peak RSS rises by ~200 MiB, its current RSS falls back.
CHILD = """
import sys, time
block = bytearray(200 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
del block
sys.stdout.write("freed\\n"); sys.stdout.flush()
time.sleep(30)
"""


def _child_after_free() -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "freed\n"
    return child


def test_peak_of_another_process_and_its_reset():
    child = _child_after_free()
    try:
        watch = PeakWatch(child.pid)
        before_reset = watch.peak_mb()
        assert before_reset is not None and before_reset > 200  # the 200 MiB block was resident
        watch.start()
        after_reset = watch.peak_mb()
        assert watch.method == METHOD_WINDOW
        assert after_reset is not None and after_reset < before_reset - 150  # back to the current size
    finally:
        child.kill()
        child.wait()


def test_client_peak_covers_an_allocation_made_during_the_window():
    watch = MemoryWatch(None).start()
    baseline = watch.result()["client_peak_rss"]
    # A fresh anonymous mapping: malloc could reuse freed pages that are still resident (in-process
    # drivers tune the allocator to keep them), which would not raise the peak.
    block = mmap.mmap(-1, 64 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    result = watch.result()
    block.close()
    assert result["driver_peak_rss"] is None and result["method"] == METHOD_WINDOW
    assert result["client_peak_rss"] >= baseline + 60


def test_unknown_process_reads_as_none_and_driver_pid_only_for_processes():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    time.sleep(0.05)
    assert PeakWatch(gone.pid).peak_mb() is None

    class Remote:
        class process:  # noqa: N801  (mimics RemoteDevice.process)
            pid = 1234

    assert driver_pid(Remote()) == 1234 and driver_pid(object()) is None
