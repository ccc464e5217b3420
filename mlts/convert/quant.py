"""Quantization records: the parameters of a quantized NN operand and the quantized constants of an ONNX graph.

ONNX writes a quantized value as (integer - zero_point) * scale, the same
affine rule as NNAPI's TENSOR_QUANT8_ASYMM (uint8) and
TENSOR_QUANT8_ASYMM_SIGNED (int8) operands, so a QuantizeLinear /
DequantizeLinear parameter pair maps to an operand's (scale, zeroPoint)
without any arithmetic. Only the parameters are read here; converting
tensors is left to the op handlers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import NodeProto, TensorProto, helper

from mlts.convert.errors import ConversionError
from mlts.hal.enums import OperandType

# The 8-bit ONNX element types and the NN operand type each becomes.
QUANT8_TYPES: dict[np.dtype, OperandType] = {
    np.dtype(np.uint8): OperandType.TENSOR_QUANT8_ASYMM,
    np.dtype(np.int8): OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
}
ELEM_DTYPES: dict[int, np.dtype] = {
    int(TensorProto.UINT8): np.dtype(np.uint8),
    int(TensorProto.INT8): np.dtype(np.int8),
}


def scale_text(scale: float) -> str:
    """The shortest decimal that reads back as the same float32 (0.05, not 0.0500000007)."""
    return str(np.float32(scale))


@dataclass(frozen=True, slots=True)
class QParams:
    """Per-tensor quantization of an 8-bit NN operand: real = (q - zero_point) * scale."""

    type: OperandType
    scale: float
    zero_point: int

    @property
    def dtype(self) -> str:
        """The NumPy dtype name of the operand's elements."""
        return "uint8" if self.type == OperandType.TENSOR_QUANT8_ASYMM else "int8"

    def describe(self) -> str:
        return f"{self.type.name}, scale {scale_text(self.scale)}, zp {self.zero_point}"


@dataclass(frozen=True, slots=True)
class QConst:
    """A quantized constant (DequantizeLinear of an initializer): real = (values - zero_point) * scale.

    `scale` and `zero_point` are per tensor (shape ()) or per slice along
    `axis` (shape (C,)); `axis` is None for per-tensor constants.
    """

    name: str
    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    def real(self) -> np.ndarray:
        """The dequantized values in float64 (for checks, never for emitted operands)."""
        shape = [1] * self.values.ndim
        if self.axis is not None:
            shape[self.axis] = -1
        zp = self.zero_point.reshape(shape) if self.axis is not None else self.zero_point
        sc = self.scale.reshape(shape) if self.axis is not None else self.scale
        return (self.values.astype(np.float64) - zp) * sc

    def per_tensor(self) -> QParams | None:
        """The QParams of an 8-bit per-tensor constant, else None."""
        if self.axis is not None or self.values.dtype not in QUANT8_TYPES:
            return None
        return QParams(QUANT8_TYPES[self.values.dtype], float(self.scale), int(self.zero_point))


def _where(node: NodeProto) -> str:
    return f"{node.op_type} node '{node.name or node.output[0]}'"


def _attr(node: NodeProto, key: str, default: int) -> int:
    for a in node.attribute:
        if a.name == key:
            return int(helper.get_attribute_value(a))
    return default


def _dtype_name(elem: int) -> str:
    return TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)


def linear_params(
    node: NodeProto, consts: dict[str, np.ndarray], x_dtype: np.dtype | None
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(scale float64, zero point int64, axis or None) of a QuantizeLinear/DequantizeLinear node.

    `x_dtype` is the integer type of a DequantizeLinear input (None for
    QuantizeLinear, whose output type is the zero point's, `output_dtype`, or
    uint8). Scale and zero point must be constants; blocked quantization is refused.
    """
    names = [node.input[i] if i < len(node.input) else "" for i in (1, 2)]
    for what, name in zip(("scale", "zero point"), names, strict=True):
        if name and name not in consts:
            raise ConversionError(
                f"{_where(node)}: {what} '{name}' is computed at run time; only constant quantization parameters are supported"
            )
    if _attr(node, "block_size", 0):
        raise ConversionError(
            f"{_where(node)} has block_size {_attr(node, 'block_size', 0)}; blocked quantization is not supported"
        )
    scale = np.asarray(consts[names[0]], dtype=np.float64)
    if names[1]:
        zp_arr = np.asarray(consts[names[1]])
    else:
        zp_arr = np.zeros(scale.shape, dtype=x_dtype if x_dtype is not None else _q_output_dtype(node))
    if x_dtype is not None and zp_arr.dtype != x_dtype:
        raise ConversionError(
            f"{_where(node)}: zero point has dtype {zp_arr.dtype} but the quantized input is {x_dtype}"
        )
    if zp_arr.dtype not in QUANT8_TYPES and zp_arr.dtype != np.int32:
        raise ConversionError(
            f"{_where(node)}: quantized type {zp_arr.dtype} is not supported; expected uint8, int8 (or int32 biases)"
        )
    # One scale is per tensor even when written as a 1-element vector (onnxruntime does so for biases).
    axis = _attr(node, "axis", 1) if scale.size > 1 else None
    if axis is None:
        if scale.size != 1 or zp_arr.size != 1:
            raise ConversionError(
                f"{_where(node)}: scale has {scale.size} and zero point {zp_arr.size} elements; expected one each"
            )
        return scale.reshape(()), zp_arr.reshape(()).astype(zp_arr.dtype), None
    if scale.ndim != 1 or zp_arr.shape not in ((), scale.shape):
        raise ConversionError(
            f"{_where(node)}: per-axis scale of shape {list(scale.shape)} and zero point of shape "
            f"{list(zp_arr.shape)}; expected 1-D of the same length"
        )
    return scale, np.broadcast_to(zp_arr, scale.shape).astype(zp_arr.dtype), axis


def _q_output_dtype(node: NodeProto) -> np.dtype:
    elem = _attr(node, "output_dtype", 0)
    if elem == 0:
        return np.dtype(np.uint8)
    if elem not in ELEM_DTYPES:
        raise ConversionError(
            f"{_where(node)} has output_dtype {_dtype_name(elem)}; only UINT8 and INT8 are supported"
        )
    return ELEM_DTYPES[elem]


def check_scales(node: NodeProto, scale: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise ConversionError(f"{_where(node)}: {what} scale {scale.tolist()} must be finite and > 0")


def activation_params(node: NodeProto, consts: dict[str, np.ndarray], x_dtype: np.dtype | None) -> QParams:
    """The per-tensor QParams a QuantizeLinear/DequantizeLinear node applies to an activation."""
    scale, zp, axis = linear_params(node, consts, x_dtype)
    if axis is not None or zp.dtype not in QUANT8_TYPES:
        kind = "per-axis" if axis is not None else f"{zp.dtype}"
        raise ConversionError(
            f"{_where(node)}: {kind} quantization of the run-time tensor '{node.input[0]}' is not supported; "
            f"activations must be uint8/int8 per tensor"
        )
    check_scales(node, scale, "the")
    return QParams(QUANT8_TYPES[zp.dtype], float(np.float32(scale)), int(zp))


def const_of_dq(node: NodeProto, consts: dict[str, np.ndarray]) -> QConst:
    """The QConst a DequantizeLinear of the constant input 0 denotes."""
    values = np.asarray(consts[node.input[0]])
    if values.dtype not in QUANT8_TYPES and values.dtype != np.int32:
        raise ConversionError(
            f"{_where(node)}: constant '{node.input[0]}' has dtype {values.dtype}; expected uint8, int8 or int32"
        )
    scale, zp, axis = linear_params(node, consts, values.dtype)
    check_scales(node, scale, "the")
    if axis is not None:
        if not -values.ndim <= axis < values.ndim or values.shape[axis % values.ndim] != scale.size:
            raise ConversionError(
                f"{_where(node)}: axis {axis} with {scale.size} scales does not fit constant of shape {list(values.shape)}"
            )
        axis %= values.ndim
    return QConst(node.output[0], values, scale, zp.astype(np.int64), axis)


def declared_params(
    node: NodeProto, consts: dict[str, np.ndarray], scale_index: int, zp_index: int, what: str
) -> QParams:
    """Per-tensor QParams given by a QLinear* node's constant (scale, zero point) inputs."""
    names = [node.input[i] if i < len(node.input) else "" for i in (scale_index, zp_index)]
    for name in names:
        if name and name not in consts:
            raise ConversionError(
                f"{_where(node)}: {what} quantization parameter '{name}' is computed at run time; only constants are supported"
            )
    if not names[0]:
        raise ConversionError(f"{_where(node)} has no {what} scale (input {scale_index})")
    scale = np.asarray(consts[names[0]], dtype=np.float64)
    zp = np.asarray(consts[names[1]]) if names[1] else np.zeros((), np.uint8)
    if scale.size != 1 or zp.size != 1 or zp.dtype not in QUANT8_TYPES:
        raise ConversionError(
            f"{_where(node)}: {what} has scale of shape {list(scale.shape)} and zero point {zp.dtype} "
            f"{list(zp.shape)}; expected one uint8/int8 value each"
        )
    check_scales(node, scale, what)
    return QParams(QUANT8_TYPES[zp.dtype], float(np.float32(scale.reshape(()))), int(zp.reshape(())))
