"""Keep the kernels' large temporaries on the heap instead of fresh mmaps.

The executor allocates multi-megabyte intermediate tensors for every
operation. With glibc's defaults such blocks may be served by mmap and
returned with munmap, so every run page-faults its whole working set again:
MobileNet v1 1.0_224 measured 37 ms per run in the driver process against
23 ms once the thresholds below are raised. Only glibc has mallopt; elsewhere
this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 256 << 20  # allocations up to this size come from the heap
_TRIM_THRESHOLD = 512 << 20  # free heap kept before it is returned to the system

_done = False


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True if applied."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )
    _done = ok
    return ok
