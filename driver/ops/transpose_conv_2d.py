"""TRANSPOSE_CONV_2D: the gradient of CONV_2D with respect to its input (a "deconvolution").

Inputs (explicit padding, 11): 0 input [N, H, W, Cin] (NCHW when the layout flag is set);
1 filter [Cout, KH, KW, Cin]; 2 bias [Cout]; 3-6 padding left, right, top, bottom (left and
top >= 0; right and bottom may be negative); 7-8 strides (width, height); 9 fused activation;
10 layout (BOOL).
Inputs (implicit padding, 9): 0-2 as above; 3 output shape (TENSOR_INT32 [4], in the layout's
order; only its height and width are read); 4 padding scheme; 5-6 strides; 7 fused activation;
8 layout. The paddings come from the requested output size O along each axis: none for VALID;
for SAME, t = (ceil(O/s) - 1)*s + K, head = (t - O)//2 when t > O else 0, tail = t - O - head.
Output size (H - 1)*sh + KH - top - bottom by (W - 1)*sw + KW - left - right, each > 0; every
input pixel scatters its products into the output:
    output[b, h*sh - top + i, w*sw - left + j, k] += sum_c input[b, h, w, c] * filter[k, i, j, c]
then bias and activation. Types: TENSOR_FLOAT32 or TENSOR_FLOAT16 throughout (float16 computed
in float32 and rounded); quantized as CONV_2D: a TENSOR_QUANT8_ASYMM(_SIGNED) input with a filter
of its type or TENSOR_QUANT8_SYMM_PER_CHANNEL (channelDim 0), TENSOR_INT32 bias; the exact
integer sums plus bias are requantized per output channel with MultiplyByQuantizedMultiplier
(see `_qconv`; accumulated in float64, exact for up to Cin*KH*KW < 1.385e11 products).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from driver.ops._activation import apply_activation, parse_activation
from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._conv_common import check_filter_and_bias, constant_or_none, packed_constant
from driver.ops._params import int_tensor_input, int_values
from driver.ops._qconv import bias_i64, centered, check_exact, quant_signature, requantize
from driver.ops._quant import is_quant8
from driver.ops._spatial import check_elements, int_scalar, layout, like_input, to_f32
from driver.ops._window import channel_dim, from_nhwc, to_nhwc
from driver.ops.grouped_conv_2d import float_signature
from mlts.hal.enums import OperationType, PaddingScheme, codes
from mlts.hal.errors import invalid

NAME = "TRANSPOSE_CONV_2D"
PER_CHANNEL_DIM = 0
F32 = np.float32


@dataclass(frozen=True, slots=True)
class Params:
    pads: (
        tuple[int, int, int, int] | None
    )  # left, right, top, bottom; None: from the output shape at run time
    scheme: int  # the implicit padding scheme (0 for explicit padding)
    stride_w: int
    stride_h: int
    activation: int
    nchw: bool


def transpose_padding(out_size: int, stride: int, k: int, scheme: int) -> tuple[int, int]:
    """(head, tail) padding for an implicit scheme and requested output size (tail may be negative)."""
    if scheme != PaddingScheme.SAME:
        return 0, 0
    t = (-(-out_size // stride) - 1) * stride + k
    head = (t - out_size) // 2 if t > out_size else 0
    return head, t - out_size - head


def _parse(ins: Sequence[ArgInfo]) -> tuple[Params, np.ndarray | None]:
    explicit = len(ins) == 11
    if explicit:
        left = int_scalar(NAME, "padding left", ins, 3, minimum=0)
        right = int_scalar(NAME, "padding right", ins, 4)
        top = int_scalar(NAME, "padding top", ins, 5, minimum=0)
        bottom = int_scalar(NAME, "padding bottom", ins, 6)
        pads: tuple[int, int, int, int] | None = (left, right, top, bottom)
        scheme, at, shape = 0, 7, None
    else:
        shape = int_tensor_input(NAME, "output shape", ins[3])
        if shape is not None and shape.shape != (4,):
            raise invalid(f"{NAME}: output shape has shape {list(shape.shape)}, expected [4]")
        scheme = int_scalar(NAME, "padding scheme", ins, 4)
        if scheme not in codes(PaddingScheme):
            raise invalid(f"{NAME}: padding scheme is {scheme}, expected 1 (SAME) or 2 (VALID)")
        pads, at = None, 5
    sw = int_scalar(NAME, "stride width", ins, at, minimum=1)
    sh = int_scalar(NAME, "stride height", ins, at + 1, minimum=1)
    act = parse_activation(NAME, ins, at + 2)
    nchw = layout(NAME, ins, at + 3, optional=False)
    return Params(pads, scheme, sw, sh, act, nchw), shape


def resolve_pads(p: Params, shape: np.ndarray | None, kh: int, kw: int) -> tuple[int, int, int, int]:
    if p.pads is not None:
        return p.pads
    assert shape is not None
    if shape.shape != (4,):
        raise invalid(f"{NAME}: output shape has shape {list(shape.shape)}, expected [4]")
    oh, ow = (int(shape[2]), int(shape[3])) if p.nchw else (int(shape[1]), int(shape[2]))
    left, right = transpose_padding(ow, p.stride_w, kw, p.scheme)
    top, bottom = transpose_padding(oh, p.stride_h, kh, p.scheme)
    return left, right, top, bottom


def scatter(
    prod: np.ndarray,
    x_shape: tuple[int, ...],
    p: Params,
    pads: tuple[int, int, int, int],
    k: tuple[int, int, int],
) -> np.ndarray:
    """Per-pixel products [N*H*W, KH*KW*Cout] scattered into the cropped output [N, OH, OW, Cout]."""
    n, h, w, _ = x_shape
    kh, kw, cout = k
    left, right, top, bottom = pads
    sh, sw = p.stride_h, p.stride_w
    oh = (h - 1) * sh + kh - top - bottom
    ow = (w - 1) * sw + kw - left - right
    if oh <= 0 or ow <= 0:
        raise invalid(f"{NAME}: the output would be {oh}x{ow}; height and width must be > 0")
    full_h = max((h - 1) * sh + kh, top + oh)
    full_w = max((w - 1) * sw + kw, left + ow)
    check_elements(NAME, (n, full_h, full_w, cout))
    full = np.zeros((n, full_h, full_w, cout), dtype=prod.dtype)
    taps = prod.reshape(n, h, w, kh, kw, cout)
    for i in range(kh):
        for j in range(kw):
            full[:, i : i + (h - 1) * sh + 1 : sh, j : j + (w - 1) * sw + 1 : sw] += taps[:, :, :, i, j]
    return full[:, top : top + oh, left : left + ow]


def pack_filter(f: np.ndarray, dtype: type = F32, zero_point: int = 0) -> np.ndarray:
    """[Cout, KH, KW, Cin] to the contiguous [Cin, KH*KW*Cout] matrix (minus `zero_point`) in `dtype`."""
    f = np.asarray(f)
    mat = f.reshape(f.shape[0], -1, f.shape[3]).transpose(2, 1, 0).reshape(f.shape[3], -1)
    return np.ascontiguousarray(centered(mat, zero_point, dtype))


def _check_channels(c: int, cin: int) -> None:
    if c != cin:
        raise invalid(f"{NAME}: input has {c} channels, filter expects {cin}")


@register(OperationType.TRANSPOSE_CONV_2D)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (9, 11), outs)
    p, shape = _parse(ins)
    fshape = check_filter_and_bias(NAME, ins, 0, quant=True)
    c = channel_dim(ins[0], p.nchw)
    if c and c != fshape[3]:
        raise invalid(f"{NAME}: input has {c} channels, filter expects {fshape[3]}")
    if is_quant8(ins[0].type):
        return _prepare_quant(ins, outs, p, shape, fshape)
    t = float_signature(ins, outs)
    return _prepare_float(ins, p, shape, fshape, t)


def _prepare_float(
    ins: Sequence[ArgInfo], p: Params, shape: np.ndarray | None, fshape: tuple[int, int, int, int], t: int
) -> Run:
    cout, kh, kw, cin = fshape

    def pack(f: np.ndarray) -> np.ndarray:
        return pack_filter(to_f32(f))

    packed = packed_constant("filter", ins[1], pack, (cin, kh * kw * cout))
    bias = constant_or_none(ins[2], lambda b: to_f32(b).reshape(-1))
    const_pads = None if p.pads is None and shape is None else resolve_pads(p, shape, kh, kw)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(to_f32(args[0]), p.nchw, NAME)
        _check_channels(x.shape[3], cin)
        pads = const_pads or resolve_pads(p, int_values(None, args[3]), kh, kw)
        wmat = packed if packed is not None else pack(args[1])
        b = bias if bias is not None else to_f32(args[2]).reshape(-1)
        prod = x.reshape(-1, cin) @ wmat
        y = scatter(prod, x.shape, p, pads, (kh, kw, cout))
        y += b
        apply_activation(p.activation, y)
        return [like_input(from_nhwc(y, p.nchw), t)]

    return run


def _prepare_quant(
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    p: Params,
    shape: np.ndarray | None,
    fshape: tuple[int, int, int, int],
) -> Run:
    cout, kh, kw, cin = fshape
    q = quant_signature(NAME, ins, outs, cout, p.activation, PER_CHANNEL_DIM)
    check_exact(NAME, cin * kh * kw)
    zp_x, zp_w = q.input_zp, q.filter_zp

    def pack(f: np.ndarray) -> np.ndarray:
        return pack_filter(f, np.float64, zp_w)

    packed = packed_constant("weights", ins[1], pack, (cin, kh * kw * cout), (np.float64,))
    bias = constant_or_none(ins[2], bias_i64)
    const_pads = None if p.pads is None and shape is None else resolve_pads(p, shape, kh, kw)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x = to_nhwc(args[0], p.nchw, NAME)
        _check_channels(x.shape[3], cin)
        pads = const_pads or resolve_pads(p, int_values(None, args[3]), kh, kw)
        wmat = packed if packed is not None else pack(args[1])
        b = bias if bias is not None else bias_i64(args[2])
        prod = centered(x, zp_x).reshape(-1, cin) @ wmat  # exact integers in float64
        acc = scatter(prod, x.shape, p, pads, (kh, kw, cout))
        return [from_nhwc(requantize(acc, b, q), p.nchw)]

    return run
