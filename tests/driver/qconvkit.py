"""Integer references, cases and onnxruntime twins for the quantized CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import helper

from mlts.hal.enums import OperationType
from tests.driver.convkit import same_pads
from tests.driver.qkit import (
    PC,
    S8,
    U8,
    Q,
    max_unit_diff,
    ort_model,
    ort_run,
    out,
    qcall,
    random_q,
    to_signed,
)
from tests.driver.requantkit import ref_mbqm

CONV, DW, FC = OperationType.CONV_2D, OperationType.DEPTHWISE_CONV_2D, OperationType.FULLY_CONNECTED


F32 = np.float32


def round_away(v: float) -> int:
    """std::round: halves away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def ref_quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: Q31 mantissa rounded half away from zero, exponent."""
    if real == 0.0:
        return 0, 0
    frac, shift = math.frexp(real)
    fixed = round_away(frac * 2**31)
    if fixed == 2**31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


def ref_activation_range(code: int, qtype: int, scale: float, zp: int) -> tuple[int, int]:
    """CalculateActivationRange{Uint8,Int8}: bounds quantized with float32 division and std::round."""
    qmin, qmax = (0, 255) if qtype == U8 else (-128, 127)

    def q(v: float) -> int:
        return zp + round_away(float(F32(v) / F32(scale)))

    return {
        0: (qmin, qmax),
        1: (max(qmin, q(0.0)), qmax),
        2: (max(qmin, q(-1.0)), min(qmax, q(1.0))),
        3: (max(qmin, q(0.0)), min(qmax, q(6.0))),
    }[code]


def ref_requant(acc: np.ndarray, reals: Sequence[float], zp: int, lo: int, hi: int) -> np.ndarray:
    """Per element: zp + MultiplyByQuantizedMultiplier(acc, QuantizeMultiplier(real of its channel)), clamped."""
    pairs = [ref_quantize_multiplier(r) for r in reals]
    flat = acc.reshape(-1, acc.shape[-1])
    res = np.empty(flat.shape, np.int64)
    for i, row in enumerate(flat.tolist()):
        for c, a in enumerate(row):
            m, e = pairs[c % len(pairs)]
            res[i, c] = min(hi, max(lo, zp + ref_mbqm(a, m, e)))
    return res.reshape(acc.shape)


def ref_pads(padding, size_hw, k_hw, stride_wh, dilation_wh) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of TFLite SAME, VALID or explicit (left, right, top, bottom) padding."""
    if padding == "VALID":
        return 0, 0, 0, 0
    if padding == "SAME":
        top, bottom = same_pads(size_hw[0], k_hw[0], stride_wh[1], dilation_wh[1])
        left, right = same_pads(size_hw[1], k_hw[1], stride_wh[0], dilation_wh[0])
        return top, bottom, left, right
    left, right, top, bottom = padding
    return top, bottom, left, right


def ref_windows(xc: np.ndarray, k_hw, padding, stride_wh, dilation_wh):
    """Yield ((i, j), [N,OH,OW,C] int64 tap view) over (x - zp) padded with zeros."""
    n, h, w, _ = xc.shape
    top, bottom, left, right = ref_pads(padding, (h, w), k_hw, stride_wh, dilation_wh)
    xp = np.pad(xc, ((0, 0), (top, bottom), (left, right), (0, 0)))
    (sw, sh), (dw, dh) = stride_wh, dilation_wh
    oh = (h + top + bottom - (k_hw[0] - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (k_hw[1] - 1) * dw - 1) // sw + 1
    for i in range(k_hw[0]):
        for j in range(k_hw[1]):
            yield (
                (i, j),
                xp[:, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw],
            )


def ref_conv_acc(x, zp_x, w, zp_w, b, padding, stride, dilation) -> np.ndarray:
    """int64 NHWC CONV_2D accumulators: bias + sum (x - zp_x)(w - zp_w), padding = zp_x; w is [Cout,KH,KW,Cin]."""
    xc = x.astype(np.int64) - zp_x
    wc = w.astype(np.int64) - zp_w
    acc = None
    for (i, j), tap in ref_windows(xc, wc.shape[1:3], padding, stride, dilation):
        term = np.einsum("nhwc,oc->nhwo", tap, wc[:, i, j, :])
        acc = term if acc is None else acc + term
    return acc + b.astype(np.int64)


def ref_dw_acc(x, zp_x, w, zp_w, b, padding, stride, dilation, mult) -> np.ndarray:
    """int64 NHWC DEPTHWISE_CONV_2D accumulators; output channel o reads input channel o // mult."""
    xc = np.repeat(x.astype(np.int64) - zp_x, mult, axis=3)
    wc = w.astype(np.int64)[0] - zp_w
    acc = None
    for (i, j), tap in ref_windows(xc, wc.shape[:2], padding, stride, dilation):
        term = tap * wc[i, j]
        acc = term if acc is None else acc + term
    return acc + b.astype(np.int64)


def params(padding, stride, extras, act, nchw, dilation) -> list:
    """NNAPI inputs after (input, filter, bias): padding, strides, extras, act, [layout, [dilations]]."""
    args = [1] if padding == "SAME" else [2] if padding == "VALID" else list(padding)
    args += [stride[0], stride[1], *extras, act]
    if nchw or dilation != (1, 1):
        args.append(bool(nchw))
    if dilation != (1, 1):
        args += list(dilation)
    return args


def f32(v: float) -> float:
    return float(F32(v))


def make_filter(rng, kind: str, shape, channel_dim: int):
    """A random filter of `kind` (u8, s8, pcu8, pcs8): (Q, zero point, per-channel scales or [scale])."""
    if kind.startswith("pc"):
        w = random_q(rng, shape, np.int8)
        w[w == -128] = -127  # symmetric range, as per-channel filters are
        scales = [f32(s) for s in rng.uniform(0.002, 0.02, shape[channel_dim])]
        return Q(w, 0.0, 0, const=True, channel_scales=scales, channel_dim=channel_dim), 0, scales
    dtype = np.uint8 if kind == "u8" else np.int8
    zp = int(rng.integers(100, 156)) if kind == "u8" else int(rng.integers(-28, 28))
    scale = f32(rng.uniform(0.002, 0.02))
    return Q(random_q(rng, shape, dtype), scale, zp, const=True), zp, [scale]


def input_of(rng, kind: str, shape):
    """Random input of the input type `kind` implies: (array, type, zero point)."""
    if kind in ("u8", "pcu8"):
        return random_q(rng, shape, np.uint8), U8, int(rng.integers(90, 166))
    return random_q(rng, shape, np.int8), S8, int(rng.integers(-38, 38))


def random_bias(rng, cout: int, k: int) -> np.ndarray:
    return rng.integers(-300 * k, 300 * k, size=cout).astype(np.int32)


def scales_for(rng, xt, acc: np.ndarray, sws: Sequence[float], act: int, spread: float = 120.0):
    """(input scale, output scale, output zero point) that spread the results over the output range.

    The largest real result maps to `spread` output units, or just beyond the RELU1/RELU6 bound so
    that the activation clamps some values and keeps many distinct ones.
    """
    sy = f32(rng.uniform(0.02, 0.06))
    target = {2: 1.5, 3: 8.0}.get(act, spread * sy)
    sx = f32(target / (max(float(np.abs(acc).max()), 1.0) * max(sws)))
    zy = int(rng.integers(100, 156)) if xt == U8 else int(rng.integers(-28, 28))
    return sx, sy, zy


def bias_q(b: np.ndarray, sx: float, sws: Sequence[float], per_channel: bool) -> Q:
    """The constant bias operand: scale input * filter scale, or 0 with a per-channel filter."""
    return Q(b, 0.0 if per_channel else f32(sx * sws[0]), 0, const=True)


def check_vs_ort(got: np.ndarray, ref: np.ndarray) -> None:
    """At most one unit off onnxruntime (float requantization, ties to even), mostly identical."""
    assert max_unit_diff(got, ref) <= 1
    assert np.mean(got == ref) >= 0.95, f"only {np.mean(got == ref):.3f} identical"


def ort_qconv(x, sx, zx, w_oihw, sws, zw, b, sy, zy, group, attrs, per_channel) -> np.ndarray:
    """onnxruntime QLinearConv on NCHW data (one output type as the input's)."""
    wdt = w_oihw.dtype
    inits = {
        "xs": np.array(sx, F32),
        "xz": np.array(zx, x.dtype),
        "w": w_oihw,
        "ws": np.array(sws if per_channel else sws[0], F32),
        "wz": np.zeros(len(sws), wdt) if per_channel else np.array(zw, wdt),
        "ys": np.array(sy, F32),
        "yz": np.array(zy, x.dtype),
        "b": b,
    }
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], group=group, **attrs
    )
    return ort_run(ort_model([node], {"x": x}, inits, output_dtype=x.dtype), {"x": x})


def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


CONV_CASES = [
    (1, 7, 7, 3, 4, 3, 3, "SAME", (1, 1), 0, False, (1, 1), "u8"),
    (2, 8, 9, 4, 5, 3, 3, "VALID", (2, 2), 1, False, (1, 1), "s8"),
    (1, 9, 7, 3, 5, 3, 2, (1, 2, 0, 1), (2, 1), 3, False, (1, 1), "pcu8"),
    (1, 9, 9, 2, 3, 3, 3, "SAME", (1, 1), 2, True, (2, 2), "pcs8"),
    (2, 6, 6, 8, 16, 1, 1, "VALID", (1, 1), 0, False, (1, 1), "u8"),
    (1, 7, 7, 8, 6, 1, 1, "SAME", (2, 2), 1, True, (1, 1), "pcs8"),
    (1, 8, 6, 3, 4, 3, 3, (1, 1, 2, 2), (2, 2), 0, False, (1, 2), "s8"),
    (1, 5, 6, 3, 4, 1, 1, (1, 0, 0, 1), (1, 1), 0, False, (1, 1), "pcu8"),
    (1, 11, 11, 3, 8, 3, 3, "SAME", (2, 2), 3, False, (1, 1), "u8"),
]


def conv_setup(rng, case, spread=120.0):
    """Random operands for a CONV_CASES row and the exact int64 accumulators."""
    n, h, w, cin, cout, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    x, xt, zx = input_of(rng, kind, (n, h, w, cin))
    fq, zw, sws = make_filter(rng, kind, (cout, kh, kw, cin), 0)
    b = random_bias(rng, cout, kh * kw * cin)
    acc = ref_conv_acc(x, zx, fq.value, zw, b, padding, stride, dilation)
    sx, sy, zy = scales_for(rng, xt, acc, sws, act, spread)
    bq = bias_q(b, sx, sws, kind.startswith("pc"))
    return x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy


def run_conv_case(rng, case):
    """The kernel's NHWC output for a CONV_CASES row, its operands, and the activation bounds."""
    n, h, w, cin, cout, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = conv_setup(rng, case)
    xin = nchw(x) if is_nchw else x
    (got,) = qcall(
        CONV,
        [Q(xin, sx, zx), fq, bq, *params(padding, stride, (), act, is_nchw, dilation)],
        [out(xt, sy, zy)],
    )
    assert got.dtype == (np.uint8 if xt == U8 else np.int8)
    got = nhwc(got) if is_nchw else got
    lo, hi = ref_activation_range(act, xt, sy, zy)
    return got, (x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy), (lo, hi)


DW_CASES = [
    (1, 8, 8, 3, 1, 3, 3, "SAME", (1, 1), 0, False, (1, 1), "u8"),
    (2, 9, 7, 4, 2, 3, 3, "VALID", (2, 2), 1, False, (1, 1), "s8"),
    (1, 7, 9, 2, 2, 3, 2, (0, 2, 1, 0), (1, 2), 2, False, (1, 1), "pcu8"),
    (1, 10, 10, 3, 1, 3, 3, "SAME", (1, 1), 3, True, (2, 2), "pcs8"),
    (2, 6, 6, 5, 2, 3, 3, "SAME", (2, 2), 0, True, (2, 1), "u8"),
    (1, 12, 12, 16, 1, 3, 3, "SAME", (2, 2), 3, False, (1, 1), "pcu8"),
    (1, 6, 6, 2, 3, 5, 5, (2, 2, 2, 2), (1, 1), 0, False, (1, 1), "pcs8"),
    # Rows wide enough for the compiled kernel's blocks of four pixels, channel groups of 16 and 8 and
    # single channels, and the geometries its copied rows must get right.
    (1, 5, 21, 27, 1, 3, 3, "SAME", (1, 1), 0, False, (1, 1), "u8"),  # 16 + 8 + 3 channels, 4 + 1 pixels
    (2, 11, 18, 40, 1, 3, 3, "SAME", (2, 2), 1, False, (1, 1), "s8"),  # padding below and right only
    (1, 9, 19, 24, 1, 3, 3, (2, 1, 3, 2), (1, 1), 3, False, (2, 2), "pcs8"),  # every edge, dilated
    (1, 6, 17, 5, 3, 3, 3, "SAME", (1, 1), 0, False, (1, 1), "pcu8"),  # depth multiplier 3, wide rows
    (1, 8, 12, 16, 1, 5, 5, "SAME", (1, 2), 2, False, (1, 1), "u8"),  # 25 taps: an odd last tap
    (1, 4, 9, 24, 1, 1, 1, "VALID", (1, 1), 0, False, (1, 1), "s8"),  # one tap
    (1, 7, 10, 32, 1, 2, 2, "VALID", (2, 1), 0, False, (1, 1), "pcu8"),  # even taps, rows read in place
]


def dw_setup(rng, case):
    n, h, w, cin, mult, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    cout = cin * mult
    x, xt, zx = input_of(rng, kind, (n, h, w, cin))
    fq, zw, sws = make_filter(rng, kind, (1, kh, kw, cout), 3)
    b = random_bias(rng, cout, kh * kw)
    acc = ref_dw_acc(x, zx, fq.value, zw, b, padding, stride, dilation, mult)
    sx, sy, zy = scales_for(rng, xt, acc, sws, act)
    bq = bias_q(b, sx, sws, kind.startswith("pc"))
    return x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy


def run_dw_case(rng, case):
    """The kernel's NHWC output for a DW_CASES row, its operands, and the activation bounds."""
    n, h, w, cin, mult, kh, kw, padding, stride, act, is_nchw, dilation, kind = case
    x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy = dw_setup(rng, case)
    xin = nchw(x) if is_nchw else x
    p = params(padding, stride, (mult,), act, is_nchw, dilation)
    (got,) = qcall(DW, [Q(xin, sx, zx), fq, bq, *p], [out(xt, sy, zy)])
    assert got.dtype == (np.uint8 if xt == U8 else np.int8)
    got = nhwc(got) if is_nchw else got
    lo, hi = ref_activation_range(act, xt, sy, zy)
    return got, (x, xt, zx, sx, fq, zw, sws, bq, acc, sy, zy), (lo, hi)


FC_CASES = [
    ((3, 16), 16, 5, 0, "u8"),
    ((2, 3, 8), 12, 7, 1, "s8"),
    ((1, 1, 1, 64), 64, 10, 0, "u8"),
    ((4, 20), 20, 6, 3, "s8"),
]


def fc_setup(rng, case):
    shape, size, units, act, kind = case
    x, xt, zx = input_of(rng, kind, shape)
    wq, zw, sws = make_filter(rng, kind, (units, size), 0)
    b = random_bias(rng, units, size)
    acc = (x.reshape(-1, size).astype(np.int64) - zx) @ (wq.value.astype(np.int64) - zw).T + b
    sx, sy, zy = scales_for(rng, xt, acc, sws, act)
    bq = bias_q(b, sx, sws, False)
    return x, xt, zx, sx, wq, zw, sws, bq, acc, sy, zy


def ort_fc_qdq(x2, sx, zx, w, sw, zw, b, sb, sy, zy) -> np.ndarray:
    """DequantizeLinear -> MatMul -> Add(float bias) -> QuantizeLinear with onnxruntime."""
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
        helper.make_node("MatMul", ["xf", "wf"], ["m"]),
        helper.make_node("Add", ["m", "bf"], ["yf"]),
        helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"]),
    ]
    inits = {
        "xs": np.array(sx, F32), "xz": np.array(zx, x2.dtype),
        "w": np.ascontiguousarray(w.T), "ws": np.array(sw, F32), "wz": np.array(zw, w.dtype),
        "bf": (b.astype(np.float64) * sb).astype(F32), "ys": np.array(sy, F32), "yz": np.array(zy, x2.dtype),
    }  # fmt: skip
    return ort_run(ort_model(nodes, {"x": x2}, inits, output_dtype=x2.dtype), {"x": x2})


def signed_twin(q: Q) -> Q:
    """The int8 operand holding the same real values as a uint8 one (values and zero point - 128)."""
    if q.value.dtype != np.uint8:
        return q
    return Q(to_signed(q.value), q.scale, q.zero_point - 128, q.const, q.channel_scales, q.channel_dim)


def one_by_one(x_minus_zp: int, sx: float, sw: float, sy: float, bias: int = 0, act: int = 0, zy: int = 128):
    """A 1x1x1x1 CONV_2D of (x - 128) = x_minus_zp with filter (w - 128) = 1: acc = x_minus_zp + bias."""
    x = Q(np.array([[[[128 + x_minus_zp]]]], np.uint8), sx, 128)
    f = Q(np.array([[[[129]]]], np.uint8), sw, 128, const=True)
    b = Q(np.array([bias], np.int32), f32(sx * sw), 0, const=True)
    (y,) = qcall(CONV, [x, f, b, 2, 1, 1, act], [out(U8, sy, zy)])
    return int(y.reshape(-1)[0]) - zy


def conv_ops(xt=U8, ft=U8, bias_scale=0.25 * 0.5, bias_zp=0, out_type=None, pc_dim=0, pc_bias_scale=0.0):
    """A valid-looking CONV_2D input list except for the one thing a test changes."""
    x = Q(np.zeros((1, 4, 4, 2), np.uint8 if xt == U8 else np.int8), 0.25, 0)
    if ft == PC:
        f = Q(np.zeros((3, 3, 3, 2), np.int8), 0.0, 0, True, (0.5, 0.5, 0.5), pc_dim)
        b = Q(np.zeros(3, np.int32), pc_bias_scale, bias_zp, const=True)
    else:
        f = Q(np.zeros((3, 3, 3, 2), np.uint8 if ft == U8 else np.int8), 0.5, 0, const=True)
        b = Q(np.zeros(3, np.int32), bias_scale, bias_zp, const=True)
    return [x, f, b, 1, 1, 1, 0], [out(out_type or xt, 1.0, 0)]
