"""The compiled kernels (kernels.c), loaded with ctypes when a current build of them is installed.

`pip install` compiles kernels.c with the system C compiler (setup.py); without a compiler the
install still succeeds and `LIB` is None, so every kernel runs its NumPy path. A build whose
source hash differs from kernels.c beside it is stale and not used. `MLTS_DRIVER_NATIVE=0` turns
the compiled kernels off (to compare both paths).

The kernels split large operations over `threads()` threads of their own pool: OMP_NUM_THREADS,
else OPENBLAS_NUM_THREADS (what the runtime sets for a driver process started with a thread count),
else the CPUs this process may use. The pool's rules are fixed (docs/tuning.md, "Kernel pool"): an
idle pool thread spins for 100 us (about the gap between two operations of a model) before it
sleeps, and sleeps at once after `rest()` (an execution ended); operations from about 50 us of work
wake sleeping workers, shorter ones down to 1/8 of that are split over workers already spinning
only. `set_spin` and `set_split` change them for tests and experiments.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import logging
import os
from pathlib import Path

import numpy as np

log = logging.getLogger("driver.native")

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels.c"
ABI = 6

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_int64
_F = ctypes.c_float
_GEOM = [_P]  # int32[14]: N, H, W, C, KH, KW, stride h/w, dilation h/w, pad top/left, OH, OW

_SIGNATURES: dict[str, list] = {
    "mk_requant_f32": [_P, _L, _I, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_bias_act_f32": [_P, _L, _I, _P, _F, _F],
    "mk_im2col_f32": [_P, *_GEOM, _P],
    "mk_im2col_q8": [_P, _I, _I, *_GEOM, _P],
    "mk_center_q8": [_P, _I, _I, _L, _P],
    "mk_depthwise_f32": [_P, *_GEOM, _I, _P, _P, _F, _F, _P],
    "mk_depthwise_q8": [_P, _I, _I, *_GEOM, _I, _P, _P, _P, _P, _P, _L, _L, _L, _P],
    "mk_gemm_f32": [_P, _P, _P, _L, _L, _L],
    "mk_gemm_bias_act_f32": [_P, _P, _P, _L, _L, _L, _P, _F, _F],
    "mk_gemm_requant_f32": [_P, _P, _P, _L, _L, _L, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_set_sgemm": [_P, _I],
    "mk_set_spin": [_I],
    "mk_pool_backoffs": [],
    "mk_pool_stats": [_P],
    "mk_pool_rest": [],
    "mk_set_split": [_I],
    "mk_split": [],
    "mk_pack_b_f32": [_P, _L, _L, _P],
    "mk_gemm_packed_bias_act_f32": [_P, _P, _P, _L, _L, _L, _P, _F, _F],
    "mk_gemm_packed_requant_f32": [_P, _P, _P, _L, _L, _L, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_gemm_packed_requant_q8": [_P, _I, _I, _P, _P, _L, _L, _L, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_run_calls": [_P, _P, _L, _P],
    "mk_run_calls_watched": [_P, _P, _L, _P, _P, _L, _L],
    "mk_add_f32": [_P, _P, _P, _L],
    "mk_tanh_f32": [_P, _P, _L],
    "mk_logistic_f32": [_P, _P, _L],
    "mk_copy_2d": [_P, _P, _L, _L, _L, _L],
    "mk_softmax_f32": [_P, _P, _L, _L, _F],
    "mk_call_ints": [],
}


# Kernels that allocate: they return 0, or -1 when out of memory.
_RETURNS_STATUS = frozenset(
    {
        "mk_requant_f32",
        "mk_depthwise_q8",
        "mk_gemm_f32",
        "mk_gemm_bias_act_f32",
        "mk_gemm_requant_f32",
        "mk_gemm_packed_requant_f32",
        "mk_gemm_packed_requant_q8",
    }
)

DEFAULT_SPIN_US = 100

_RESTYPES = {
    "mk_pool_backoffs": ctypes.c_int64,
    "mk_pool_stats": ctypes.c_int,
    "mk_split": ctypes.c_int,
    "mk_run_calls": ctypes.c_int64,
    "mk_run_calls_watched": ctypes.c_int64,
    "mk_call_ints": ctypes.c_int,
}

# NumPy's bundled OpenBLAS (numpy.libs) names its symbols with a prefix and suffix; a system BLAS does not.
_SGEMM_NAMES = (
    ("scipy_cblas_sgemm64_", 1),
    ("cblas_sgemm64_", 1),
    ("scipy_cblas_sgemm", 0),
    ("cblas_sgemm", 0),
)
_SET_THREADS_NAMES = (
    "scipy_openblas_set_num_threads64_",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def _thread_count() -> int:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def source_digest(source: Path) -> str:
    """SHA-256 of a kernel source followed by every header beside it, as setup.py compiles it in."""
    digest = hashlib.sha256(source.read_bytes())
    for header in sorted(source.parent.glob("*.h")):
        digest.update(header.read_bytes())
    return digest.hexdigest()


def built_from(source: Path, built: str) -> bool:
    """Whether a build whose compiled-in digest is `built` is current for `source` (and the headers
    beside it); True when the source is not shipped (an installed wheel)."""
    return not source.is_file() or built == source_digest(source)


def _library_path() -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = HERE / f"_kernels{suffix}"
        if path.is_file():
            return path
    return None


def _load() -> tuple[ctypes.CDLL | None, str]:
    """(the library, why not) — the library is None when it is missing, stale or turned off."""
    if os.environ.get("MLTS_DRIVER_NATIVE", "1") == "0":
        return None, "turned off by MLTS_DRIVER_NATIVE=0"
    path = _library_path()
    if path is None:
        return None, "not built (no C compiler at install time?): NumPy kernels only"
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return None, f"cannot load {path.name}: {e}"
    lib.mk_source_hash.restype = ctypes.c_char_p
    if not built_from(SOURCE, lib.mk_source_hash().decode()):
        return None, f"{path.name} is older than kernels.c: reinstall (pip install -e .) to rebuild it"
    if lib.mk_abi() != ABI:
        return None, f"{path.name} has ABI {lib.mk_abi()}, expected {ABI}"
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = _RESTYPES.get(name, ctypes.c_int if name in _RETURNS_STATUS else None)
    lib.mk_set_threads(_thread_count())
    lib.mk_set_spin(DEFAULT_SPIN_US)
    _adopt_blas(lib)
    return lib, ""


def _blas_libraries() -> list[Path]:
    """The OpenBLAS NumPy links (its wheels bundle one in numpy.libs)."""
    site = Path(np.__file__).resolve().parent.parent
    return sorted((site / "numpy.libs").glob("lib*openblas*.so*"))


def _adopt_blas(lib: ctypes.CDLL) -> None:
    """Give the kernels NumPy's sgemm and run it on their threads: BLAS's own threads go to 1.

    OpenBLAS's threads and the kernels' threads would otherwise compete for the same cores
    (measured: several times slower with two of each on two busy cores). Without a usable BLAS the
    kernels keep calling np.matmul, with BLAS's threads untouched.
    """
    for path in _blas_libraries():
        try:
            blas = ctypes.CDLL(str(path))
        except OSError:
            continue
        for name, ilp64 in _SGEMM_NAMES:
            fn = getattr(blas, name, None)
            if fn is None:
                continue
            for setter in _SET_THREADS_NAMES:
                set_threads = getattr(blas, setter, None)
                if set_threads is not None:
                    set_threads.argtypes = [ctypes.c_int]
                    set_threads(1)
                    lib.mk_set_sgemm(ctypes.cast(fn, ctypes.c_void_p).value, ilp64)
                    return


LIB, WHY_NOT = _load()


def _held(lib: ctypes.CDLL | None) -> ctypes.PyDLL | None:
    """The same library as a PyDLL: its calls keep the interpreter lock (for work shorter than a
    hand-off of the lock to another thread and back)."""
    path = _library_path()
    if lib is None or path is None:
        return None
    held = ctypes.PyDLL(str(path))
    held.mk_run_calls.argtypes = _SIGNATURES["mk_run_calls"]
    held.mk_run_calls.restype = _RESTYPES["mk_run_calls"]
    return held


#: The library's calls that keep the interpreter lock (None without the library).
LIB_HELD = _held(LIB)
if LIB is None:
    log.info("compiled kernels unavailable: %s", WHY_NOT)


def available() -> bool:
    return LIB is not None


def threads() -> int:
    """The thread count of the compiled kernels (1 without them)."""
    return int(LIB.mk_threads()) if LIB is not None else 1


def pool_backoffs() -> int:
    """How many times the kernels' pool ran on the calling thread alone for a while after a worker
    stalled it (descheduled mid-task: a busy machine)."""
    return int(LIB.mk_pool_backoffs()) if LIB is not None else 0


#: What mk_pool_stats counts, in its order.
POOL_STATS = (
    "jobs",
    "worker_tasks",
    "wakes",
    "wait_ns",
    "preempted",
    "crowded",
    "late",
    "kept",
    "rests",
)


def pool_stats() -> dict[str, int]:
    """The kernels' pool counters since the process started: jobs handed to the pool, tasks its
    workers ran, wake-ups of sleeping workers, nanoseconds callers waited for a worker's task, and
    times a spinning worker found itself descheduled or the machine crowded (more threads running
    than CPUs); then times a worker joined a job and found no task left (a wake-up or spin that gained
    nothing), short jobs that ran on the caller because every worker slept, and the times `rest()`
    sent idle workers to sleep (empty without the compiled kernels)."""
    if LIB is None:
        return {}
    buf = (ctypes.c_int64 * 32)()
    count = int(LIB.mk_pool_stats(ctypes.addressof(buf)))
    return {name: int(buf[i]) for i, name in enumerate(POOL_STATS[:count])}


def rest() -> None:
    """An execution ended: the pool's idle workers sleep now instead of spinning out their window, so
    that they take no core from the threads that return the results and read the next request. The
    next job large enough to wake them does; shorter ones run on the caller's thread."""
    if LIB is not None:
        LIB.mk_pool_rest()


def set_split(shift: int) -> None:
    """Split operations from 2**-shift of the work that wakes sleeping workers (default 3), over
    spinning workers only; 0: only work that may wake them is split."""
    if LIB is not None:
        LIB.mk_set_split(int(shift))


def set_spin(us: int) -> None:
    """How long an idle worker spins before it sleeps, in µs (default 100; 0: sleeps at once)."""
    if LIB is not None:
        LIB.mk_set_spin(int(us))


def spin() -> int:
    """The idle workers' spin window in µs (0 without the compiled kernels)."""
    return int(LIB.mk_spin()) if LIB is not None else 0


def set_threads(n: int) -> None:
    if LIB is not None:
        LIB.mk_set_threads(int(n))


def describe() -> str:
    """One line for logs and benchmark headers."""
    if LIB is None:
        return f"NumPy kernels ({WHY_NOT})"
    pool = f"own thread pool (idle spin {LIB.mk_spin()} us, split shift {LIB.mk_split()})"
    gemm = "GEMM on the same threads" if has_gemm() else "GEMM by np.matmul"
    return f"compiled kernels, {threads()} thread(s), {pool}, {gemm}"


def has_gemm() -> bool:
    """True when the kernels call BLAS sgemm themselves (split over their threads)."""
    return LIB is not None and bool(LIB.mk_has_sgemm())


def ptr(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (the caller keeps the array alive)."""
    return a.ctypes.data
