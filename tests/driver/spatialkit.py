"""Test helpers for the spatial, normalisation and transposed/grouped conv kernels: any operand type, direct calls."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import ArgInfo, kernel_for
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.types import SymmPerChannelQuantParams

F32T = OperandType.TENSOR_FLOAT32
F16T = OperandType.TENSOR_FLOAT16
U8 = OperandType.TENSOR_QUANT8_ASYMM
S8 = OperandType.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32T = OperandType.TENSOR_INT32
DTYPE = {F32T: np.float32, F16T: np.float16, U8: np.uint8, S8: np.int8, PC: np.int8, I32T: np.int32}

FP16_TOL = 5 * 2.0**-10
FP32_ATOL, FP32_RTOL = 1e-5, 5 * 2.0**-23


def tensor(
    value: np.ndarray,
    type: OperandType = F32T,
    scale: float = 0.0,
    zero_point: int = 0,
    *,
    const: bool = False,
    channel_scales: Sequence[float] | None = None,
) -> tuple[ArgInfo, np.ndarray]:
    """(ArgInfo, run-time value) of a tensor input of `type` (value cast to its dtype)."""
    arr = np.ascontiguousarray(value, dtype=DTYPE[type])
    cq = None if channel_scales is None else SymmPerChannelQuantParams(tuple(map(float, channel_scales)), 0)
    info = ArgInfo(
        int(type),
        arr.shape,
        scale=scale,
        zero_point=zero_point,
        channel_quant=cq,
        value=arr if const else None,
    )
    return info, arr


def fp16_scalar(v: float) -> tuple[ArgInfo, float]:
    return ArgInfo(int(OperandType.FLOAT16), (), value=v), v


def omitted(type: OperandType) -> tuple[ArgInfo, None]:
    """An optional input left out as a NO_VALUE constant."""
    return ArgInfo(int(type), (), omitted=True), None


def unset(type: OperandType) -> tuple[ArgInfo, None]:
    """An optional input given as a request input without a value (None at run time)."""
    return ArgInfo(int(type), ()), None


def _arg(v: Any) -> tuple[ArgInfo, Any]:
    if isinstance(v, tuple):
        return v
    if isinstance(v, bool):
        return ArgInfo(int(OperandType.BOOL), (), value=v), v
    if isinstance(v, int):
        return ArgInfo(int(OperandType.INT32), (), value=v), v
    if isinstance(v, float):
        return ArgInfo(int(OperandType.FLOAT32), (), value=v), v
    if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
        arr = v.astype(np.int32)
        return ArgInfo(int(I32T), arr.shape, value=arr), arr
    raise TypeError(f"cannot describe input {v!r}")


def out(type: OperandType = F32T, scale: float = 0.0, zero_point: int = 0) -> ArgInfo:
    return ArgInfo(int(type), (), scale=scale, zero_point=zero_point)


def prepare(op: OperationType, inputs: Sequence[Any], output: ArgInfo | None = None):
    """Prepare `op`; returns (run, run-time args)."""
    infos, args = zip(*(_arg(v) for v in inputs), strict=True)
    kernel = kernel_for(int(op))
    assert kernel is not None, f"no kernel for {op.name}"
    if output is None:
        output = out(OperandType(infos[0].type), infos[0].scale, infos[0].zero_point)
    return kernel(list(infos), [output]), list(args)


def call(op: OperationType, inputs: Sequence[Any], output: ArgInfo | None = None) -> np.ndarray:
    """Prepare and run `op` once; its single output."""
    run, args = prepare(op, inputs, output)
    (y,) = run(args)
    return y


def check_float(actual: np.ndarray, expected: np.ndarray, type: OperandType) -> None:
    """Shape, dtype, then values within the CTS tolerance of the float type."""
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == DTYPE[type], f"dtype {actual.dtype}, expected {np.dtype(DTYPE[type])}"
    atol, rtol = (FP16_TOL, FP16_TOL) if type == F16T else (FP32_ATOL, FP32_RTOL)
    err = np.abs(actual.astype(np.float64) - expected)
    bad = ~(err <= atol + rtol * np.abs(expected))
    assert not bad.any(), f"{bad.sum()} values out of tolerance; max error {err.max()}"


def check_exact(actual: np.ndarray, expected: np.ndarray) -> None:
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    diff = actual.astype(np.int64) - expected.astype(np.int64)
    assert not diff.any(), f"{np.count_nonzero(diff)} values differ; max {np.abs(diff).max()}"


def as_type(x: np.ndarray, type: OperandType) -> np.ndarray:
    """Float test data in `type`'s dtype (float16 data rounded, so references see what the kernel sees)."""
    return np.asarray(x).astype(DTYPE[type])


def nhwc_to_nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def spec_transpose_acc(x, f, pads, stride, dtype=np.float64):
    """Scatter form, straight from the spec: [N, OH, OW, Cout] sums (f is [Cout, KH, KW, Cin])."""
    left, right, top, bottom = pads
    n, h, w, _ = x.shape
    cout, kh, kw, _ = f.shape
    sw, sh = stride
    oh, ow = (h - 1) * sh + kh - top - bottom, (w - 1) * sw + kw - left - right
    y = np.zeros((n, oh, ow, cout), dtype)
    xd, fd = x.astype(dtype), f.astype(dtype)
    for hi in range(h):
        for wi in range(w):
            for i in range(kh):
                for j in range(kw):
                    ho, wo = hi * sh - top + i, wi * sw - left + j
                    if 0 <= ho < oh and 0 <= wo < ow:
                        y[:, ho, wo] += xd[:, hi, wi] @ fd[:, i, j].T
    return y


def spec_l2(x, axis):
    x = x.astype(np.float64)
    return x / np.maximum(np.sqrt((x * x).sum(axis=axis, keepdims=True)), 1e-6)


def spec_depth_to_space(x, bs):
    n, h, w, c = x.shape
    co = c // (bs * bs)
    y = np.empty((n, h * bs, w * bs, co), x.dtype)
    for b, i, j, d in itertools.product(range(n), range(h * bs), range(w * bs), range(co)):
        y[b, i, j, d] = x[b, i // bs, j // bs, ((i % bs) * bs + j % bs) * co + d]
    return y
