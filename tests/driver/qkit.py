"""Test helpers for quantized kernels: quantized operands, direct kernel calls, onnxruntime QLinear references."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from driver.ops import ArgInfo, kernel_for
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import SymmPerChannelQuantParams

U8 = OperandType.TENSOR_QUANT8_ASYMM
S8 = OperandType.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandType.TENSOR_INT32
QOPSET = 21  # QLinear* and per-channel DequantizeLinear are all in the default domain here


@dataclass(frozen=True)
class Q:
    """A quantized tensor input: `value` (uint8/int8/int32 array), its scale and zero point.

    `const=True` makes it a constant visible at prepare time; `channel` set
    makes it TENSOR_QUANT8_SYMM_PER_CHANNEL with these per-channel scales.
    """

    value: np.ndarray
    scale: float
    zero_point: int = 0
    const: bool = False
    channel_scales: Sequence[float] | None = None
    channel_dim: int = 0

    @property
    def type(self) -> OperandType:
        if self.channel_scales is not None:
            return PC
        return {np.dtype(np.uint8): U8, np.dtype(np.int8): S8, np.dtype(np.int32): I32}[self.value.dtype]

    def info(self) -> ArgInfo:
        cq = None
        scale = self.scale
        if self.channel_scales is not None:
            cq = SymmPerChannelQuantParams(tuple(float(s) for s in self.channel_scales), self.channel_dim)
            scale = 0.0
        return ArgInfo(
            int(self.type),
            tuple(self.value.shape),
            scale=float(scale),
            zero_point=int(self.zero_point),
            channel_quant=cq,
            value=self.value if self.const else None,
        )


def out(type: OperandType, scale: float, zero_point: int, shape: Sequence[int] = ()) -> ArgInfo:
    """The ArgInfo of a quantized output operand (shape () = unknown)."""
    return ArgInfo(int(type), tuple(shape), scale=float(scale), zero_point=int(zero_point))


def _arg(v: Any) -> tuple[ArgInfo, Any]:
    if isinstance(v, Q):
        return v.info(), v.value
    if isinstance(v, ArgInfo):
        return v, v.value
    if isinstance(v, bool):
        return ArgInfo(int(OperandType.BOOL), (), value=v), v
    if isinstance(v, int):
        return ArgInfo(int(OperandType.INT32), (), value=v), v
    if isinstance(v, float):
        return ArgInfo(int(OperandType.FLOAT32), (), value=v), v
    if isinstance(v, np.ndarray):  # a constant int32 parameter tensor (axes, shapes) or a float tensor
        if v.dtype.kind in "iu":
            arr = v.astype(np.int32)
            return ArgInfo(int(OperandType.TENSOR_INT32), arr.shape, value=arr), arr
        arr = v.astype(np.float32)
        return ArgInfo(int(OperandType.TENSOR_FLOAT32), arr.shape), arr
    raise TypeError(f"cannot describe input {v!r}")


def qcall(op: OperationType, inputs: Sequence[Any], outs: Sequence[ArgInfo]) -> list[np.ndarray]:
    """Prepare the kernel of `op` with these inputs and output operands, run it once; every output."""
    infos, args = zip(*(_arg(v) for v in inputs), strict=True)
    kernel = kernel_for(int(op))
    assert kernel is not None, f"no kernel for {op.name}"
    run = kernel(list(infos), list(outs))
    return run(list(args))


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: type) -> np.ndarray:
    """Round-half-away quantization of floats (for making test data only)."""
    info = np.iinfo(dtype)
    q = np.sign(x / scale) * np.floor(np.abs(x / scale) + 0.5) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def random_q(rng: np.random.Generator, shape: Sequence[int], dtype: type) -> np.ndarray:
    """Uniform random 8-bit values over the whole range of `dtype`."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=tuple(shape)).astype(dtype)


def to_signed(x: np.ndarray) -> np.ndarray:
    """uint8 values shifted by -128 into int8 (the signed twin of an unsigned tensor)."""
    return (x.astype(np.int16) - 128).astype(np.int8)


def ort_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    initializers: dict[str, np.ndarray],
    output: str = "y",
    output_dtype: type = np.uint8,
) -> onnx.ModelProto:
    """A small ONNX model (IR 10, opset QOPSET) over `nodes`; graph inputs `inputs`, constant `initializers`,
    one output `output` of `output_dtype`."""
    graph = helper.make_graph(
        list(nodes),
        "qref",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in inputs.items()
        ],
        [
            helper.make_tensor_value_info(
                output, helper.np_dtype_to_tensor_dtype(np.dtype(output_dtype)), None
            )
        ],
        initializer=[onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", QOPSET)])
    model.ir_version = 10
    return model


def ort_run(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Run `model` with onnxruntime on one thread; its first output."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


PAIRING_OF_KIND = {
    "u8": ("uint8", "uint8"),
    "s8": ("int8", "int8"),
    "pcu8": ("uint8", "int8"),
    "pcs8": ("int8", "int8"),
}
"""(activation, weight) types of the filter kinds the convolution tests use."""


def require_exact_ort(activation: str, weight: str) -> None:
    """Skip the calling test, saying why, unless onnxruntime's `activation x weight` products are exact here.

    onnxruntime's uint8 x int8 kernels saturate pairs of products at 16 bits on
    x86-64 CPUs without VNNI; on such a CPU agreement with it proves nothing.
    """
    from mlts.bench.ort_exactness import pairing_is_exact

    exact, reason = pairing_is_exact(activation, weight)
    if not exact:
        pytest.skip(f"onnxruntime agreement not checked: {reason}; the exact integer reference still is")


def max_unit_diff(a: np.ndarray, b: np.ndarray) -> int:
    """Largest difference in quantized units between two 8-bit tensors of the same shape."""
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    return int(np.max(np.abs(a.astype(np.int32) - b.astype(np.int32)), initial=0))


def ort_qdq(
    op_type: str,
    qins: Sequence[tuple[np.ndarray, float, int]],
    out_q: tuple[float, int],
    consts: dict[str, np.ndarray] | None = None,
    **attrs,
) -> np.ndarray:
    """onnxruntime on DequantizeLinear(each input) -> op_type(..., consts) -> QuantizeLinear(out_q)."""
    dtype = qins[0][0].dtype
    nodes, feeds, init, names = [], {}, {}, []
    for i, (v, s, z) in enumerate(qins):
        feeds[f"x{i}"] = v
        init[f"s{i}"], init[f"z{i}"] = np.array(s, np.float32), np.array(z, dtype)
        nodes.append(helper.make_node("DequantizeLinear", [f"x{i}", f"s{i}", f"z{i}"], [f"f{i}"]))
        names.append(f"f{i}")
    for k, c in (consts or {}).items():
        init[k] = c
        names.append(k)
    nodes.append(helper.make_node(op_type, names, ["r"], **attrs))
    init["so"], init["zo"] = np.array(out_q[0], np.float32), np.array(out_q[1], dtype)
    nodes.append(helper.make_node("QuantizeLinear", ["r", "so", "zo"], ["y"]))
    return ort_run(ort_model(nodes, feeds, init, output_dtype=dtype), feeds)


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def expect_invalid(op: OperationType, inputs: list, outs: list, match: str) -> None:
    with pytest.raises(HalError, match=match) as e:
        qcall(op, inputs, outs)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
