"""BIDIRECTIONAL_SEQUENCE_LSTM against the float64 per-gate LSTM reference of `lstmkit`, run per direction.

Cross-linking is checked as the reference LSTM of the input and aux input concatenated (with the
weights concatenated likewise); parallel linking as a backward LSTM over the aux input. Float32
tolerance 1e-5 (absolute and relative, as the LSTM tests), float16 the CTS fp16 tolerance.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from driver.ops import _lstm_native
from mlts.hal.enums import OperandType, OperationType
from tests.driver.lstmkit import GATES, Case, make_case, reference
from tests.driver.opkit import Omit
from tests.driver.typedkit import NoValue, Scalar, Tensor, close, fails, out, prepare_op, run_op, tensor

T = OperandType
Op = OperationType


def _weights(case: Case, type_: T, omit=Omit) -> list:
    def t(v):
        return omit(type_) if v is None else tensor(v, type_)

    items = [case.wx.get(k) for k in GATES] + [case.wh.get(k) for k in GATES]
    items += [case.peep.get(k) for k in ("i", "f", "o")] + [case.b.get(k) for k in GATES]
    return [t(v) for v in [*items, case.proj, case.proj_b]]


def _ln(case: Case, type_: T) -> list:
    return [Omit(type_) if case.ln.get(k) is None else tensor(case.ln[k], type_) for k in GATES]


def bidi_inputs(
    fw: Case, bw: Case, type_: T, *, aux=None, fw_aux=None, bw_aux=None, merge=False, time_major=True
):
    def tm(a):
        return a if time_major else np.ascontiguousarray(a.swapaxes(0, 1))

    st = T.FLOAT16 if type_ == T.TENSOR_FLOAT16 else T.FLOAT32
    aux_w = []
    for side in (fw_aux, bw_aux):
        aux_w += [
            Omit(type_) if side is None or side.get(k) is None else tensor(side[k], type_) for k in GATES
        ]
    return [
        tensor(tm(fw.x), type_), *_weights(fw, type_), *_weights(bw, type_),
        tensor(fw.h0, type_), tensor(fw.c0, type_), tensor(bw.h0, type_), tensor(bw.c0, type_),
        Omit(type_) if aux is None else tensor(tm(aux), type_), *aux_w,
        fw.act, Scalar(fw.cell_clip, st), Scalar(fw.proj_clip, st), merge, time_major,
        *_ln(fw, type_), *_ln(bw, type_),
    ]  # fmt: skip


def _round(case: Case, dt) -> Case:
    """The case with every array rounded to dt (so the reference sees what the kernel sees)."""
    changes = {}
    for f in dataclasses.fields(case):
        v = getattr(case, f.name)
        if isinstance(v, np.ndarray):
            changes[f.name] = v.astype(dt).astype(np.float32)
        elif isinstance(v, dict):
            changes[f.name] = {k: a.astype(dt).astype(np.float32) for k, a in v.items()}
    return dataclasses.replace(case, **changes)


def _with_input(case: Case, x: np.ndarray, extra_w: dict | None = None) -> Case:
    """The case reading x; with extra_w, x carries extra features multiplied by extra_w per gate."""
    wx = (
        case.wx if extra_w is None else {k: np.concatenate([case.wx[k], extra_w[k]], axis=1) for k in case.wx}
    )
    return dataclasses.replace(case, x=x, wx=wx)


def expected(fw: Case, bw: Case, mode: str, aux, fw_aux, bw_aux):
    x = fw.x
    if mode == "cross":
        fx = _with_input(fw, np.concatenate([x, aux], axis=2), fw_aux)
        bx = _with_input(bw, np.concatenate([x, aux], axis=2)[::-1], bw_aux)
    else:
        fx = _with_input(fw, x)
        bx = _with_input(bw, (aux if mode == "parallel" else x)[::-1])
    f_out, f_h, f_c = reference(fx)
    b_out, b_h, b_c = reference(bx)
    return f_out, b_out[::-1], f_h, f_c, b_h, b_c


def _cases(mode: str, dt, seed: int = 0):
    rng = np.random.default_rng(seed)
    t, b, n, n_aux = 4, 2, 3, 2
    fw = make_case(rng, n, 4, b, t, cifg=True, peephole=True, cell_clip=3.0)
    bw = make_case(rng, n_aux if mode == "parallel" else n, 3, b, t, proj=2, proj_bias=True, layer_norm=True,
                   proj_clip=0.8, cell_clip=3.0)  # fmt: skip
    bw = dataclasses.replace(bw, x=fw.x)
    aux = rng.uniform(-1, 1, (t, b, n_aux)).astype(np.float32) if mode != "none" else None
    fw_aux = (
        {k: rng.uniform(-0.5, 0.5, (4, n_aux)).astype(np.float32) for k in GATES[1:]}
        if mode == "cross"
        else None
    )
    bw_aux = (
        {k: rng.uniform(-0.5, 0.5, (3, n_aux)).astype(np.float32) for k in GATES} if mode == "cross" else None
    )
    fw, bw = _round(fw, dt), _round(bw, dt)
    if aux is not None:
        aux = aux.astype(dt).astype(np.float32)
    for side in (fw_aux, bw_aux):
        for k in side or {}:
            side[k] = side[k].astype(dt).astype(np.float32)
    return fw, bw, aux, fw_aux, bw_aux


@pytest.mark.parametrize("type_", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16])
@pytest.mark.parametrize("mode", ["none", "cross", "parallel"])
@pytest.mark.parametrize(
    ("merge", "states", "time_major"), [(False, False, True), (True, True, False), (False, True, False)]
)
def test_against_reference(type_: T, mode: str, merge: bool, states: bool, time_major: bool) -> None:
    dt = np.float16 if type_ == T.TENSOR_FLOAT16 else np.float32
    fw, bw, aux, fw_aux, bw_aux = _cases(mode, dt)
    ins = bidi_inputs(
        fw, bw, type_, aux=aux, fw_aux=fw_aux, bw_aux=bw_aux, merge=merge, time_major=time_major
    )
    n_out = (1 if merge else 2) + (4 if states else 0)
    ys = run_op(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, [out(type_)] * n_out)
    f_out, b_out, f_h, f_c, b_h, b_c = expected(fw, bw, mode, aux, fw_aux, bw_aux)
    outs = [np.concatenate([f_out, b_out], axis=2)] if merge else [f_out, b_out]
    outs = [o if time_major else o.swapaxes(0, 1) for o in outs]
    if states:
        outs += [f_h, f_c, b_h, b_c]
    tol = {"atol": 1e-5, "rtol": 1e-5} if dt == np.float32 else {}
    assert len(ys) == len(outs)
    for y, want in zip(ys, outs, strict=True):
        close(y, want, dt, **tol)


def test_optional_inputs_omitted_by_the_request() -> None:
    """Peepholes, projection bias and layer norm given as request inputs without a value act as omitted."""
    fw, bw, *_ = _cases("none", np.float32, seed=3)
    bw_plain = dataclasses.replace(bw, proj_b=None, ln={})
    ins = bidi_inputs(fw, bw, T.TENSOR_FLOAT32)
    for k in (34, 57, 58, 59, 60):  # bw projection bias and layer-norm weights
        ins[k] = NoValue(T.TENSOR_FLOAT32, (0,))
    run, args = prepare_op(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, [out(T.TENSOR_FLOAT32)] * 2)
    for k in (34, 57, 58, 59, 60):
        args[k] = None
    y_fw, y_bw = run(args)
    f_out, b_out, *_ = expected(fw, bw_plain, "none", None, None, None)
    close(y_fw, f_out, np.float32, atol=1e-5, rtol=1e-5)
    close(y_bw, b_out, np.float32, atol=1e-5, rtol=1e-5)


def test_errors() -> None:
    f = T.TENSOR_FLOAT32
    fw, bw, aux, *_ = _cases("parallel", np.float32)
    ins = bidi_inputs(fw, bw, f, aux=aux)
    fails(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, [out(f)] * 3, "expected 2 or 6 outputs")
    fails(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins[:60], [out(f)] * 2, "expected 61 inputs")
    bad = list(ins)
    bad[39] = Omit(f)
    bad[41] = tensor(np.zeros((4, 2)), f)
    fails(Op.BIDIRECTIONAL_SEQUENCE_LSTM, bad, [out(f)] * 2, "aux_input) is omitted")
    bad = list(ins)
    bad[49] = Scalar(0.0, T.FLOAT16)
    fails(Op.BIDIRECTIONAL_SEQUENCE_LSTM, bad, [out(f)] * 2, "input 49")
    bad = list(ins)
    bad[19] = Omit(f)  # backward input-to-forget weights are required
    fails(Op.BIDIRECTIONAL_SEQUENCE_LSTM, bad, [out(f)] * 2, "backward cell")
    bad = list(ins)
    bad[3] = tensor(np.zeros((4, 5)), f)  # forward input-to-cell weights of the wrong width
    fails(Op.BIDIRECTIONAL_SEQUENCE_LSTM, bad, [out(f)] * 2, "forward cell")


@pytest.mark.skipif(not _lstm_native.available(), reason="compiled kernels not loaded")
@pytest.mark.parametrize("mode", ["none", "cross"])
def test_compiled_cells_equal_the_numpy_path(mode: str, monkeypatch) -> None:
    """Both directions in the compiled cell (constant weights, no layer norm; the backward one runs
    in reverse) against the NumPy steps: within 1e-6 (polynomial sigmoid and tanh, another order of
    the sums)."""
    rng = np.random.default_rng(21)
    t, b, n, n_aux = 5, 2, 6, 3
    fw = make_case(rng, n, 9, b, t, peephole=True)
    bw = dataclasses.replace(make_case(rng, n, 13, b, t, cifg=True, proj=5, proj_bias=True), x=fw.x)
    aux = rng.uniform(-1, 1, (t, b, n_aux)).astype(np.float32) if mode == "cross" else None
    fw_aux = (
        {k: rng.uniform(-0.5, 0.5, (9, n_aux)).astype(np.float32) for k in GATES} if aux is not None else None
    )
    bw_aux = (
        {k: rng.uniform(-0.5, 0.5, (13, n_aux)).astype(np.float32) for k in GATES[1:]}
        if aux is not None
        else None
    )
    ins = bidi_inputs(fw, bw, T.TENSOR_FLOAT32, aux=aux, fw_aux=fw_aux, bw_aux=bw_aux, time_major=False)
    for k in [*range(1, 35), *range(40, 48)]:  # the weights of both cells and the aux weights: constants
        if isinstance(ins[k], Tensor):
            ins[k] = dataclasses.replace(ins[k], const=True)
    made: list[bool] = []
    real = _lstm_native.fused_cell

    def spy(*args):
        cell = real(*args)
        made.append(cell is not None)
        return cell

    monkeypatch.setattr(_lstm_native, "fused_cell", spy)
    outs = [out(T.TENSOR_FLOAT32)] * 6
    fused = run_op(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    assert made == [True, True]
    monkeypatch.setattr(_lstm_native, "_CELL", None)
    plain = run_op(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    for got, want in zip(fused, plain, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
