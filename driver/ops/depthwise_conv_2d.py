"""DEPTHWISE_CONV_2D: each input channel c convolved with filter [1,KH,KW,Cout] channels c*M..c*M+M-1.

Cout = Cin * depth_multiplier M. Explicit padding (11, 12 or 14 inputs) or implicit SAME/VALID
(8, 9 or 11), optional layout and dilation. One einsum over a strided view of all windows:
a single pass over the output, measured 1.0-2x faster than one multiply-add pass per tap.

Quantized (NNAPI 1.3): a TENSOR_QUANT8_ASYMM input takes a TENSOR_QUANT8_ASYMM filter (any zero
point) or a TENSOR_QUANT8_SYMM_PER_CHANNEL one (channelDim 3), a TENSOR_QUANT8_ASYMM_SIGNED input a
TENSOR_QUANT8_ASYMM_SIGNED or per-channel filter; bias TENSOR_INT32, output of the input's type.
The same einsum runs on the centred input (x - zp_x, padding 0) and centred filter in float32
(exact for 3x3 and any filter whose bound `_qconv.accumulation_dtype` proves) or float64 (see `_qconv`), then each output channel is requantized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._activation import apply_activation
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count, register
from driver.ops._conv_common import bias_vector, check_filter_and_bias, constant_or_none, is_explicit
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
from driver.ops._window import WindowParams, channel_dim, from_nhwc, geometry, parse_window_params, to_nhwc
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid

NAME = "DEPTHWISE_CONV_2D"
PER_CHANNEL_DIM = 3  # per-channel filter scales run along Cout, the last filter axis


def pack_filter(f: np.ndarray) -> np.ndarray:
    """[1,KH,KW,Cout] to contiguous [KH,KW,Cout] weights."""
    return as_f32(np.asarray(f).reshape(f.shape[1], f.shape[2], f.shape[3]))


def pack_qfilter(f: np.ndarray, zero_point: int) -> np.ndarray:
    """[1,KH,KW,Cout] quantized to contiguous float64 [KH,KW,Cout] weights f - zero_point."""
    f = np.asarray(f)
    return centered(f.reshape(f.shape[1], f.shape[2], f.shape[3]), zero_point)


def depthwise(windows: np.ndarray, taps_w: np.ndarray, mult: int) -> np.ndarray:
    """Windows [N,OH,OW,KH,KW,Cin] times weights [KH,KW,Cin*M] summed per window: [N,OH,OW,Cin*M]."""
    n, oh, ow, kh, kw, cin = windows.shape
    if mult == 1:
        return np.einsum("nhwijc,ijc->nhwc", windows, taps_w)
    # Output channel c*M+m reads input channel c.
    wts = taps_w.reshape(kh, kw, cin, mult)
    return np.einsum("nhwijc,ijcm->nhwcm", windows, wts).reshape(n, oh, ow, cin * mult)


def _check_channels(c: int, cin: int, mult: int) -> None:
    if c != cin:
        raise invalid(
            f"{NAME}: input has {c} channels, expected {cin} = {cin * mult} / depth multiplier {mult}"
        )


@register(OperationType.DEPTHWISE_CONV_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (8, 9, 11, 12, 14), outs)
    explicit = is_explicit(NAME, ins, 8, (11, 12, 14), (8, 9, 11))
    quant = is_quant8(ins[0].type)
    if not quant:
        float_outputs(NAME, outs)
    one, kh, kw, cout = check_filter_and_bias(NAME, ins, 3, quant=quant)
    if one != 1:
        raise invalid(f"{NAME}: filter shape is {(one, kh, kw, cout)}, expected first dimension 1")
    p = parse_window_params(NAME, ins, 3, explicit, extras=("depth multiplier",))
    (mult,) = p.extras
    if cout % mult:
        raise invalid(f"{NAME}: filter has {cout} output channels, not a multiple of depth multiplier {mult}")
    known_cin = channel_dim(ins[0], p.nchw)
    if known_cin:
        _check_channels(known_cin, cout // mult, mult)
    if quant:
        return _prepare_quant(ins, outs, p, (kh, kw, cout, mult))
    return _prepare_float(ins, outs, p, (kh, kw, cout, mult))


def _prepare_float(
    ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], p: WindowParams, dims: tuple[int, int, int, int]
) -> Run:
    kh, kw, cout, mult = dims
    packed = constant_or_none(ins[1], pack_filter)
    bias = constant_or_none(ins[2], bias_vector)
    window, act, nchw = p.window, p.activation, p.nchw
    fast = _fast.enabled() and _fast.float32_only(ins, outs)
    if fast:
        gc = _fast.GeometryCache(NAME, window, kh, kw)
        w_c = None if packed is None else _fast.Const(packed, np.float32)
        b_c = None if bias is None else _fast.Const(bias, np.float32)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, NAME)
        _check_channels(x.shape[3], cout // mult, mult)
        if fast:  # one compiled pass: taps, bias and activation
            wc = w_c if w_c is not None else _fast.Const(pack_filter(args[1]), np.float32)
            bc = b_c if b_c is not None else _fast.Const(bias_vector(args[2]), np.float32)
            return [from_nhwc(_fast.depthwise_f32(x, gc, mult, wc, bc, act), nchw)]
        taps_w = packed if packed is not None else pack_filter(args[1])
        b = bias if bias is not None else bias_vector(args[2])
        g = geometry(NAME, window, x.shape[1], x.shape[2], kh, kw)
        acc = depthwise(g.patches(g.pad(x)), taps_w, mult)
        acc += b
        apply_activation(act, acc)
        return [from_nhwc(acc, nchw)]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run`'s compiled call for a float32 NHWC input 0 of shape `shapes[0]` at `ptrs[0]`
        (driver.bound_steps)."""
        shape, xp = shapes[0], ptrs[0]
        if not fast or nchw or w_c is None or b_c is None or len(shape) != 4 or shape[3] != cout // mult:
            return None
        return _bind.bind_depthwise_f32(shape, xp, gc, mult, w_c, b_c, act)

    return Kernel(run, binding=Binding(bind))


def _prepare_quant(
    ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], p: WindowParams, dims: tuple[int, int, int, int]
) -> Run:
    kh, kw, cout, mult = dims
    q = quant_signature(NAME, ins, outs, cout, p.activation, PER_CHANNEL_DIM)
    check_exact(NAME, kh * kw)
    zp_x, zp_w = q.input_zp, q.filter_zp
    packed, dtype = packed_weights(ins[1], lambda f: pack_qfilter(f, zp_w), (0, 1), ins[0], (kh, kw, cout))
    bias = constant_or_none(ins[2], bias_i64)
    window, nchw = p.window, p.nchw
    # The compiled path sums in integers: exact for any window (mk_depthwise_q8).
    fast = _fast.enabled()
    if fast:
        gc = _fast.GeometryCache(NAME, window, kh, kw)
        w_c = None if packed is None else _fast.DepthwiseQ8Weights(packed)
        rq = None if bias is None else _fast.requant_params(bias, q, cout)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], nchw, NAME)
        _check_channels(x.shape[3], cout // mult, mult)
        if fast:
            wc = w_c if w_c is not None else _fast.DepthwiseQ8Weights(pack_qfilter(args[1], zp_w))
            params = rq if rq is not None else _fast.requant_params(bias_i64(args[2]), q, cout)
            return [from_nhwc(_fast.depthwise_q8(x, zp_x, gc, mult, wc, params), nchw)]
        g = geometry(NAME, window, x.shape[1], x.shape[2], kh, kw)
        taps_w = packed if packed is not None else pack_qfilter(args[1], zp_w)
        b = bias if bias is not None else bias_i64(args[2])
        # Exact: integers within the chosen float type's exact range (see _qconv).
        acc = depthwise(g.patches(centered_padded(x, zp_x, g, dtype)), taps_w, mult)
        return [from_nhwc(requantize(acc, b, q), nchw)]

    signed = int(ins[0].type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED)

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run`'s compiled call for an 8-bit NHWC input 0 of shape `shapes[0]` at `ptrs[0]`
        (driver.bound_steps)."""
        shape, xp = shapes[0], ptrs[0]
        if not fast or nchw or w_c is None or rq is None or len(shape) != 4 or shape[3] != cout // mult:
            return None
        return _bind.bind_depthwise_q8(shape, xp, signed, zp_x, gc, mult, w_c, rq)

    return Kernel(run, binding=Binding(bind))
