"""Quantized QUANTIZE and DEQUANTIZE: against onnxruntime's QuantizeLinear / DequantizeLinear (exact),
hand-computed cases (NaN, float16 inputs, ties, saturation), per-channel dequantization, bad signatures."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from driver.ops import ArgInfo
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import SymmPerChannelQuantParams
from tests.driver.qkit import (
    S8,
    U8,
    Q,
    expect_invalid,
    max_unit_diff,
    ort_model,
    ort_run,
    out,
    qcall,
    rng_for,
    to_signed,
)

Op = OperationType
T = OperandType
F32 = np.float32
X = (np.arange(24, dtype=np.uint8) * 10 + 5).reshape(2, 3, 4)  # an 8-bit tensor where a float one is expected


def quantize_call(x: np.ndarray, t, scale: float, zp: int, in_type=T.TENSOR_FLOAT32) -> np.ndarray:
    (y,) = qcall(Op.QUANTIZE, [ArgInfo(int(in_type), x.shape, value=x)], [out(t, scale, zp)])
    return y


@pytest.mark.parametrize("scale, zp", [(0.25, 128), (0.1, 3), (0.0078125, 0), (0.037, 250)])
def test_quantize(scale, zp):
    rng = rng_for(scale, zp)
    x = rng.uniform(-40, 40, size=500).astype(F32)
    ties = ((np.arange(-20, 20) + 0.5) * F32(scale)).astype(
        F32
    )  # exact halves when the scale is a power of 2
    x = np.concatenate([x, ties, F32([0.0, -0.0, 1e30, -1e30, np.inf, -np.inf])])
    y = quantize_call(x, U8, scale, zp)
    q = (x / F32(scale)).astype(np.float64)
    want = np.clip(np.copysign(np.floor(np.abs(q) + 0.5), q) + zp, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(y, want)
    ys = quantize_call(x, S8, scale, zp - 128)
    np.testing.assert_array_equal(ys.astype(np.int16) + 128, y)
    init = {"s": np.array(scale, F32), "z": np.array(zp, np.uint8)}
    model = ort_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], {"x": x}, init)
    ref = ort_run(model, {"x": x})
    differ = y != ref
    finite = np.where(np.isfinite(q), q, 0.0)
    is_tie = np.abs(finite - np.trunc(finite)) == 0.5
    assert max_unit_diff(y, ref) <= 1 and not (differ & ~is_tie).any()
    if scale == 0.25:
        assert differ.any()  # half to even vs half away from zero really shows


def test_quantize_nan_float16_and_hand_cases():
    y = quantize_call(F32([np.nan, 2.5, -2.5, 0.49999997, 1000.0]), U8, 1.0, 100)
    assert y.tolist() == [255, 103, 97, 100, 255]
    ys = quantize_call(F32([np.nan, -1000.0]), S8, 1.0, 0)
    assert ys.tolist() == [127, -128]
    h = np.array([0.5, 1.5, -3.25, 60000], np.float16)
    assert quantize_call(h, U8, 0.5, 10, T.TENSOR_FLOAT16).tolist() == [11, 13, 3, 255]


def test_quantize_bad_signatures():
    f = ArgInfo(int(T.TENSOR_FLOAT32), (3,))
    expect_invalid(
        Op.QUANTIZE, [f], [ArgInfo(int(T.TENSOR_FLOAT32), (3,))], "output 0 has type TENSOR_FLOAT32"
    )
    expect_invalid(Op.QUANTIZE, [Q(X, 0.1, 0)], [out(U8, 0.1, 0)], "input has type TENSOR_QUANT8_ASYMM")
    expect_invalid(Op.QUANTIZE, [f], [out(U8, 0.0, 0)], "output 0 has scale 0.0")


def dequantize_call(arg: ArgInfo, value: np.ndarray, out_type=T.TENSOR_FLOAT32) -> np.ndarray:
    info = ArgInfo(arg.type, arg.shape, arg.scale, arg.zero_point, arg.channel_quant, value)
    (y,) = qcall(Op.DEQUANTIZE, [info], [ArgInfo(int(out_type), ())])
    return y


@pytest.mark.parametrize(
    "dtype, scale, zp", [(np.uint8, 0.1, 128), (np.uint8, 0.037, 3), (np.int8, 0.02, -7)]
)
def test_dequantize_matches_onnxruntime_exactly(dtype, scale, zp):
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(4, 64)
    t = U8 if dtype == np.uint8 else S8
    y = dequantize_call(ArgInfo(int(t), x.shape, scale, zp), x)
    init = {"s": np.array(scale, F32), "z": np.array(zp, dtype)}
    ref = ort_run(ort_model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])], {"x": x}, init,
                            output_dtype=np.float32), {"x": x})  # fmt: skip
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(y, (x.astype(np.int32) - zp).astype(F32) * F32(scale))
    h = dequantize_call(ArgInfo(int(t), x.shape, scale, zp), x, T.TENSOR_FLOAT16)
    assert h.dtype == np.float16
    np.testing.assert_array_equal(h, y.astype(np.float16))
    if t == U8:  # the signed twin dequantizes to the very same floats
        np.testing.assert_array_equal(
            dequantize_call(ArgInfo(int(S8), x.shape, scale, zp - 128), to_signed(x)), y
        )


def test_dequantize_symmetric_and_per_channel():
    x = np.arange(-128, 128, dtype=np.int8).reshape(4, 8, 8)
    y = dequantize_call(ArgInfo(int(T.TENSOR_QUANT8_SYMM), x.shape, 0.05, 0), x)
    np.testing.assert_array_equal(y, x.astype(F32) * F32(0.05))
    scales = (0.5, 0.01, 0.003, 2.0, 0.1, 0.2, 0.3, 0.4)
    cq = SymmPerChannelQuantParams(scales, 1)
    y = dequantize_call(ArgInfo(int(T.TENSOR_QUANT8_SYMM_PER_CHANNEL), x.shape, channel_quant=cq), x)
    init = {"s": np.array(scales, F32), "z": np.zeros(8, np.int8)}
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    ref = ort_run(ort_model([node], {"x": x}, init, output_dtype=np.float32), {"x": x})
    np.testing.assert_array_equal(y, ref)


def test_dequantize_bad_signatures():
    x = np.zeros((2, 3), np.int8)
    pc = T.TENSOR_QUANT8_SYMM_PER_CHANNEL
    bad = [
        (ArgInfo(int(U8), x.shape, 0.1, 0), T.TENSOR_INT32, "output 0 has type TENSOR_INT32"),
        (ArgInfo(int(T.TENSOR_INT32), x.shape), T.TENSOR_FLOAT32, "input has type TENSOR_INT32"),
        (ArgInfo(int(T.TENSOR_QUANT8_SYMM), x.shape, 0.1, 3), T.TENSOR_FLOAT32, "zero point 3, expected 0"),
        (ArgInfo(int(pc), x.shape, channel_quant=SymmPerChannelQuantParams((0.1, 0.2), 1)), T.TENSOR_FLOAT32,
         "3 channels along dimension 1, but 2 scales"),
        (ArgInfo(int(pc), x.shape, channel_quant=SymmPerChannelQuantParams((0.1, 0.2), 2)), T.TENSOR_FLOAT32,
         "channel_dim 2 is out of range"),
        (ArgInfo(int(pc), x.shape), T.TENSOR_FLOAT32, "no per-channel scales"),
    ]  # fmt: skip
    for arg, out_type, match in bad:
        with pytest.raises(HalError, match=match) as e:
            dequantize_call(arg, x, out_type)
        assert e.value.status == ErrorStatus.INVALID_ARGUMENT
