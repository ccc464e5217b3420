"""DEQUANTIZE: an 8-bit quantized tensor to TENSOR_FLOAT32 (or TENSOR_FLOAT16): (q - zp) * scale in float32.

Inputs: TENSOR_QUANT8_ASYMM, TENSOR_QUANT8_ASYMM_SIGNED, TENSOR_QUANT8_SYMM
(zero point 0) and TENSOR_QUANT8_SYMM_PER_CHANNEL (scale per index along
channel_dim, zero point 0). The integer difference is exact in float32, so the
only rounding is the float32 product, as in NNAPI's reference; a FLOAT16
output is that product rounded to half precision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Run, expect_count, expect_type, register
from driver.ops._qelementwise import check_quant_params
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "DEQUANTIZE"
T = OperandType
_OUT_DTYPE = {T.TENSOR_FLOAT32: np.float32, T.TENSOR_FLOAT16: np.float16}


def _symm_scale(arg: ArgInfo) -> np.float32:
    if not (math.isfinite(arg.scale) and arg.scale > 0):
        raise invalid(f"{NAME}: input has scale {arg.scale}, expected a finite scale > 0")
    if arg.zero_point != 0:
        raise invalid(f"{NAME}: TENSOR_QUANT8_SYMM input has zero point {arg.zero_point}, expected 0")
    return np.float32(arg.scale)


def _channel_scales(arg: ArgInfo) -> tuple[np.ndarray, int]:
    """(float32 scales, channel_dim) of a per-channel input, checked against its known shape."""
    cq = arg.channel_quant
    if cq is None:
        raise invalid(f"{NAME}: TENSOR_QUANT8_SYMM_PER_CHANNEL input has no per-channel scales")
    scales = np.asarray(cq.scales, dtype=np.float32)
    if scales.ndim != 1 or not (np.isfinite(scales).all() and (scales > 0).all()):
        raise invalid(f"{NAME}: per-channel scales {list(cq.scales)} must be finite and > 0")
    _check_channels(arg.shape, scales.size, cq.channel_dim, known_only=True)
    return scales, cq.channel_dim


def _check_channels(shape: tuple[int, ...], n: int, dim: int, known_only: bool = False) -> None:
    if not shape and known_only:
        return
    if not 0 <= dim < len(shape):
        raise invalid(f"{NAME}: channel_dim {dim} is out of range for an input of rank {len(shape)}")
    if shape[dim] != n and not (known_only and shape[dim] == 0):
        raise invalid(f"{NAME}: input has {shape[dim]} channels along dimension {dim}, but {n} scales")


def _dequantizer(arg: ArgInfo) -> Any:
    """q -> float32 values for the input operand `arg`."""
    if arg.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        scales, dim = _channel_scales(arg)

        def per_channel(q: np.ndarray) -> np.ndarray:
            _check_channels(q.shape, scales.size, dim)
            shape = [1] * q.ndim
            shape[dim] = scales.size
            return q.astype(np.float32) * scales.reshape(shape)

        return per_channel
    if arg.type == T.TENSOR_QUANT8_SYMM:
        scale = _symm_scale(arg)
        return lambda q: q.astype(np.float32) * scale
    check_quant_params(NAME, "input", arg)
    scale, zp = np.float32(arg.scale), arg.zero_point
    return lambda q: (q.astype(np.int32) - zp).astype(np.float32) * scale


@register(OperationType.DEQUANTIZE)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (1,), outs)
    expect_type(
        NAME,
        "input",
        ins[0],
        T.TENSOR_QUANT8_ASYMM,
        T.TENSOR_QUANT8_ASYMM_SIGNED,
        T.TENSOR_QUANT8_SYMM,
        T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    )
    expect_type(NAME, "output 0", outs[0], T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
    dequantize = _dequantizer(ins[0])
    dtype = _OUT_DTYPE[T(outs[0].type)]

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        y = dequantize(np.asarray(args[0]))
        return [y if dtype is np.float32 else y.astype(dtype)]

    return run
