"""ONNX LSTM test cases (`Case`) and the models built from them, for the LSTM conversion and cache tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = helper.make_node


NAMES = ("Y", "Y_h", "Y_c")


@dataclass(frozen=True)
class Case:
    """One ONNX LSTM node: sizes, optional inputs and which outputs the graph returns."""

    steps: int
    batch: int
    inputs: int
    units: int
    layout: int = 0
    opset: int = 14
    bias: bool = True
    peep: bool = False
    init: str = "none"  # initial_h/initial_c: "none", "input" (graph inputs) or "const" (initializers)
    seq_lens: bool = False
    act: str = "Tanh"
    input_forget: int = 0
    outputs: tuple[str, ...] = NAMES
    x_scale: float = 1.0  # larger inputs drive Relu cells past 6 (a RELU6 would differ)
    seed: int = 0
    direction: str = "forward"

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def _batch_first(a: np.ndarray) -> np.ndarray:
    """Layout 0 -> layout 1 for X [T, B, in] and states [1, B, H] (swap the first two axes)."""
    return np.ascontiguousarray(a.swapaxes(0, 1))


def lstm_model(c: Case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model and its feeds; every random array is drawn in the same order for every variant."""
    rng = np.random.default_rng(c.seed)
    h, i = c.units, c.inputs
    d = c.dirs
    w = (rng.standard_normal((d, 4 * h, i)) / np.sqrt(i)).astype(np.float32)
    r = (rng.standard_normal((d, 4 * h, h)) / np.sqrt(h)).astype(np.float32)
    b = (rng.standard_normal((d, 8 * h)) * 0.5).astype(np.float32)
    p = (rng.standard_normal((d, 3 * h)) * 0.5).astype(np.float32)
    x = (rng.standard_normal((c.steps, c.batch, i)) * c.x_scale).astype(np.float32)
    h0, c0 = (rng.standard_normal((d, c.batch, h)).astype(np.float32) for _ in range(2))
    if c.layout == 1:
        x, h0, c0 = _batch_first(x), _batch_first(h0), _batch_first(c0)
    inits = {"W": w, "R": r}
    graph_inputs = {"X": x}
    if c.bias:
        inits["B"] = b
    if c.peep:
        inits["P"] = p
    if c.seq_lens:
        inits["L"] = np.full(c.batch, c.steps, np.int32)
    if c.init == "input":
        graph_inputs.update(h0=h0, c0=c0)
    elif c.init == "const":
        inits.update(h0=h0, c0=c0)
    ins = ["X", "W", "R", "B" if c.bias else "", "L" if c.seq_lens else ""]
    ins += ["h0", "c0"] if c.init != "none" else ["", ""]
    ins.append("P" if c.peep else "")
    outs = [n if n in c.outputs else "" for n in NAMES]
    node = N("LSTM", _strip(ins), _strip(outs), name="lstm", hidden_size=h, **_attrs(c))
    return _model([node], graph_inputs, list(c.outputs), inits, c.opset), graph_inputs


def _strip(names: list[str]) -> list[str]:
    while names and not names[-1]:
        names.pop()
    return names


def _attrs(c: Case) -> dict:
    a: dict = {}
    if c.act != "Tanh":
        a["activations"] = ["Sigmoid", c.act, c.act]
    if c.input_forget:
        a["input_forget"] = c.input_forget
    if c.layout:
        a["layout"] = c.layout
    if c.direction != "forward":
        a["direction"] = c.direction
    return a


def _model(nodes, graph_inputs: dict[str, np.ndarray], outputs, inits, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in graph_inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model
