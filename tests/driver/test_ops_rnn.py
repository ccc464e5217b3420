"""RNN, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN against a float64 NumPy reference.

The reference is a plain per-step loop written from NNAPI's operation docs; float16 cases feed the
reference the same float16 inputs and compare with the fp16 tolerance (5 * 2^-10). Float32 cases use
1e-5 absolute and relative: a few steps of products of up to 8 terms stay far inside that.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlts.hal.enums import OperandType, OperationType
from tests.driver.opkit import Omit
from tests.driver.typedkit import NoValue, close, fails, out, prepare_op, run_op, tensor

T = OperandType
Op = OperationType
FLOATS = [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16]
ACTS = {
    0: lambda v: v,
    1: lambda v: np.maximum(v, 0),
    2: lambda v: np.clip(v, -1, 1),
    3: lambda v: np.clip(v, 0, 6),
    4: np.tanh,
    6: lambda v: 1 / (1 + np.exp(-v)),
}
SCALAR_TOL = {T.TENSOR_FLOAT32: (1e-5, 1e-5), T.TENSOR_FLOAT16: (5 * 2.0**-10, 5 * 2.0**-10)}


def ref_step(x, h, w, r, b, act, aux=None, w_aux=None):
    y = x.astype(np.float64) @ w.astype(np.float64).T + h.astype(np.float64) @ r.astype(np.float64).T + b
    if aux is not None:
        y = y + aux.astype(np.float64) @ w_aux.astype(np.float64).T
    return ACTS[act](y)


def ref_sequence(x, h, w, r, b, act, reverse=False, aux=None, w_aux=None):
    """Time-major reference: outputs [T, B, units] and the last state."""
    outs = np.zeros((x.shape[0], x.shape[1], w.shape[0]))
    order = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in order:
        h = ref_step(x[t], h, w, r, b, act, None if aux is None else aux[t], w_aux)
        outs[t] = h
    return outs, h


def _cell(rng, dt, units, size, batch):
    w = rng.uniform(-0.5, 0.5, (units, size)).astype(dt)
    r = rng.uniform(-0.5, 0.5, (units, units)).astype(dt)
    b = rng.uniform(-0.5, 0.5, units).astype(dt)
    h = rng.uniform(-1, 1, (batch, units)).astype(dt)
    return w, r, b, h


@pytest.mark.parametrize("type_", FLOATS)
@pytest.mark.parametrize("act", [0, 1, 2, 3, 4, 6])
@pytest.mark.parametrize("const", [False, True])
def test_rnn_step(type_: T, act: int, const: bool) -> None:
    dt = np.float16 if type_ == T.TENSOR_FLOAT16 else np.float32
    rng = np.random.default_rng(act)
    x = rng.uniform(-2, 2, (3, 4)).astype(dt)
    w, r, b, h = _cell(rng, dt, 5, 4, 3)
    state, y = run_op(
        Op.RNN,
        [
            tensor(x, type_),
            tensor(w, type_, const=const),
            tensor(r, type_, const=const),
            tensor(b, type_, const=const),
            tensor(h, type_),
            act,
        ],
        [out(type_, (3, 5)), out(type_, (3, 5))],
    )
    want = ref_step(x, h, w, r, b, act)
    close(y, want, dt)
    np.testing.assert_array_equal(state, y)


def test_rnn_hand_computed() -> None:
    """x=[1,2], W=[[1,0],[0,1],[1,1]], R=I*0.5, b=[0,-5,1], h=[2,2,2], RELU: [1+1, 2+1-5, 3+1+1] -> [2, 0, 5]."""
    w = np.array([[1, 0], [0, 1], [1, 1]], np.float32)
    r = np.eye(3, dtype=np.float32) * 0.5
    state, y = run_op(
        Op.RNN,
        [
            tensor([[1, 2]], T.TENSOR_FLOAT32),
            tensor(w, T.TENSOR_FLOAT32),
            tensor(r, T.TENSOR_FLOAT32),
            tensor([0, -5, 1], T.TENSOR_FLOAT32),
            tensor([[2, 2, 2]], T.TENSOR_FLOAT32),
            1,
        ],
        [out(T.TENSOR_FLOAT32), out(T.TENSOR_FLOAT32)],
    )
    np.testing.assert_array_equal(y, [[2, 0, 5]])


def test_rnn_errors() -> None:
    f = T.TENSOR_FLOAT32
    good = [
        tensor(np.zeros((1, 2)), f),
        tensor(np.zeros((3, 2)), f),
        tensor(np.zeros((3, 3)), f),
        tensor(np.zeros(3), f),
        tensor(np.zeros((1, 3)), f),
        0,
    ]
    outs = [out(f), out(f)]
    fails(Op.RNN, [*good[:3], tensor(np.zeros(4), f), *good[4:]], outs, "num_units disagrees")
    fails(Op.RNN, [*good[:5], 7], outs, "fused activation is 7")
    fails(Op.RNN, [tensor(np.zeros((1, 2)), T.TENSOR_FLOAT16), *good[1:]], outs, "input 1")
    fails(Op.RNN, good, [out(f), out(T.TENSOR_FLOAT16)], "output 1")
    fails(Op.RNN, [tensor(np.zeros((1, 5)), f), *good[1:]], outs, "input_size disagrees")
    fails(Op.RNN, good, [out(f, (1, 4)), out(f)], "output 0 has shape")
    # A run-time input whose shape contradicts the weights fails the run.
    run, args = prepare_op(Op.RNN, [NoValue(f), *good[1:]], outs)
    args[0] = np.zeros((1, 4), np.float32)
    with pytest.raises(Exception, match="input 0"):
        run(args)


@pytest.mark.parametrize("type_", FLOATS)
@pytest.mark.parametrize("time_major", [0, 1])
@pytest.mark.parametrize("n_out", [1, 2])
def test_unidirectional_sequence_rnn(type_: T, time_major: int, n_out: int) -> None:
    dt = np.float16 if type_ == T.TENSOR_FLOAT16 else np.float32
    rng = np.random.default_rng(10 + time_major)
    steps, batch, size, units = 4, 2, 3, 5
    x = rng.uniform(-1, 1, (steps, batch, size)).astype(dt)
    w, r, b, h = _cell(rng, dt, units, size, batch)
    x_in = x if time_major else np.ascontiguousarray(x.swapaxes(0, 1))
    outs = run_op(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        [
            tensor(x_in, type_),
            tensor(w, type_),
            tensor(r, type_),
            tensor(b, type_),
            tensor(h, type_),
            2,
            time_major,
        ],
        [out(type_)] * n_out,
    )
    want, last = ref_sequence(x, h, w, r, b, 2)
    want = want if time_major else want.swapaxes(0, 1)
    close(outs[0], want, dt)
    if n_out == 2:
        close(outs[1], last, dt)


def test_unidirectional_sequence_rnn_errors() -> None:
    f = T.TENSOR_FLOAT32
    args = [
        tensor(np.zeros((2, 1, 2)), f),
        tensor(np.zeros((3, 2)), f),
        tensor(np.zeros((3, 3)), f),
        tensor(np.zeros(3), f),
        tensor(np.zeros((1, 3)), f),
        0,
        1,
    ]
    fails(Op.UNIDIRECTIONAL_SEQUENCE_RNN, [*args[:6], 2], [out(f)], "time_major) is 2")
    fails(Op.UNIDIRECTIONAL_SEQUENCE_RNN, args, [out(f)] * 3, "1 or 2 outputs")
    fails(
        Op.UNIDIRECTIONAL_SEQUENCE_RNN,
        [*args[:4], tensor(np.zeros((2, 3)), f), 0, 1],
        [out(f)],
        "batch disagrees",
    )
    fails(Op.UNIDIRECTIONAL_SEQUENCE_RNN, [tensor(np.zeros((2, 2)), f), *args[1:]], [out(f)], "rank 2")


@pytest.mark.parametrize("type_", FLOATS)
@pytest.mark.parametrize("mode", ["none", "cross", "parallel"])
@pytest.mark.parametrize(("merge", "state"), [(False, False), (True, False), (False, True), (True, True)])
def test_bidirectional_sequence_rnn(type_: T, mode: str, merge: bool, state: bool) -> None:
    dt = np.float16 if type_ == T.TENSOR_FLOAT16 else np.float32
    rng = np.random.default_rng(20)
    steps, batch, size, aux_size, fw_units, bw_units = 3, 2, 3, 2, 4, 3
    x = rng.uniform(-1, 1, (steps, batch, size)).astype(dt)
    aux = rng.uniform(-1, 1, (steps, batch, aux_size)).astype(dt)
    fw = _cell(rng, dt, fw_units, size, batch)
    bw = _cell(rng, dt, bw_units, aux_size if mode == "parallel" else size, batch)
    fw_aux = rng.uniform(-0.5, 0.5, (fw_units, aux_size)).astype(dt)
    bw_aux = rng.uniform(-0.5, 0.5, (bw_units, aux_size)).astype(dt)
    for time_major in (True, False):

        def tm(a, time_major=time_major):
            return a if time_major else np.ascontiguousarray(a.swapaxes(0, 1))

        omit = NoValue(type_)
        aux_ops = {
            "none": [omit, omit, omit],
            "cross": [tensor(tm(aux), type_), tensor(fw_aux, type_), tensor(bw_aux, type_)],
            "parallel": [tensor(tm(aux), type_), omit, omit],
        }[mode]
        inputs = [
            tensor(tm(x), type_),
            *(tensor(a, type_) for a in fw),
            *(tensor(a, type_) for a in bw),
            *aux_ops,
            3,
            time_major,
            merge,
        ]

        n_out = (1 if merge else 2) + (2 if state else 0)
        infos = [_omitted(v) for v in inputs]
        ys = run_op(Op.BIDIRECTIONAL_SEQUENCE_RNN, infos, [out(type_)] * n_out)
        cross = mode == "cross"
        fw_want, fw_last = ref_sequence(x, fw[3], *fw[:3], 3, aux=aux if cross else None, w_aux=fw_aux)
        bw_x = aux if mode == "parallel" else x
        bw_want, bw_last = ref_sequence(
            bw_x, bw[3], *bw[:3], 3, reverse=True, aux=aux if cross else None, w_aux=bw_aux
        )
        wants = [np.concatenate([fw_want, bw_want], axis=2)] if merge else [fw_want, bw_want]
        wants = [tm(w) for w in wants] + ([fw_last, bw_last] if state else [])
        assert len(ys) == len(wants)
        for y, want in zip(ys, wants, strict=True):
            close(y, want, dt)


def _omitted(v):
    """NoValue stands for an omitted operand here (NO_VALUE), as the kernel sees it at prepare."""
    return Omit(v.type) if isinstance(v, NoValue) else v


def test_bidirectional_sequence_rnn_errors() -> None:
    f = T.TENSOR_FLOAT32
    cell = [
        tensor(np.zeros((2, 2)), f),
        tensor(np.zeros((2, 2)), f),
        tensor(np.zeros(2), f),
        tensor(np.zeros((1, 2)), f),
    ]
    base = [tensor(np.zeros((3, 1, 2)), f), *cell, *cell]
    fails(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        [*base, Omit(f), tensor(np.zeros((2, 2)), f), Omit(f), 0, True, False],
        [out(f)] * 2,
        "presence",
    )
    fails(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        [*base, Omit(f), Omit(f), Omit(f), 0, True, True],
        [out(f)] * 2,
        "expected 1 or 3 outputs",
    )
    fails(
        Op.BIDIRECTIONAL_SEQUENCE_RNN, [*base, Omit(f), Omit(f), Omit(f), 0, 1, True], [out(f)], "time_major"
    )
    fails(
        Op.BIDIRECTIONAL_SEQUENCE_RNN,
        [*base[:4], Omit(f), *base[5:], Omit(f), Omit(f), Omit(f), 0, True, True],
        [out(f)],
        "required but omitted",
    )


def test_bidirectional_sequence_rnn_aux_inputs_omitted_by_the_request() -> None:
    """aux_input and aux weights as request inputs without a value: no linking, as if omitted."""
    f = T.TENSOR_FLOAT32
    rng = np.random.default_rng(30)
    x = rng.uniform(-1, 1, (3, 2, 3)).astype(np.float32)
    fw, bw = _cell(rng, np.float32, 4, 3, 2), _cell(rng, np.float32, 2, 3, 2)
    ins = [tensor(x, f), *(tensor(a, f) for a in fw), *(tensor(a, f) for a in bw), NoValue(f), NoValue(f),
           NoValue(f), 0, True, False]  # fmt: skip
    run, args = prepare_op(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [out(f), out(f)])
    y_fw, y_bw = run(args)
    close(y_fw, ref_sequence(x, fw[3], *fw[:3], 0)[0], np.float32)
    close(y_bw, ref_sequence(x, bw[3], *bw[:3], 0, reverse=True)[0], np.float32)
    args[10] = rng.uniform(-1, 1, (4, 2)).astype(np.float32)  # fw aux weights without an aux input
    with pytest.raises(Exception, match="presence"):
        run(args)
