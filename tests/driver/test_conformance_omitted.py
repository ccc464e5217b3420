"""Omitted operands as NeuralNetworks.h defines them: an IF condition may not be omitted; the projection
weights of BIDIRECTIONAL_SEQUENCE_LSTM may, in either direction (checked against float64 from the spec)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperationType
from mlts.hal.enums import OperandLifeTime as L
from mlts.hal.enums import OperandType as T
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.hal.validate import validate_model
from tests.driver import cfkit

F = T.TENSOR_FLOAT32


def _request(
    values: list[np.ndarray | None], out_bytes: list[int]
) -> tuple[Request, SharedMemory, list[int]]:
    """Inputs then outputs in one pool; None is an input without a value (hasNoValue)."""
    sizes = [0 if v is None else v.nbytes for v in values] + out_bytes
    offsets, end = [], 0
    for n in sizes:
        offsets.append(end)
        end += -(-max(n, 1) // 64) * 64
    pool = SharedMemory.create(end)
    ins = []
    for v, off in zip(values, offsets, strict=False):
        if v is None:
            ins.append(RequestArgument(True, DataLocation(0, 0, 0), ()))
            continue
        np.frombuffer(pool.buffer, v.dtype, v.size, off)[:] = v.ravel()
        ins.append(RequestArgument(False, DataLocation(0, off, v.nbytes), v.shape))
    outs = tuple(
        RequestArgument(False, DataLocation(0, off, n), ())
        for off, n in zip(offsets[len(values) :], out_bytes, strict=True)
    )
    return Request(tuple(ins), outs, (pool,)), pool, offsets[len(values) :]


# ---------------------------------------------------------------- IF


def test_an_if_whose_condition_is_omitted_is_an_invalid_model():
    model = cfkit.if_model()
    main = model.main
    cond = dataclasses.replace(main.operands[0], lifetime=L.NO_VALUE, location=DataLocation())
    operands = (cond, *main.operands[1:])
    broken = dataclasses.replace(
        model, main=dataclasses.replace(main, operands=operands, input_indexes=main.input_indexes[1:])
    )
    for check in (validate_model, SampleAll().prepareModel):
        with pytest.raises(HalError) as e:
            check(broken)
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT
        assert "condition" in e.value.message and "omitted (NO_VALUE)" in e.value.message


def test_an_if_whose_condition_the_request_leaves_without_a_value_fails_to_run():
    prepared = SampleAll().prepareModel(cfkit.if_model())
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    request, pool, _ = _request([None, a, a], [24])
    with pytest.raises(HalError) as e:
        prepared.executeSynchronously(request)
    assert e.value.status == ErrorStatus.GENERAL_FAILURE and "IF condition has no value" in e.value.message
    # With a value it runs (then branch: a + b).
    request, pool2, offs = _request([np.array([True]), a, a], [24])
    prepared.executeSynchronously(request)
    np.testing.assert_array_equal(np.frombuffer(pool2.buffer, np.float32, 6, offs[0]).reshape(2, 3), a + a)
    pool.close()
    pool2.close()


# ---------------------------------------------------------------- BIDIRECTIONAL_SEQUENCE_LSTM


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_reference(x, w, h, c, reverse):
    """float64 LSTM over time-major x (NeuralNetworks.h, LSTM): tanh activation, no clipping; h is
    projected when w["proj"] is given (the projection bias omitted)."""
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    out = [None] * x.shape[0]
    for t in steps:
        z = {g: x[t] @ w["wx"][g].T + h @ w["wh"][g].T + w["b"][g] for g in "ifco"}
        c = _sigmoid(z["f"]) * c + _sigmoid(z["i"]) * np.tanh(z["c"])
        h = _sigmoid(z["o"]) * np.tanh(c)
        if w["proj"] is not None:
            h = h @ w["proj"].T
        out[t] = h
    return np.stack(out), h, c


def _direction(rng, n: int, u: int, proj: int | None) -> dict:
    m = proj or u
    return {
        "wx": {g: rng.uniform(-0.6, 0.6, (u, n)) for g in "ifco"},
        "wh": {g: rng.uniform(-0.6, 0.6, (u, m)) for g in "ifco"},
        "b": {g: rng.uniform(-0.3, 0.3, u) for g in "ifco"},
        "proj": None if proj is None else rng.uniform(-0.6, 0.6, (proj, u)),
        "h0": rng.uniform(-1, 1, (2, m)),
        "c0": rng.uniform(-1, 1, (2, u)),
    }


def _bidi_model(fw: dict, bw: dict, x: np.ndarray, omit: str):
    """The operation with states as model inputs; an absent projection omitted as `omit` says:
    "no-value" (a NO_VALUE operand), "no-value-dims" (one declaring dims), "request" (a model input the
    request leaves without a value). Returns (model, input values)."""
    b = ModelBuilder()
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    ins = [b.add_input(F, x.shape)]
    values: list[np.ndarray | None] = [f32(x)]

    def absent(dims) -> int:
        if omit == "request":
            values.append(None)
            return b.add_input(F, dims)
        return b.add_omitted(F, dims if omit == "no-value-dims" else ())

    for d in (fw, bw):
        u = d["b"]["i"].shape[0]
        ins += [b.add_constant(f32(d["wx"][g])) for g in "ifco"]
        ins += [b.add_constant(f32(d["wh"][g])) for g in "ifco"]
        ins += [b.add_omitted(F) for _ in range(3)]  # no peepholes
        ins += [b.add_constant(f32(d["b"][g])) for g in "ifco"]
        ins.append(absent((u, u)) if d["proj"] is None else b.add_constant(f32(d["proj"])))
        ins.append(b.add_omitted(F))  # no projection bias
    for d in (fw, bw):
        for key in ("h0", "c0"):
            ins.append(b.add_input(F, d[key].shape))
            values.append(f32(d[key]))
    ins += [b.add_omitted(F) for _ in range(9)]  # no aux input or weights
    ins += [b.add_int32(4), b.add_float32(0.0), b.add_float32(0.0), b.add_bool(False), b.add_bool(True)]
    ins += [b.add_omitted(F) for _ in range(8)]  # no layer norm
    t, batch = x.shape[:2]
    fm, bm = fw["h0"].shape[1], bw["h0"].shape[1]
    outs = [b.add_operand(F, (t, batch, fm)), b.add_operand(F, (t, batch, bm))]
    outs += [b.add_operand(F, d[k].shape) for d in (fw, bw) for k in ("h0", "c0")]
    b.add_operation(OperationType.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    b.mark_outputs(outs)
    # Model inputs in the order they were added: x, then (request-omitted projections), then states.
    return b.build(), values


@pytest.mark.parametrize("omit", ["no-value", "no-value-dims", "request"])
@pytest.mark.parametrize("fw_proj, bw_proj", [(None, None), (None, 2), (3, None)])
def test_bidirectional_lstm_without_projection_weights(omit, fw_proj, bw_proj):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (4, 2, 3))
    fw, bw = _direction(rng, 3, 4, fw_proj), _direction(rng, 3, 5, bw_proj)
    model, values = _bidi_model(fw, bw, x, omit)
    validate_model(model)
    prepared = SampleAll().prepareModel(model)
    f_out, f_h, f_c = _lstm_reference(x, fw, fw["h0"], fw["c0"], False)
    b_out, b_h, b_c = _lstm_reference(x, bw, bw["h0"], bw["c0"], True)
    want = [f_out, b_out, f_h, f_c, b_h, b_c]
    request, pool, offsets = _request(values, [w.size * 4 for w in want])
    result = prepared.executeSynchronously(request)
    for k, (w, off) in enumerate(zip(want, offsets, strict=True)):
        assert result.output_shapes[k].dimensions == w.shape
        got = np.frombuffer(pool.buffer, np.float32, w.size, off).reshape(w.shape)
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")
    pool.close()
