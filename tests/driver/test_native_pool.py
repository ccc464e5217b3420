"""The compiled kernels' own thread pool and the GEMM on packed weights.

Results must not depend on the thread count (every output element is summed in the same order by
whichever thread computes it), a GEMM on weights packed in panels must equal float64 matrix products
within float32 rounding (and exactly for the integer-valued products of quantized layers, whose
requantization must then equal the separate pass), and two callers using the pool at the same time
(two executions in flight) must each get their own results.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

from driver import native
from driver.ops import _fast
from tests.driver.opkit import rand

needs_native = pytest.mark.skipif(not native.available(), reason=f"compiled kernels: {native.WHY_NOT}")

# Shapes of MobileNet layers (rows, K, N): large enough to be split over threads, and with a last
# panel of fewer than 16 columns and a last block of fewer than six rows.
SHAPES = [(196, 512, 512), (49, 1024, 1001), (3137, 27, 40), (5, 70, 33)]


@pytest.fixture
def rng(request) -> np.random.Generator:
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _with_threads(n: int, fn):
    before = native.threads()
    native.set_threads(n)
    try:
        return fn()
    finally:
        native.set_threads(before)


def _packed_gemm(a: np.ndarray, w: _fast.GemmWeights, bias: np.ndarray, lo: float, hi: float) -> np.ndarray:
    m, k = a.shape
    n = w.array.shape[1]
    out = np.empty((m, n), np.float32)
    native.LIB.mk_gemm_packed_bias_act_f32(
        a.ctypes.data, w.panels_ptr, out.ctypes.data, m, n, k, bias.ctypes.data, lo, hi
    )
    return out


@needs_native
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_packed_gemm_matches_float64_and_any_thread_count(rng, m, k, n):
    a, b, bias = rand(rng, m, k, lo=-2, hi=2), rand(rng, k, n), rand(rng, n)
    w = _fast.GemmWeights(b)
    assert w.panels.shape == (-(-n // 16), k, 16)
    lo, hi = _fast.ACT_BOUNDS[3]  # RELU6
    one = _with_threads(1, lambda: _packed_gemm(a, w, bias, lo, hi))
    ref = np.clip(a.astype(np.float64) @ b.astype(np.float64) + bias, lo, hi)
    np.testing.assert_allclose(one, ref, rtol=1e-5, atol=k * 2e-7)
    for threads in (2, 3):
        np.testing.assert_array_equal(_with_threads(threads, lambda: _packed_gemm(a, w, bias, lo, hi)), one)


@needs_native
@pytest.mark.parametrize("signed", [0, 1])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_packed_gemm_requantized_equals_the_separate_pass(rng, signed, m, k, n):
    """Integer-valued products (centred 8-bit values) are exact; the fused requantization gives the bits
    of mk_requant_f32 on the exact accumulators, at any thread count."""
    a = rng.integers(-20, 21, (m, k)).astype(np.float32)
    b = rng.integers(-20, 21, (k, n)).astype(np.float32)
    acc_ref = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(acc_ref).max() < 2**24
    bias = rng.integers(-5000, 5000, n).astype(np.int64)
    mult = rng.integers(2**30, 2**31 - 1, n).astype(np.int64)
    left = np.zeros(n, np.int64)
    right = rng.integers(8, 14, n).astype(np.int64)
    zp, lo, hi = (-3, -128, 127) if signed else (120, 0, 255)
    tables = [t.ctypes.data for t in (bias, mult, left, right)]
    dtype = np.int8 if signed else np.uint8
    exact = acc_ref.astype(np.float32)
    want = np.empty((m, n), dtype)
    assert (
        native.LIB.mk_requant_f32(exact.ctypes.data, m, n, *tables, zp, lo, hi, signed, want.ctypes.data) == 0
    )
    w = _fast.GemmWeights(b)

    def run() -> tuple[np.ndarray, np.ndarray]:
        acc, y = np.empty((m, n), np.float32), np.empty((m, n), dtype)
        status = native.LIB.mk_gemm_packed_requant_f32(
            a.ctypes.data, w.panels_ptr, acc.ctypes.data, m, n, k, *tables, zp, lo, hi, signed, y.ctypes.data
        )
        assert status == 0
        return acc, y

    # The same GEMM on 8-bit rows centred by the kernel (a pointwise convolution's input).
    zp_x = -10 if signed else 100
    x8 = (a + zp_x).astype(dtype)

    def run_q8() -> tuple[np.ndarray, np.ndarray]:
        acc, y = np.empty((m, n), np.float32), np.empty((m, n), dtype)
        status = native.LIB.mk_gemm_packed_requant_q8(
            x8.ctypes.data, signed, zp_x, w.panels_ptr, acc.ctypes.data, m, n, k, *tables, zp, lo, hi, signed,
            y.ctypes.data,
        )  # fmt: skip
        assert status == 0
        return acc, y

    for threads in (1, 2):
        for fn in (run, run_q8):
            acc, y = _with_threads(threads, fn)
            np.testing.assert_array_equal(acc, exact)
            np.testing.assert_array_equal(y, want)


@needs_native
def test_depthwise_and_patches_do_not_depend_on_the_thread_count(rng):
    x = rand(rng, 1, 56, 56, 64, lo=-2, hi=2)
    wt, bias = rand(rng, 3, 3, 64), rand(rng, 64)
    g = np.array([1, 56, 56, 64, 3, 3, 2, 2, 1, 1, 0, 0, 28, 28], np.int32)  # stride 2, pad bottom/right

    def run() -> tuple[np.ndarray, np.ndarray]:
        y = np.empty((1, 28, 28, 64), np.float32)
        native.LIB.mk_depthwise_f32(
            x.ctypes.data, g.ctypes.data, 1, wt.ctypes.data, bias.ctypes.data, 0.0, 6.0, y.ctypes.data
        )
        cols = np.empty((28 * 28, 9 * 64), np.float32)
        native.LIB.mk_im2col_f32(x.ctypes.data, g.ctypes.data, cols.ctypes.data)
        return y, cols

    y1, c1 = _with_threads(1, run)
    y2, c2 = _with_threads(2, run)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(c1, c2)
    padded = np.pad(x[0].astype(np.float64), ((0, 1), (0, 1), (0, 0)))
    ref = np.zeros((28, 28, 64))
    for ky in range(3):
        for kx in range(3):
            ref += padded[ky : ky + 56 : 2, kx : kx + 56 : 2] * wt[ky, kx]
    np.testing.assert_allclose(y1[0], np.clip(ref + bias, 0, 6), rtol=1e-5, atol=1e-5)


@needs_native
def test_two_callers_share_the_pool(rng):
    """Two threads call the split GEMM at the same time, many times: each result is its own input's."""
    m, k, n = 196, 256, 256
    inputs = [rand(rng, m, k) for _ in range(2)]
    b, bias = rand(rng, k, n), rand(rng, n)
    w = _fast.GemmWeights(b)
    inf = float("inf")
    want = [_with_threads(1, lambda a=a: _packed_gemm(a, w, bias, -inf, inf)) for a in inputs]
    errors: list[str] = []
    start = threading.Barrier(2)

    def worker(i: int) -> None:
        start.wait()
        for r in range(50):
            if not np.array_equal(_packed_gemm(inputs[i], w, bias, -inf, inf), want[i]):
                errors.append(f"caller {i}, call {r}: wrong result")
                return

    before = native.threads()
    native.set_threads(2)
    try:
        callers = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(timeout=60)
    finally:
        native.set_threads(before)
    assert not any(t.is_alive() for t in callers)
    assert errors == []


@needs_native
@pytest.mark.parametrize("stride, pad, signed", [(1, 1, 0), (2, 0, 1)])
def test_quantized_depthwise_is_exact_at_any_thread_count(rng, stride, pad, signed):
    """The 8-bit depthwise's integer path: the exact integer sums (int64 reference), requantized as
    mk_requant_f32 does, with one thread or two."""
    h, c, k = 40, 40, 3  # output rows of 40 and 20 pixels: blocks of four, edge pixels; 16 + 16 + 8 channels
    o = (h + 2 * pad - k) // stride + 1
    dtype, zp_x = (np.int8, -5) if signed else (np.uint8, 130)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, h, h, c)).astype(dtype)
    wt = rng.integers(-127, 128, (k, k, c)).astype(np.float32)
    g = np.array([1, h, h, c, k, k, stride, stride, 1, 1, pad, pad, o, o], np.int32)
    xc = np.pad(x[0].astype(np.int64) - zp_x, ((pad, pad), (pad, pad), (0, 0)))
    acc = np.zeros((o, o, c), np.int64)
    for ky in range(k):
        for kx in range(k):
            acc += xc[ky : ky + stride * o : stride, kx : kx + stride * o : stride] * wt[ky, kx].astype(
                np.int64
            )
    bias = rng.integers(-3000, 3000, c).astype(np.int64)
    mult = rng.integers(2**30, 2**31 - 1, c).astype(np.int64)
    left, right = np.zeros(c, np.int64), rng.integers(10, 16, c).astype(np.int64)
    zp_y, lo, hi = (3, -128, 127) if signed else (128, 0, 255)
    tables = [t.ctypes.data for t in (bias, mult, left, right)]
    exact = acc.reshape(-1, c).astype(np.float32)
    want = np.empty((o * o, c), dtype)
    assert (
        native.LIB.mk_requant_f32(
            exact.ctypes.data, o * o, c, *tables, zp_y, lo, hi, signed, want.ctypes.data
        )
        == 0
    )

    packed = _fast.DepthwiseQ8Weights(wt)

    def run() -> np.ndarray:
        y = np.empty((1, o, o, c), dtype)
        status = native.LIB.mk_depthwise_q8(
            x.ctypes.data,
            signed,
            zp_x,
            g.ctypes.data,
            1,
            packed.ptr,
            *tables,
            zp_y,
            lo,
            hi,
            y.ctypes.data,
        )
        assert status == 0
        return y

    for threads in (1, 2):
        np.testing.assert_array_equal(_with_threads(threads, run).reshape(-1, c), want)


@needs_native
@pytest.mark.parametrize("m", [1, 3])
def test_fully_connected_on_few_rows_does_not_depend_on_the_thread_count(rng, m):
    """A classifier layer on one or a few vectors (weights streamed once, split by columns)."""
    k, n = 1024, 1001
    a, b, bias = rand(rng, m, k), rand(rng, k, n), rand(rng, n)

    def run() -> np.ndarray:
        out = np.empty((m, n), np.float32)
        status = native.LIB.mk_gemm_bias_act_f32(
            a.ctypes.data, b.ctypes.data, out.ctypes.data, m, n, k, bias.ctypes.data, -1.0, 1.0
        )
        assert status == 0
        return out

    one = _with_threads(1, run)
    np.testing.assert_array_equal(_with_threads(2, run), one)
    ref = np.clip(a.astype(np.float64) @ b.astype(np.float64) + bias, -1.0, 1.0)
    np.testing.assert_allclose(one, ref, rtol=1e-5, atol=k * 2e-7)


@needs_native
def test_idle_workers_stop_spinning():
    """After a split job the workers spin for the bounded window only, then sleep: a process that
    waits uses no CPU (the thread CPU clocks of the whole process barely move while it sleeps)."""
    import time

    m, k, n = 196, 256, 256
    a, bias = np.ones((m, k), np.float32), np.zeros(n, np.float32)
    w = _fast.GemmWeights(np.ones((k, n), np.float32))
    _with_threads(2, lambda: _packed_gemm(a, w, bias, -1.0, 1.0))  # the workers exist and ran
    time.sleep(0.05)  # past the spin window (100 us by default)
    before = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - before < 0.05


@needs_native
def test_short_jobs_split_over_spinning_workers_give_the_same_bits(rng):
    """With every job split (shift 12) and the workers kept spinning, small depthwise, patch and
    quantized GEMM calls give the results of one thread at two and three threads; the pool's
    counters count the jobs handed to it."""
    x = rand(rng, 1, 14, 14, 32, lo=-2, hi=2)
    wt, bias = rand(rng, 3, 3, 32), rand(rng, 32)
    g = np.array([1, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14], np.int32)
    a = rand(rng, 30, 40)
    w = _fast.GemmWeights(rand(rng, 40, 24))
    bias_n = rand(rng, 24)

    def run() -> list[np.ndarray]:
        out = []
        for _ in range(20):
            y = np.empty((1, 14, 14, 32), np.float32)
            native.LIB.mk_depthwise_f32(
                x.ctypes.data, g.ctypes.data, 1, wt.ctypes.data, bias.ctypes.data, 0.0, 6.0, y.ctypes.data
            )
            cols = np.empty((14 * 14, 9 * 32), np.float32)
            native.LIB.mk_im2col_f32(x.ctypes.data, g.ctypes.data, cols.ctypes.data)
            out += [y, cols, _packed_gemm(a, w, bias_n, -1.0, 1.0)]
        return out

    spin = native.LIB.mk_spin()
    before = native.pool_stats()
    assert set(before) == set(native.POOL_STATS) and min(before.values()) >= 0
    backoffs = native.pool_backoffs()
    one = _with_threads(1, run)
    native.LIB.mk_set_spin(100_000)
    native.set_split(12)
    try:
        big = np.ones((196, 256), np.float32)
        wbig = _fast.GemmWeights(np.ones((256, 256), np.float32))
        for threads in (2, 3):
            _with_threads(threads, lambda: _packed_gemm(big, wbig, np.zeros(256, np.float32), -1.0, 1.0))
            for got, want in zip(_with_threads(threads, run), one, strict=True):
                np.testing.assert_array_equal(got, want)
    finally:
        native.set_split(3)
        native.LIB.mk_set_spin(spin)
    after = native.pool_stats()
    assert all(after[k] >= before[k] for k in before)
    # The large GEMM wakes the workers (unless a stalled worker turned splitting off for a while).
    assert after["jobs"] > before["jobs"] or native.pool_backoffs() > backoffs


def _task_log_library():
    """The kernels' library through a handle of its own, with mk_parallel_for typed to take a ctypes
    callback as its task (so a test sees which tasks ran, on which thread)."""
    import ctypes

    lib = ctypes.CDLL(native.LIB._name)
    task = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
    lib.mk_parallel_for.argtypes = [ctypes.c_int, ctypes.c_int64, task, ctypes.c_void_p]
    lib.mk_parallel_for.restype = None
    return lib, task


@needs_native
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("ntasks", [1, 2, 3, 7, 64, 1000])
def test_every_task_runs_once_when_claimed_in_runs(threads, ntasks):
    """The pool claims tasks in guided runs (a share of what is left per claim): every task of a job
    runs exactly once, whatever the thread count and the number of tasks."""
    import time

    lib, task = _task_log_library()
    ran: list[int] = []
    lock = threading.Lock()

    def one(_ctx, t):
        time.sleep(0)  # long enough for a spinning worker to join
        with lock:
            ran.append(t)

    callback = task(one)
    spin = native.LIB.mk_spin()
    native.LIB.mk_set_spin(100_000)
    try:
        for _ in range(3):
            ran.clear()
            lib.mk_parallel_for(threads, ntasks, callback, None)
            assert sorted(ran) == list(range(ntasks))
    finally:
        native.LIB.mk_set_spin(spin)


@needs_native
def test_claims_are_runs_not_single_tasks():
    """With two threads a job of 64 tasks takes a dozen or so claims (16, 12, 9, ...), not 64: the
    tasks one thread runs come in contiguous runs, the first of them a quarter of the job."""
    lib, task = _task_log_library()
    order: list[tuple[int, int]] = []

    def one(_ctx, t):
        order.append((threading.get_native_id(), t))  # appends are atomic under the interpreter lock

    callback = task(one)
    lib.mk_parallel_for(2, 64, callback, None)
    assert sorted(t for _, t in order) == list(range(64))
    by_thread: dict[int, list[int]] = {}
    for tid, t in order:
        by_thread.setdefault(tid, []).append(t)
    runs = sum(1 + sum(1 for a, b in itertools.pairwise(ts) if b != a + 1) for ts in by_thread.values())
    assert runs <= 14
    first = next(tid for tid, t in order if t == 0)
    assert by_thread[first][:16] == list(range(16))


@needs_native
def test_rest_sends_spinning_workers_to_sleep():
    """`native.rest()` (an execution ended) makes idle workers sleep at once: with a 10 s spin window
    the process then uses no CPU while it waits, and the counters count the rest."""
    import time

    m, k, n = 196, 256, 256
    a, bias = np.ones((m, k), np.float32), np.zeros(n, np.float32)
    w = _fast.GemmWeights(np.ones((k, n), np.float32))
    spin = native.LIB.mk_spin()
    native.LIB.mk_set_spin(10_000_000)
    try:
        before = native.pool_stats()["rests"]
        _with_threads(2, lambda: _packed_gemm(a, w, bias, -1.0, 1.0))  # the workers ran, now spin
        native.rest()
        native.rest()  # nothing new to rest after: counted once
        assert native.pool_stats()["rests"] == before + 1
        time.sleep(0.01)
        cpu = time.process_time()
        time.sleep(0.3)
        assert time.process_time() - cpu < 0.05
    finally:
        native.LIB.mk_set_spin(spin)


@needs_native
def test_a_one_row_product_wakes_a_worker_only_for_large_weights(rng):
    """A GEMM on one row streams its weights once: with every worker asleep, 1 MB of weights is not
    worth a wake-up (it runs on the caller, counted as kept), 4 MB is (unless a stalled worker
    turned splitting off for a while); both give the one-thread result."""
    import time

    def product(k: int, n: int) -> tuple[np.ndarray, dict[str, int]]:
        a, b, bias = rand(rng, 1, k), rand(rng, k, n), rand(rng, n)
        out = np.empty((1, n), np.float32)

        def run() -> np.ndarray:
            native.LIB.mk_gemm_bias_act_f32(
                a.ctypes.data, b.ctypes.data, out.ctypes.data, 1, n, k, bias.ctypes.data, -9.0, 9.0
            )
            return out.copy()

        one = _with_threads(1, run)
        native.rest()
        time.sleep(0.01)  # every idle worker asleep
        before = native.pool_stats()
        two = _with_threads(2, run)
        after = native.pool_stats()
        np.testing.assert_array_equal(two, one)
        return two, {key: after[key] - before[key] for key in before}

    _with_threads(2, lambda: product(1024, 1024))  # the workers exist
    backoffs = native.pool_backoffs()
    time.sleep(0.11)  # past a back-off an earlier stall may have started (100 ms)
    _, small = product(512, 512)
    assert small["jobs"] == 0 and small["wakes"] == 0
    assert small["kept"] == 1 or native.pool_backoffs() > backoffs
    _, large = product(1024, 1024)
    assert large["jobs"] == 1 or native.pool_backoffs() > backoffs
