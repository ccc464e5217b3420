"""CONV_2D: NHWC (or NCHW) input convolved with an [Cout,KH,KW,Cin] filter, plus bias and fused activation.

Explicit padding (10, 11 or 13 inputs) or implicit SAME/VALID (7, 8 or 10), optional layout and
dilation. Pointwise convolutions are one matmul; the rest are im2col then one matmul.

Quantized (NNAPI 1.3): a TENSOR_QUANT8_ASYMM input takes a TENSOR_QUANT8_ASYMM filter (any zero
point) or a TENSOR_QUANT8_SYMM_PER_CHANNEL one (channelDim 0), a TENSOR_QUANT8_ASYMM_SIGNED input a
TENSOR_QUANT8_ASYMM_SIGNED or per-channel filter; bias TENSOR_INT32, output of the input's type.
The input is centred (x - zp_x, so padding is 0 = the zero point) into float32 or float64 (whichever `_qconv.accumulation_dtype`
proves exact) and multiplied by the centred filter: an exact integer GEMM (see `_qconv`), then requantized per channel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._activation import apply_activation
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._conv_common import (
    bias_vector,
    check_filter_and_bias,
    constant_or_none,
    is_explicit,
    packed_constant,
)
from driver.ops._params import as_f32, float_outputs
from driver.ops._qconv import (
    bias_i64,
    centered,
    centered_padded,
    check_exact,
    packed_weights,
    quant_signature,
    requantize,
)
from driver.ops._quant import is_quant8
from driver.ops._window import (
    Geometry,
    WindowParams,
    channel_dim,
    from_nhwc,
    geometry,
    parse_window_params,
    to_nhwc,
)
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "CONV_2D"
PER_CHANNEL_DIM = 0  # per-channel filter scales run along Cout


def pack_filter(f: np.ndarray) -> np.ndarray:
    """[Cout,KH,KW,Cin] to the contiguous [KH*KW*Cin, Cout] matrix the patch matrix multiplies."""
    return as_f32(np.asarray(f, dtype=np.float32).reshape(f.shape[0], -1).T)


def pack_qfilter(f: np.ndarray, zero_point: int, dtype: type = np.float64) -> np.ndarray:
    """[Cout,KH,KW,Cin] quantized to the contiguous float [KH*KW*Cin, Cout] matrix of f - zero_point."""
    f = np.asarray(f)
    return np.ascontiguousarray(centered(f.reshape(f.shape[0], -1), zero_point, dtype).T)


def _check_channels(c: int, cin: int) -> None:
    if c != cin:
        raise invalid(f"{NAME}: input has {c} channels, filter expects {cin}")


def _pointwise(g: Geometry) -> bool:
    """A 1x1 filter without padding: the strided input itself is the patch matrix."""
    return g.k_h == g.k_w == 1 and not g.padded


@register(OperationType.CONV_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (7, 8, 10, 11, 13), outs)
    explicit = is_explicit(NAME, ins, 7, (10, 11, 13), (7, 8, 10))
    quant = is_quant8(ins[0].type)
    if not quant:
        float_outputs(NAME, outs)
    fshape = check_filter_and_bias(NAME, ins, 0, quant=quant)
    p = parse_window_params(NAME, ins, 3, explicit)
    known_cin = channel_dim(ins[0], p.nchw)
    if known_cin and known_cin != fshape[3]:
        raise invalid(f"{NAME}: input has {known_cin} channels, filter expects {fshape[3]}")
    if quant:
        return _prepare_quant(ins, outs, p, fshape)
    return _prepare_float(ins, outs, p, fshape)


def _prepare_float(
    ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], p: WindowParams, fshape: tuple[int, int, int, int]
) -> Run:
    cout, kh, kw, cin = fshape
    packed = packed_constant("filter", ins[1], pack_filter, (kh * kw * cin, cout))
    bias = constant_or_none(ins[2], bias_vector)
    window, act, nchw = p.window, p.activation, p.nchw
    fast = _fast.enabled() and _fast.float32_only(ins, outs)
    if fast:
        gc = _fast.GeometryCache(NAME, window, kh, kw)
        w_c = None if packed is None else _fast.GemmWeights(packed)
        b_c = None if bias is None else _fast.Const(bias, np.float32)
        packed = None  # the kernels read w_c (its panels); the plan's record keeps the matrix while preparing

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, NAME)
        n, h, w, c = x.shape
        _check_channels(c, cin)
        if fast:
            wc = w_c if w_c is not None else _fast.GemmWeights(pack_filter(args[1]))
            bc = b_c if b_c is not None else _fast.Const(bias_vector(args[2]), np.float32)
            return [from_nhwc(_fast.conv_f32(x, gc, wc, bc, act, cout), nchw)]
        wmat = packed if packed is not None else pack_filter(args[1])
        b = bias if bias is not None else bias_vector(args[2])
        g = geometry(NAME, window, h, w, kh, kw)
        if _pointwise(g):
            cols = x[:, :: g.stride_h, :: g.stride_w, :].reshape(-1, cin)
        else:
            cols = g.im2col(g.pad(x))
        y = cols @ wmat
        y += b
        apply_activation(act, y)
        return [from_nhwc(y.reshape(n, g.out_h, g.out_w, cout), nchw)]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run`'s compiled calls for a float32 NHWC input 0 of shape `shapes[0]` at `ptrs[0]`
        (driver.bound_steps)."""
        shape, xp = shapes[0], ptrs[0]
        if not fast or nchw or w_c is None or b_c is None or len(shape) != 4 or shape[3] != cin:
            return None
        return _bind.bind_conv_f32(shape, xp, gc, w_c, b_c, act, cout, scratch)

    return Kernel(run, binding=Binding(bind))


def _prepare_quant(
    ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], p: WindowParams, fshape: tuple[int, int, int, int]
) -> Run:
    cout, kh, kw, cin = fshape
    q = quant_signature(NAME, ins, outs, cout, p.activation, PER_CHANNEL_DIM)
    check_exact(NAME, kh * kw * cin)
    zp_x, zp_w = q.input_zp, q.filter_zp
    packed, dtype = packed_weights(ins[1], lambda f: pack_qfilter(f, zp_w), 0, ins[0], (kh * kw * cin, cout))
    bias = constant_or_none(ins[2], bias_i64)
    window, nchw = p.window, p.nchw
    # The compiled path: constant weights, the integer GEMM or float32-exact sums (see _qconv), requantized in C.
    fast = _fast.quant_fast(packed, dtype, kh * kw * cin)
    if fast:
        assert packed is not None  # part of `fast`
        gc = _fast.GeometryCache(NAME, window, kh, kw)
        w_c = _fast.quant_weights(packed, kh * kw * cin, zp_x, ins[0].type)
        rq = None if bias is None else _fast.requant_params(bias, q, cout)
        packed = None  # the kernels read w_c (its panels); the plan's record keeps the matrix while preparing

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, NAME)
        n, h, w, c = x.shape
        _check_channels(c, cin)
        if fast:
            params = rq if rq is not None else _fast.requant_params(bias_i64(args[2]), q, cout)
            return [from_nhwc(_fast.conv_q8(x, zp_x, gc, w_c, params, cout), nchw)]
        g = geometry(NAME, window, h, w, kh, kw)
        wmat = packed if packed is not None else pack_qfilter(args[1], zp_w)
        b = bias if bias is not None else bias_i64(args[2])
        if _pointwise(g):
            cols = centered(x[:, :: g.stride_h, :: g.stride_w, :], zp_x, dtype).reshape(-1, cin)
        else:
            cols = g.im2col(centered_padded(x, zp_x, g, dtype))
        acc = cols @ wmat  # exact: integers within the chosen float type's exact range
        y = requantize(acc, b, q)
        return [from_nhwc(y.reshape(n, g.out_h, g.out_w, cout), nchw)]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run`'s compiled calls for an 8-bit NHWC input 0 of shape `shapes[0]` at `ptrs[0]`
        (driver.bound_steps)."""
        shape, xp = shapes[0], ptrs[0]
        if not fast or nchw or rq is None or len(shape) != 4 or shape[3] != cin:
            return None
        return _bind.bind_conv_q8(shape, xp, zp_x, gc, w_c, rq, cout, scratch)

    return Kernel(run, binding=Binding(bind))
