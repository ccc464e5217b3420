"""The compiled kernels, loaded once with ctypes when a current build of them is installed.

`pip install` compiles the C sources beside this file (kernels.c, lstm_kernels.c, qgemm_kernels.c)
into one library with the system C compiler (setup.py); without a compiler the install still
succeeds and `LIB` is None, so every kernel runs its NumPy path. Their one interface is
mlts_kernels.h: every exported function (typed here, `SIGNATURES`), every structure passed across
(mirrored in `driver.native.layout`) and one ABI number. A build whose compiled-in digest differs
from that of the sources and headers beside it, or whose ABI is not `layout.ABI`, is not used, and
`WHY_NOT` says why. `MLTS_DRIVER_NATIVE=0` turns the compiled kernels off (to compare both paths).
The ops modules take their functions from `LIB` (and `LIB_HELD`), typed here, and never load or
check the library themselves.

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
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np

from driver.native import layout

log = logging.getLogger("driver.native")

HERE = Path(__file__).resolve().parent
ABI = layout.ABI

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_int64
_F = ctypes.c_float
_S = ctypes.c_char_p
_GEOM = [_P]  # const mk_geom_t * (layout.Geom)

#: Every function of mlts_kernels.h: its argument types (tests/driver/test_native_layout.py checks
#: them against the header's prototypes).
SIGNATURES: dict[str, list] = {
    "mk_abi": [],
    "mk_source_hash": [],
    "mk_layout": [_L, _P, _P, _P, _P],
    "mk_constant": [_L, _P, _P],
    "mk_set_threads": [_I],
    "mk_threads": [],
    "mk_requant_f32": [_P, _L, _I, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_bias_act_f32": [_P, _L, _I, _P, _F, _F],
    "mk_im2col_f32": [_P, *_GEOM, _P],
    "mk_im2col_q8": [_P, _I, _I, *_GEOM, _P],
    "mk_center_q8": [_P, _I, _I, _L, _P],
    "mk_depthwise_f32": [_P, *_GEOM, _I, _P, _P, _F, _F, _P],
    "mk_depthwise_q8_packed_size": [_L, _L],
    "mk_depthwise_q8_pack": [_P, _L, _L, _P],
    "mk_depthwise_q8": [_P, _I, _I, *_GEOM, _I, _P, _P, _P, _P, _P, _L, _L, _L, _P],
    "mk_gemm_f32": [_P, _P, _P, _L, _L, _L],
    "mk_gemm_bias_act_f32": [_P, _P, _P, _L, _L, _L, _P, _F, _F],
    "mk_gemm_requant_f32": [_P, _P, _P, _L, _L, _L, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_set_sgemm": [_P, _I],
    "mk_has_sgemm": [],
    "mk_set_spin": [_I],
    "mk_spin": [],
    "mk_pool_backoffs": [],
    "mk_pool_stats": [_P],
    "mk_pool_rest": [],
    "mk_set_split": [_I],
    "mk_split": [],
    "mk_split_work": [_L],
    "mk_parallel_for": [_I, _L, _P, _P],
    "mk_parallel_for_job": [_I, _L, _P, _P, _I],
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
    "mk_softmax_q8": [_P, _P, _L, _L, _P, _P, _I],
    "mk_mean_q8": [_P, _I, _L, _L, _L, _P, _L, _P],
    "mk_pair_table_q8": [_P, _P, _P, _P, _L],
    "mk_lstm_cell_f32": [_P, _L, _P, _L, _P, _L, _P, _L, _P, _P, _P, _P],
    "mk_qgemm_available": [],
    "mk_qgemm_row_stride": [_L],
    "mk_qgemm_packed_bytes": [_L, _L],
    "mk_qgemm_pack": [_P, _L, _L, _P],
    "mk_qgemm_requant": [_P, _L, _I, _P, _P, ctypes.c_int32, _L, _L, _L, _P, _P, _P, _P, _L, _L, _L, _I, _P],
    "mk_qim2col": [_P, _P, _I, _L, _P],
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
        "mk_qgemm_requant",
    }
)

DEFAULT_SPIN_US = 100

_RESTYPES = {
    "mk_abi": _I,
    "mk_source_hash": _S,
    "mk_layout": _I,
    "mk_constant": _I,
    "mk_threads": _I,
    "mk_has_sgemm": _I,
    "mk_spin": _I,
    "mk_pool_backoffs": _L,
    "mk_pool_stats": _I,
    "mk_split": _I,
    "mk_split_work": _L,
    "mk_run_calls": _L,
    "mk_run_calls_watched": _L,
    "mk_qgemm_available": _I,
    "mk_qgemm_row_stride": _L,
    "mk_qgemm_packed_bytes": _L,
    "mk_qgemm_pack": _I,
    "mk_depthwise_q8_packed_size": _L,
}


def restype(name: str) -> type | None:
    """The result type of mlts_kernels.h's function `name` (None: void)."""
    return _RESTYPES.get(name, _I if name in _RETURNS_STATUS else None)


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


def sources(folder: Path = HERE) -> list[Path]:
    """The kernels' C sources in `folder` and then its headers, each sorted by name."""
    return [*sorted(folder.glob("*.c")), *sorted(folder.glob("*.h"))]


def source_digest(folder: Path = HERE) -> str:
    """SHA-256 of every C source and then every header in `folder`, each as its name, NUL, its length,
    NUL and its bytes: what setup.py compiles into the library (mk_source_hash)."""
    digest = hashlib.sha256()
    for path in sources(folder):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def built_from(folder: Path, built: str) -> bool:
    """Whether a build whose compiled-in digest is `built` is current for the sources and headers in
    `folder`; True when no source is shipped there (an installed wheel)."""
    return not any(folder.glob("*.c")) or built == source_digest(folder)


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
    why = _check(lib, path.name)
    if why:
        return None, why
    lib.mk_set_threads(_thread_count())
    lib.mk_set_spin(DEFAULT_SPIN_US)
    _adopt_blas(lib)
    return lib, ""


def _check(lib: ctypes.CDLL, name: str) -> str:
    """Why the library `lib` (file `name`) cannot be used ("" when it can), its functions typed."""
    try:
        lib.mk_source_hash.restype = _S
        lib.mk_abi.restype = _I
        built, abi = lib.mk_source_hash().decode(), int(lib.mk_abi())
    except AttributeError as e:  # not a build of these sources at all
        return f"{name} is not a kernels library: {e}"
    if not built_from(HERE, built):
        return (
            f"{name} was built from other sources than driver/native/*.c and *.h (stale): "
            "reinstall (pip install -e .) or run `python setup.py build_ext --inplace` to rebuild it"
        )
    if abi != ABI:
        return f"{name} has ABI {abi}, expected {ABI}: rebuild it"
    for fn_name, argtypes in SIGNATURES.items():
        fn = getattr(lib, fn_name, None)
        if fn is None:
            return f"{name} lacks {fn_name}: rebuild it"
        fn.argtypes = argtypes
        fn.restype = restype(fn_name)
    return ""


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
    for name in ("mk_run_calls", "mk_run_calls_watched"):
        fn = getattr(held, name)
        fn.argtypes = SIGNATURES[name]
        fn.restype = restype(name)
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


#: What mk_pool_stats counts (the fields of layout.PoolStats, mk_pool_stats_t).
POOL_STATS: tuple[str, ...] = layout.POOL_STATS


def pool_stats() -> dict[str, int]:
    """The kernels' pool counters since the process started: jobs handed to the pool, tasks its
    workers ran, wake-ups of sleeping workers, nanoseconds callers waited for a worker's task, and
    times a spinning worker found itself descheduled or the machine crowded (more threads running
    than CPUs); then times a worker joined a job and found no task left (a wake-up or spin that gained
    nothing), short jobs that ran on the caller because every worker slept, and the times `rest()`
    sent idle workers to sleep (empty without the compiled kernels)."""
    if LIB is None:
        return {}
    stats = layout.PoolStats()
    LIB.mk_pool_stats(ctypes.addressof(stats))
    return {name: int(getattr(stats, name)) for name in POOL_STATS}


def _no_rest() -> None:
    pass


def _rest_call() -> Callable[[], None]:
    """`mk_pool_rest` through the PyDLL handle: a few atomic operations that never block, called once
    per execution, so the interpreter lock is kept rather than given away and taken back."""
    if LIB_HELD is None:
        return _no_rest
    fn = LIB_HELD.mk_pool_rest
    fn.argtypes = SIGNATURES["mk_pool_rest"]
    fn.restype = restype("mk_pool_rest")
    return cast("Callable[[], None]", fn)


#: rest(): an execution ended: the pool's idle workers sleep now instead of spinning out their window,
#: so that they take no core from the threads that return the results and read the next request. The
#: next job large enough to wake them does; shorter ones run on the caller's thread.
rest = _rest_call()


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


def has_qgemm() -> bool:
    """True when the library holds the 8-bit integer GEMM (built for a processor with AVX512-VNNI or AVX2)."""
    return LIB is not None and LIB.mk_qgemm_available() == 1


def layout_rows() -> list[tuple[str, str, int, int]]:
    """The library's layout table (mk_layout): (C type, field or "" for the type's size, offset,
    size) for every structure of mlts_kernels.h (empty without the library)."""
    rows: list[tuple[str, str, int, int]] = []
    if LIB is None:
        return rows
    t, f, off, size = _S(), _S(), ctypes.c_int64(), ctypes.c_int64()
    refs = [ctypes.addressof(v) for v in (t, f, off, size)]
    while LIB.mk_layout(len(rows), *refs):
        rows.append(((t.value or b"").decode(), (f.value or b"").decode(), off.value, size.value))
    return rows


def constants() -> dict[str, int]:
    """The library's constants (mk_constant), by their C names (empty without the library)."""
    found: dict[str, int] = {}
    if LIB is None:
        return found
    name, value, i = _S(), ctypes.c_int64(), 0
    while LIB.mk_constant(i, ctypes.addressof(name), ctypes.addressof(value)):
        found[(name.value or b"").decode()] = value.value
        i += 1
    return found


def has_gemm() -> bool:
    """True when the kernels call BLAS sgemm themselves (split over their threads)."""
    return LIB is not None and bool(LIB.mk_has_sgemm())


def ptr(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (the caller keeps the array alive)."""
    return a.ctypes.data
