"""Hand-built quantized ONNX graphs (the `QDQ` builder) and checks of their conversion against onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlts.convert import Conversion, convert
from mlts.hal.enums import OperandLifeTime, OperandType, OperationType
from mlts.hal.types import Model, Operand
from tests.convert._util import run_ort
from tests.driver.qkit import quantize

U8, S8 = np.uint8, np.int8


T_U8, T_S8 = OperandType.TENSOR_QUANT8_ASYMM, OperandType.TENSOR_QUANT8_ASYMM_SIGNED


T_PC, T_I32 = OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL, OperandType.TENSOR_INT32


ELEM = {U8: TensorProto.UINT8, S8: TensorProto.INT8}


def zp_for(dtype: type, unsigned_zp: int = 128) -> int:
    """A zero point in the middle of the range: `unsigned_zp` for uint8, shifted by -128 for int8."""
    return unsigned_zp if dtype == U8 else unsigned_zp - 128


def weights_per_tensor(w: np.ndarray, dtype: type) -> tuple[np.ndarray, float, int]:
    """uint8: asymmetric over [min, max]; int8: symmetric (zero point 0)."""
    if dtype == U8:
        lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
        scale = (hi - lo) / 255
        zp = int(round(-lo / scale))
    else:
        scale, zp = float(np.abs(w).max()) / 127, 0
    return quantize(w, scale, zp, dtype), float(np.float32(scale)), zp


def weights_per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 symmetric per slice along `axis`."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    scales = (np.abs(w).max(axis=other) / 127).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scales.reshape(shape)), -127, 127).astype(S8)
    return q, scales


def add_conv(
    g: QDQ, x: str, x_scale: float, cin: int, cout: int, kind: str, group: int = 1, bias: bool = True, **attrs
) -> str:
    """Conv with DequantizeLinear weights of `kind` (u8, s8, pc) and int32 bias; returns the float output."""
    w = (g.rng.standard_normal((cout, cin // group, 3, 3)) * 0.3).astype(np.float32)
    if kind == "pc":
        wq, scales = weights_per_channel(w, 0)
        w_name = g.weight(wq, scales, np.zeros(cout, S8), axis=0)
    else:
        wq, ws, wzp = weights_per_tensor(w, U8 if kind == "u8" else S8)
        scales = np.full(cout, ws, np.float32)
        w_name = g.weight(wq, ws, wzp)
    inputs = [x, w_name]
    if bias:
        b_scale = (np.float32(x_scale) * scales).astype(np.float32)
        b = np.round(g.rng.standard_normal(cout) / b_scale).astype(np.int32)
        if len(set(b_scale.tolist())) == 1:
            b_scale = b_scale[:1]  # onnxruntime writes a per-tensor bias scale as one element
        inputs.append(g.dq(g.const(b, "b"), b_scale, np.zeros(b_scale.shape, np.int32), np.int32, 0))
    return g.node("Conv", inputs, group=group, **attrs)


def ops(conv: Conversion) -> list[str]:
    return [OperationType(op.type).name for op in conv.model.main.operations]


def operations(conv: Conversion, name: str) -> list:
    return [op for op in conv.model.main.operations if OperationType(op.type).name == name]


def operand(conv: Conversion, index: int) -> Operand:
    return conv.model.main.operands[index]


def scalar(model: Model, index: int):
    op = model.main.operands[index]
    assert op.lifetime == OperandLifeTime.CONSTANT_COPY
    raw = model.operand_values[op.location.offset : op.location.offset + op.location.length]
    return np.frombuffer(raw, dtype={1: np.int32, 6: np.bool_}.get(op.type, np.float32))[0]


def no_float_tensors(conv: Conversion) -> None:
    floats = [i for i, o in enumerate(conv.model.main.operands) if o.type == OperandType.TENSOR_FLOAT32]
    assert not floats, f"float32 tensor operands {floats} in {ops(conv)}"


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        elem = inp.type.tensor_type.elem_type
        if elem == TensorProto.FLOAT:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32) * 2
        else:
            dtype = U8 if elem == TensorProto.UINT8 else S8
            info = np.iinfo(dtype)
            feeds[inp.name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    return feeds


def output_scale(conv: Conversion, index: int) -> float:
    """The quantization scale behind output `index` (through its DEQUANTIZE for float outputs)."""
    info = conv.outputs[index]
    if info.scale:
        return info.scale
    out = conv.model.main.output_indexes[index]
    producer = next(op for op in conv.model.main.operations if out in op.outputs)
    assert producer.type == OperationType.DEQUANTIZE
    return operand(conv, producer.inputs[0]).scale


def quant_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs where its integer products are exact on this CPU, else onnx.reference's.

    onnxruntime's uint8 x int8 kernels saturate pairs of products at 16 bits on
    x86-64 CPUs without VNNI (see mlts.bench.ort_exactness); the ONNX reference
    evaluator dequantizes and computes in float, which never saturates and
    rounds like onnxruntime. A graph it cannot run (com.microsoft ops) is skipped.
    """
    from mlts.bench.ort_exactness import model_verdict

    verdict = model_verdict(model)
    if verdict["exact"]:
        return run_ort(model, feeds)
    from onnx.reference import ReferenceEvaluator

    # The evaluator implements DequantizeLinear from opset 19 on; the ops these graphs use mean the same there.
    newer = onnx.ModelProto.FromString(model.SerializeToString())
    for opset in newer.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, 21)
    try:
        return ReferenceEvaluator(newer).run(None, feeds)
    except Exception as e:  # an op the reference evaluator lacks: nothing exact to compare with here
        pytest.skip(
            f"{verdict['note']}; onnx.reference cannot run the graph either ({type(e).__name__}: {e})"
        )


def check_vs_ort(model: onnx.ModelProto, min_equal: float = 0.85, seed: int = 0) -> Conversion:
    """Convert, run on the sample driver and on onnxruntime: within 1 quantized unit, mostly equal.

    Where onnxruntime is not exact for the model on this CPU, onnx.reference replaces it.
    """
    from driver.executor import run_model

    conv = convert(model)
    feeds = random_feeds(model, seed)
    expected = quant_reference(model, feeds)
    actual = run_model(conv.model, [feeds[i.name] for i in conv.inputs])
    for index, (info, a, e) in enumerate(zip(conv.outputs, actual, expected, strict=True)):
        assert a.dtype == np.dtype(info.dtype) == e.dtype, (a.dtype, info.dtype, e.dtype)
        if info.dtype == "float32":
            units = np.abs(a.astype(np.float64) - e) / output_scale(conv, index)
            assert units.max() <= 1 + 1e-3, f"output {info.name}: {units.max():.3f} units"
            equal = np.mean(units < 1e-3)
        else:
            diff = np.abs(a.astype(np.int32) - e.astype(np.int32))
            assert diff.max() <= 1, f"output {info.name}: {diff.max()} units ({np.mean(diff > 0):.1%} differ)"
            equal = np.mean(diff == 0)
        assert equal >= min_equal, f"output {info.name}: only {equal:.1%} equal"
    return conv


def conv_graph(kind: str, dtype: type = U8, group: int = 1, cout: int = 8, float_io: bool = False, **attrs):
    g = QDQ()
    xs, xzp = 0.05, zp_for(dtype)
    if float_io:
        x = g.qdq(g.input_f("x", [1, 4, 6, 6]), xs, xzp, dtype)
    else:
        x = g.input_q("x", [1, 4, 6, 6], xs, xzp, dtype)
    c = add_conv(g, x, xs, 4, cout, kind, group=group, pads=[1, 1, 1, 1], **attrs)
    if float_io:
        g.node("Identity", [g.qdq(c, 0.15, zp_for(dtype), dtype)], "y")
        return g.model({"y": TensorProto.FLOAT})
    g.q(c, 0.15, zp_for(dtype), dtype, name="y")
    return g.model({"y": ELEM[dtype]})


def tiny_net() -> onnx.ModelProto:
    """Conv-Relu, depthwise Conv-Clip6, residual Add, GlobalAveragePool, Flatten, Gemm (float, NCHW)."""
    g = QDQ()
    g.inits.update(
        w1=(g.rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        b1=(g.rng.standard_normal(8) * 0.1).astype(np.float32),
        w2=(g.rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32),
        b2=(g.rng.standard_normal(8) * 0.1).astype(np.float32),
        lo=np.float32(0),
        hi=np.float32(6),
        wg=(g.rng.standard_normal((16, 8)) * 0.3).astype(np.float32),
        bg=(g.rng.standard_normal(16) * 0.1).astype(np.float32),
    )
    r1 = g.node("Relu", [g.node("Conv", [g.input_f("input", [1, 3, 12, 12]), "w1", "b1"], pads=[1, 1, 1, 1])])
    r2 = g.node("Clip", [g.node("Conv", [r1, "w2", "b2"], group=8, pads=[1, 1, 1, 1]), "lo", "hi"])
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [g.node("Add", [r1, r2])])])
    g.node("Gemm", [pooled, "wg", "bg"], "logits", transB=1)
    return g.model({"logits": TensorProto.FLOAT})


def quantize_tiny_net(tmp_path, **options) -> onnx.ModelProto:
    """`tiny_net` through onnxruntime's quantize_static (4 random calibration inputs) with `options`."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Images(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(5)
            self._it = iter(
                [{"input": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(4)]
            )

        def get_next(self):
            return next(self._it, None)

    src, dst = tmp_path / "float.onnx", tmp_path / "quant.onnx"
    onnx.save(tiny_net(), str(src))
    quantize_static(str(src), str(dst), Images(), **options)
    return onnx.load(str(dst))


class QDQ:
    """A QDQ graph under construction: float ops between DequantizeLinear and QuantizeLinear nodes."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self._count = 0

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{base}_{self._count}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits[name] = np.asarray(value)
        return name

    def node(self, op: str, inputs: Sequence[str], name: str | None = None, **attrs) -> str:
        out = name or self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def _params(self, scale, zp, dtype) -> list[str]:
        return [self.const(np.asarray(scale, np.float32), "s"), self.const(np.asarray(zp, dtype), "zp")]

    def q(self, x: str, scale: float, zp: int, dtype: type = U8, name: str | None = None) -> str:
        return self.node("QuantizeLinear", [x, *self._params(scale, zp, dtype)], name)

    def dq(self, xq: str, scale, zp, dtype: type = U8, axis: int | None = None) -> str:
        kw = {} if axis is None else {"axis": axis}
        return self.node("DequantizeLinear", [xq, *self._params(scale, zp, dtype)], **kw)

    def qdq(self, x: str, scale: float, zp: int, dtype: type = U8) -> str:
        return self.dq(self.q(x, scale, zp, dtype), scale, zp, dtype)

    def input_q(self, name: str, shape: Sequence[int], scale: float, zp: int, dtype: type = U8) -> str:
        """An 8-bit graph input and the DequantizeLinear reading it."""
        self.inputs.append(helper.make_tensor_value_info(name, ELEM[dtype], list(shape)))
        return self.dq(name, scale, zp, dtype)

    def input_f(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def weight(self, values: np.ndarray, scale, zp, axis: int | None = None) -> str:
        """DequantizeLinear of a constant (per tensor, or along `axis` with 1-D scale and zero point)."""
        return self.dq(self.const(values, "w"), scale, zp, values.dtype.type, axis)

    def model(self, outputs: dict[str, int], opset: int = 13) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "qdq",
            self.inputs,
            [helper.make_tensor_value_info(n, elem, None) for n, elem in outputs.items()],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10
        return model
