"""ONNX GRU -> its equations unrolled (FULLY_CONNECTED, ADD, LOGISTIC, TANH, MUL, SUB per step).

Checked against a float64 NumPy evaluation of the ONNX specification's equations (written here, for
every direction, layout and linear_before_reset) and, for layout 0 (onnxruntime has no layout 1),
against onnxruntime. Tolerance |driver - reference| <= 1e-5 + 1e-5*|reference|, as for LSTM: float32
arithmetic in a different order over up to 8 recurrent steps of values of order 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.hal.enums import OperationType
from tests.convert._util import assert_close, error_of, run_converted, run_ort

ATOL = RTOL = 1e-5
N = helper.make_node


@dataclass(frozen=True)
class Gru:
    steps: int
    batch: int
    inputs: int
    units: int
    direction: str = "forward"
    lbr: int = 0
    layout: int = 0
    init: str = "none"  # "none", "input" or "const"
    bias: bool = True
    acts: tuple[str, str] = ("Sigmoid", "Tanh")
    outputs: tuple[str, ...] = ("Y", "Y_h")
    seq_lens: bool = False
    opset: int = 14

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def arrays(c: Gru) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(c.steps * 100 + c.units)
    d, h, i = c.dirs, c.units, c.inputs
    return {
        "W": (rng.standard_normal((d, 3 * h, i)) / np.sqrt(i)).astype(np.float32),
        "R": (rng.standard_normal((d, 3 * h, h)) / np.sqrt(h)).astype(np.float32),
        "B": (rng.standard_normal((d, 6 * h)) * 0.5).astype(np.float32),
        "X": rng.standard_normal((c.steps, c.batch, i)).astype(np.float32),
        "H0": rng.standard_normal((d, c.batch, h)).astype(np.float32),
    }


def gru_model(c: Gru) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    a = arrays(c)
    x, h0 = a["X"], a["H0"]
    if c.layout:
        x, h0 = x.swapaxes(0, 1).copy(), h0.swapaxes(0, 1).copy()
    inits = {"W": a["W"], "R": a["R"]}
    feeds = {"X": x}
    if c.bias:
        inits["B"] = a["B"]
    if c.seq_lens:
        inits["L"] = np.full(c.batch, c.steps, np.int32)
    if c.init == "input":
        feeds["H0"] = h0
    elif c.init == "const":
        inits["H0"] = h0
    ins = ["X", "W", "R", "B" if c.bias else "", "L" if c.seq_lens else "", "H0" if c.init != "none" else ""]
    while not ins[-1]:
        ins.pop()
    outs = [n if n in c.outputs else "" for n in ("Y", "Y_h")]
    while not outs[-1]:
        outs.pop()
    attrs: dict = {"hidden_size": c.units, "linear_before_reset": c.lbr}
    if c.direction != "forward":
        attrs["direction"] = c.direction
    if c.layout:
        attrs["layout"] = c.layout
    if c.acts != ("Sigmoid", "Tanh"):
        attrs["activations"] = list(c.acts) * c.dirs
    graph = helper.make_graph(
        [N("GRU", ins, outs, name="gru", **attrs)],
        "gru",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in c.outputs],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", c.opset)])
    model.ir_version = 10
    return model, feeds


_F = {
    "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "Tanh": np.tanh,
    "Relu": lambda v: np.maximum(v, 0.0),
}


def numpy_gru(c: Gru) -> list[np.ndarray]:
    """The ONNX GRU equations in float64 (layout 0 shapes, then moved for layout 1)."""
    a = {k: v.astype(np.float64) for k, v in arrays(c).items()}
    h, t_n = c.units, c.steps
    f, g = _F[c.acts[0]], _F[c.acts[1]]
    y = np.zeros((t_n, c.dirs, c.batch, h))
    y_h = np.zeros((c.dirs, c.batch, h))
    for d in range(c.dirs):
        w, r = a["W"][d], a["R"][d]
        b = a["B"][d] if c.bias else np.zeros(6 * h)
        wz, wr, wh = w[:h], w[h : 2 * h], w[2 * h :]
        rz, rr, rh = r[:h], r[h : 2 * h], r[2 * h :]
        wbz, wbr, wbh, rbz, rbr, rbh = (b[k * h : (k + 1) * h] for k in range(6))
        state = a["H0"][d] if c.init != "none" else np.zeros((c.batch, h))
        backward = c.direction == "reverse" or d == 1
        for t in range(t_n - 1, -1, -1) if backward else range(t_n):
            x = a["X"][t]
            z = f(x @ wz.T + state @ rz.T + wbz + rbz)
            rt = f(x @ wr.T + state @ rr.T + wbr + rbr)
            if c.lbr:
                hh = g(x @ wh.T + rt * (state @ rh.T + rbh) + wbh)
            else:
                hh = g(x @ wh.T + (rt * state) @ rh.T + rbh + wbh)
            state = (1 - z) * hh + z * state
            y[t, d] = state
        y_h[d] = state
    if c.layout:
        y, y_h = y.transpose(2, 0, 1, 3), y_h.swapaxes(0, 1)
    return [{"Y": y, "Y_h": y_h}[n] for n in c.outputs]


CASES = {
    "t1_b1_lbr1_init": Gru(1, 1, 8, 6, lbr=1, init="input"),
    "t1_b2_lbr0": Gru(1, 2, 5, 4),
    "t5_b2_lbr0_init": Gru(5, 2, 4, 6, init="input"),
    "t5_b2_lbr1_const_init": Gru(5, 2, 4, 6, lbr=1, init="const"),
    "t6_no_bias": Gru(6, 1, 3, 5, bias=False),
    "reverse_t4_lbr1": Gru(4, 2, 3, 5, direction="reverse", lbr=1, init="input"),
    "bidirectional_t5": Gru(5, 2, 4, 5, direction="bidirectional", init="input"),
    "bidirectional_t3_lbr1_only_h": Gru(3, 3, 4, 5, direction="bidirectional", lbr=1, outputs=("Y_h",)),
    "layout1_t4_lbr1": Gru(4, 3, 4, 5, lbr=1, layout=1, init="input"),
    "layout1_bidirectional": Gru(3, 2, 4, 5, direction="bidirectional", layout=1, init="const"),
    "relu_candidate": Gru(4, 2, 4, 5, acts=("Sigmoid", "Relu"), init="input"),
    "seq_lens_full": Gru(3, 2, 4, 5, seq_lens=True),
    "only_y": Gru(4, 2, 3, 4, outputs=("Y",), opset=7),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gru_matches_the_specification(name: str) -> None:
    c = CASES[name]
    model, feeds = gru_model(c)
    conv, actual = run_converted(model, feeds)
    expected = numpy_gru(c)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert_close(got, want, atol=ATOL, rtol=RTOL)
    if c.layout == 0:
        for got, want in zip(actual, run_ort(model, feeds), strict=True):
            assert_close(got, want, atol=ATOL, rtol=RTOL)
    kinds = {OperationType(op.type) for op in conv.model.main.operations}
    assert OperationType.FULLY_CONNECTED in kinds and OperationType.LOGISTIC in kinds


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"clip": 2.0}, "has attribute clip; it is not supported"),
        ({"activations": ["HardSigmoid", "Tanh"]}, "has activations ['HardSigmoid', 'Tanh']"),
        ({"direction": "sideways"}, "has direction 'sideways'"),
        ({"hidden_size": 3}, "has hidden_size 3 but W has shape [1, 15, 4]"),
    ],
)
def test_unsupported_gru_attributes_are_refused(change: dict, fragment: str) -> None:
    model, _ = gru_model(Gru(2, 1, 4, 5))
    node = model.graph.node[0]
    for key, value in change.items():
        for i, a in enumerate(node.attribute):
            if a.name == key:
                del node.attribute[i]
                break
        node.attribute.append(helper.make_attribute(key, value))
    msg = error_of(model)
    assert msg.startswith("GRU node 'gru'") and fragment in msg


def test_partial_sequence_lengths_are_refused() -> None:
    model, _ = gru_model(Gru(3, 2, 4, 5, seq_lens=True))
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([3, 2], np.int32), "L"))
    assert "sequence_lens must be absent or a constant giving the full length 3" in error_of(model)
