"""No copy of the weights beyond the model's own memory and the packed form the kernels read: GEMM
weights keep their panels only (the plain matrix made again from them, the same floats, when a
few-row GEMM or a fallback asks), and a prepared plan lets go of its record of packed arrays once
the compilation cache is written."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

from driver import native
from driver.executor import Plan
from driver.ops import _fast
from driver.variants import SampleAll
from tests.driver.bindkit import _inputs, _model
from tests.driver.warmkit import _bound_model, _reference

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")


@pytest.mark.parametrize("k, n", [(1, 1), (7, 16), (27, 33), (64, 1001)])
def test_gemm_weights_keep_only_panels_and_give_the_same_matrix_back(k, n) -> None:
    b = np.random.default_rng(k * n).standard_normal((k, n)).astype(np.float32)
    w = _fast.GemmWeights(b.copy())
    assert (w.k, w.n) == (k, n) and w._kn is None  # only the panels are kept
    assert w.panels.shape == (-(-n // _fast.PANEL), k, _fast.PANEL)
    got = w.array
    assert got.tobytes() == b.tobytes() and got.flags.c_contiguous
    assert w.array is got and w.ptr == got.ctypes.data  # made once, then kept


def test_the_matrix_is_made_once_when_threads_ask_together() -> None:
    b = np.arange(64 * 40, dtype=np.float32).reshape(64, 40)
    w = _fast.GemmWeights(b)
    seen: list[int] = []
    start = threading.Barrier(4)

    def ask() -> None:
        start.wait()
        seen.append(id(w.array))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 1 and w.array.tobytes() == b.tobytes()


def test_released_packed_arrays_are_held_by_nothing_and_results_do_not_change() -> None:
    kept, released = Plan(_bound_model()), Plan(_bound_model())
    refs = [weakref.ref(a) for a in released.packed.values()]
    names = released.packed_names
    assert refs and names == kept.packed_names
    released.release_packed()
    assert released.packed == {} and released.packed_names == names
    for x in _inputs(2):
        want = kept.run([x], checked=True)[0]
        got = released.run([x], checked=True)[0]
        assert got.tobytes() == want.tobytes()
        np.testing.assert_allclose(got, _reference(x), rtol=1e-4, atol=1e-4)
    gc.collect()
    # Every convolution here has at least 4 rows: its kernel reads the panels, never the matrix.
    assert all(r() is None for r in refs)


def test_a_few_row_gemm_after_release_reads_a_matrix_made_from_the_panels() -> None:
    kept, released = Plan(_model()), Plan(_model())  # its last convolution has one row
    released.release_packed()
    gc.collect()
    for x in _inputs(2):
        for g, w in zip(released.run([x], checked=True), kept.run([x], checked=True), strict=True):
            assert g.tobytes() == w.tobytes()


def test_prepare_model_keeps_no_record_of_packed_arrays() -> None:
    prepared = SampleAll().prepareModel(_bound_model())
    try:
        assert prepared.plan.packed == {} and len(prepared.plan.packed_names) == 2  # the two CONV_2D filters
    finally:
        prepared.close()


def test_a_plan_that_keeps_no_packed_arrays_lists_their_names_and_runs_the_same() -> None:
    kept, lean = Plan(_model()), Plan(_model(), keep_packed=False)
    assert lean.packed == {} and lean.packed_names == kept.packed_names and len(kept.packed_names) > 0
    for x in _inputs(2):
        for g, w in zip(lean.run([x], checked=True), kept.run([x], checked=True), strict=True):
            assert g.tobytes() == w.tobytes()
