"""Test helpers for the LSTM kernels: random cases, NNAPI operand lists, a float64 reference, ORT's LSTM.

A case holds the weights per gate ("i", "f", "g", "o") in NNAPI's form. The float64 reference is a
plain per-gate transcription of the NNAPI/TFLite float LSTM; it shares no code with the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from mlts.hal.enums import OperandType
from tests.driver.opkit import Const, Omit

GATES = ("i", "f", "g", "o")
F32T = OperandType.TENSOR_FLOAT32


@dataclass
class Case:
    """One LSTM: x is time-major [T, B, input_size]; dicts map gate name -> array (NNAPI layout)."""

    x: np.ndarray
    wx: dict[str, np.ndarray]
    wh: dict[str, np.ndarray]
    b: dict[str, np.ndarray]
    h0: np.ndarray
    c0: np.ndarray
    peep: dict[str, np.ndarray] = field(default_factory=dict)  # keys among i, f, o
    ln: dict[str, np.ndarray] = field(default_factory=dict)  # keys among i, f, g, o
    proj: np.ndarray | None = None  # [output_size, num_units]
    proj_b: np.ndarray | None = None
    act: int = 4
    cell_clip: float = 0.0
    proj_clip: float = 0.0

    @property
    def cifg(self) -> bool:
        return "i" not in self.wx


def make_case(
    rng: np.random.Generator,
    n: int,
    u: int,
    b: int,
    t: int,
    *,
    cifg: bool = False,
    peephole: bool = False,
    proj: int | None = None,
    proj_bias: bool = False,
    layer_norm: bool = False,
    zero_state: bool = False,
    **params: Any,
) -> Case:
    """Random weights scaled by 1/sqrt(fan-in) so pre-activations stay O(1), as in trained models."""
    m = proj or u

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.uniform(-1, 1, size=shape) * scale).astype(np.float32)

    gates = GATES[1:] if cifg else GATES
    sx, sh = 1 / np.sqrt(n), 1 / np.sqrt(m)
    case = Case(
        x=w(t, b, n, scale=2.0),
        wx={k: w(u, n, scale=sx) for k in gates},
        wh={k: w(u, m, scale=sh) for k in gates},
        b={k: w(u, scale=0.5) for k in gates},
        h0=np.zeros((b, m), np.float32) if zero_state else w(b, m),
        c0=np.zeros((b, u), np.float32) if zero_state else w(b, u, scale=2.0),
        **params,
    )
    if peephole:
        case.peep = {k: w(u, scale=0.5) for k in (("f", "o") if cifg else ("i", "f", "o"))}
    if layer_norm:
        case.ln = {k: w(u, scale=0.5) + np.float32(1) for k in gates}
    if proj:
        case.proj = w(m, u, scale=1 / np.sqrt(u))
        case.proj_b = w(m, scale=0.2) if proj_bias else None
    return case


# ------------------------------------------------------------ NNAPI operand lists


def _tensor(v: np.ndarray | None, const: bool) -> Any:
    if v is None:
        return Omit(F32T)
    return Const(v) if const else v


def middle_inputs(case: Case, h0: np.ndarray, c0: np.ndarray, const: bool = True) -> list[Any]:
    """NNAPI inputs 1..22 (weights as constants, or run-time tensors when not `const`)."""
    t = [_tensor(case.wx.get(k), const) for k in GATES]
    t += [_tensor(case.wh.get(k), const) for k in GATES]
    t += [_tensor(case.peep.get(k), const) for k in ("i", "f", "o")]
    t += [_tensor(case.b.get(k), const) for k in GATES]
    t += [_tensor(case.proj, const), _tensor(case.proj_b, const), h0, c0]
    return t + [case.act, float(case.cell_clip), float(case.proj_clip)]


def ln_inputs(case: Case, const: bool = True) -> list[Any]:
    return [_tensor(case.ln.get(k), const) for k in GATES]


def lstm_inputs(case: Case, x: np.ndarray, h: np.ndarray, c: np.ndarray, const: bool = True) -> list[Any]:
    """The 23 (27 with layer norm) inputs of LSTM for one step."""
    extra = ln_inputs(case, const) if case.ln else []
    return [x, *middle_inputs(case, h, c, const), *extra]


def seq_inputs(case: Case, time_major: bool, const: bool = True, ln_form: bool | None = None) -> list[Any]:
    """The 24 (28 with layer norm) inputs of UNIDIRECTIONAL_SEQUENCE_LSTM."""
    x = case.x if time_major else np.ascontiguousarray(case.x.swapaxes(0, 1))
    long_form = bool(case.ln) if ln_form is None else ln_form
    extra = ln_inputs(case, const) if long_form else []
    return [x, *middle_inputs(case, case.h0, case.c0, const), time_major, *extra]


# ------------------------------------------------------------ float64 reference


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def act64(code: int, v: np.ndarray) -> np.ndarray:
    """NNAPI's LSTM activation codes: 0 none, 1 relu, 3 relu6, 4 tanh, 6 sigmoid."""
    return {0: lambda a: a, 1: lambda a: np.maximum(a, 0), 3: lambda a: np.clip(a, 0, 6), 4: np.tanh}.get(
        code, _sigmoid
    )(v)


def _norm(v: np.ndarray) -> np.ndarray:
    mean = v.mean(axis=1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=1, keepdims=True)
    return (v - mean) / np.sqrt(var + 1e-8)


def _f64(per_gate: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in per_gate.items()}


def _finish(pre: dict, b: dict, ln: dict, k: str) -> np.ndarray:
    """Gate k's pre-activation with its bias, layer-normalised first when there are ln weights."""
    return _norm(pre[k]) * ln[k] + b[k] if ln else pre[k] + b[k]


def reference(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(outputs [T, B, m], last h, last c) in float64, one gate at a time."""
    wx, wh, b, peep, ln = (_f64(d) for d in (case.wx, case.wh, case.b, case.peep, case.ln))
    h, c = case.h0.astype(np.float64), case.c0.astype(np.float64)
    ys = []
    for x in case.x.astype(np.float64):
        pre = {k: x @ wx[k].T + h @ wh[k].T for k in wx}
        for k in ("i", "f"):
            if k in peep:
                pre[k] = pre[k] + peep[k] * c
        f = _sigmoid(_finish(pre, b, ln, "f"))
        i = 1.0 - f if case.cifg else _sigmoid(_finish(pre, b, ln, "i"))
        g = act64(case.act, _finish(pre, b, ln, "g"))
        c = f * c + i * g
        if case.cell_clip > 0:
            c = np.clip(c, -case.cell_clip, case.cell_clip)
        if "o" in peep:
            pre["o"] = pre["o"] + peep["o"] * c
        o = _sigmoid(_finish(pre, b, ln, "o"))
        h = o * act64(case.act, c)
        if case.proj is not None:
            h = h @ case.proj.astype(np.float64).T
            if case.proj_b is not None:
                h = h + case.proj_b
            if case.proj_clip > 0:
                h = np.clip(h, -case.proj_clip, case.proj_clip)
        ys.append(h)
    return np.stack(ys), h, c


# ------------------------------------------------------------ onnxruntime


ONNX_ORDER = ("i", "o", "f", "g")  # ONNX packs gates as i, o, f, c


def onnx_inputs(case: Case) -> dict[str, np.ndarray]:
    """The case re-laid for ONNX LSTM: W [1,4H,in], R [1,4H,H], B [1,8H] (bias in the W half), P [1,3H]."""
    u = case.b["f"].shape[0]
    feeds = {
        "X": case.x,
        "W": np.concatenate([case.wx[k] for k in ONNX_ORDER])[None],
        "R": np.concatenate([case.wh[k] for k in ONNX_ORDER])[None],
        "B": np.concatenate([*(case.b[k] for k in ONNX_ORDER), np.zeros(4 * u, np.float32)])[None],
        "initial_h": case.h0[None],
        "initial_c": case.c0[None],
    }
    if case.peep:
        feeds["P"] = np.concatenate([case.peep[k] for k in ("i", "o", "f")])[None]
    return feeds


def ort_lstm(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Y [T, B, H], Y_h [B, H], Y_c [B, H]) from onnxruntime's LSTM (opset 14, IR 10)."""
    feeds = onnx_inputs(case)
    u = case.b["f"].shape[0]
    names = ["X", "W", "R", "B", "", "initial_h", "initial_c", "P" if "P" in feeds else ""]
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], hidden_size=u)
    graph = helper.make_graph(
        [node],
        "lstm",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("Y", "Y_h", "Y_c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y, y_h, y_c = sess.run(None, feeds)
    return y[:, 0], y_h[0], y_c[0]
