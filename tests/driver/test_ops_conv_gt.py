"""GROUPED_CONV_2D and TRANSPOSE_CONV_2D: every type, both padding forms and layouts.

Float32 against onnxruntime (Conv with group, ConvTranspose) and float64 spec loops; float16
against the spec loops with the fp16 tolerance; quant8 asymm and signed with per-tensor and
per-channel filters bit for bit against an int64 accumulation plus the scalar TFLite
requantization of tests/driver/test_qconv.py.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from tests.driver.convkit import ort_attrs
from tests.driver.opkit import activation, ort_node
from tests.driver.qconvkit import (
    input_of,
    make_filter,
    random_bias,
    ref_activation_range,
    ref_conv_acc,
    ref_pads,
    ref_requant,
    scales_for,
)
from tests.driver.qkit import Q, out, qcall
from tests.driver.spatialkit import (
    F16T,
    F32T,
    U8,
    as_type,
    call,
    check_exact,
    check_float,
    nchw_to_nhwc,
    nhwc_to_nchw,
    prepare,
    spec_transpose_acc,
    tensor,
)

GROUPED, TCONV = OperationType.GROUPED_CONV_2D, OperationType.TRANSPOSE_CONV_2D
FLOATS = [F32T, F16T]


@pytest.fixture
def rng(request) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def pad_args(padding):
    return [1] if padding == "SAME" else [2] if padding == "VALID" else list(padding)


# ------------------------------------------------------------ GROUPED_CONV_2D references


def spec_grouped(x, f, b, groups, padding, stride, act):
    """float64 NHWC grouped convolution written from the spec (f is [Cout, KH, KW, Cin/G])."""
    x, f, b = (np.asarray(v, np.float64) for v in (x, f, b))
    n, h, w, cin = x.shape
    cout, kh, kw, cg = f.shape
    top, bottom, left, right = ref_pads(padding, (h, w), (kh, kw), stride, (1, 1))
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    sw, sh = stride
    oh = (h + top + bottom - kh) // sh + 1
    ow = (w + left + right - kw) // sw + 1
    y = np.zeros((n, oh, ow, cout))
    per = cout // groups
    for k in range(cout):
        g = k // per
        for i in range(kh):
            for j in range(kw):
                tap = xp[
                    :, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw, g * cg : (g + 1) * cg
                ]
                y[..., k] += tap @ f[k, i, j]
    return activation(act, y + b)


GROUPED_CASES = [
    # (N, H, W, Cin, Cout, G, KH, KW, padding, (stride_w, stride_h), act)
    (1, 5, 5, 4, 6, 2, 3, 3, "SAME", (1, 1), 0),
    (2, 6, 7, 6, 3, 3, 2, 3, "VALID", (2, 1), 1),
    (1, 5, 4, 4, 8, 4, 3, 2, (1, 0, 2, 1), (1, 2), 3),
    (1, 4, 4, 3, 3, 1, 1, 1, "VALID", (1, 1), 2),
    (1, 4, 5, 6, 6, 6, 3, 3, "SAME", (2, 2), 0),
]


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize(
    ("n", "h", "w", "cin", "cout", "g", "kh", "kw", "padding", "stride", "act"), GROUPED_CASES
)
def test_grouped_conv_float(rng, t, nchw, const, n, h, w, cin, cout, g, kh, kw, padding, stride, act):
    x = as_type(rng.uniform(-1, 1, (n, h, w, cin)), t)
    f = as_type(rng.uniform(-1, 1, (cout, kh, kw, cin // g)), t)
    b = as_type(rng.uniform(-1, 1, cout), t)
    xin = nhwc_to_nchw(x) if nchw else x
    ins = [tensor(xin, t), tensor(f, t, const=const), tensor(b, t, const=const)]
    y = call(GROUPED, [*ins, *pad_args(padding), *stride, g, act, nchw])
    y = nchw_to_nhwc(y) if nchw else y
    expected = spec_grouped(x, f, b, g, padding, stride, act)
    check_float(y, expected, t)
    if t == F32T:
        ref = ort_node(
            "Conv",
            {"x": nhwc_to_nchw(x), "w": np.ascontiguousarray(f.transpose(0, 3, 1, 2)), "b": b},
            group=g,
            **ort_attrs(padding, stride, (1, 1)),
        )
        check_float(y, nchw_to_nhwc(activation(act, ref)), F32T)


@pytest.mark.parametrize("kind", ["u8", "s8", "pcu8", "pcs8"])
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize(
    ("n", "h", "w", "cin", "cout", "g", "kh", "kw", "padding", "stride", "act"), GROUPED_CASES
)
def test_grouped_conv_quant_bit_exact(rng, kind, nchw, n, h, w, cin, cout, g, kh, kw, padding, stride, act):
    x, xt, zx = input_of(rng, kind, (n, h, w, cin))
    fq, zw, sws = make_filter(rng, kind, (cout, kh, kw, cin // g), 0)
    b = random_bias(rng, cout, kh * kw * cin // g)
    cg, per = cin // g, cout // g
    acc = np.concatenate(
        [
            ref_conv_acc(
                x[..., k * cg : (k + 1) * cg], zx, fq.value[k * per : (k + 1) * per], zw, b[k * per : (k + 1) * per],
                padding, stride, (1, 1),
            )
            for k in range(g)
        ],
        axis=3,
    )  # fmt: skip
    sx, sy, zy = scales_for(rng, xt, acc, sws, act)
    bias_scale = 0.0 if kind.startswith("pc") else float(np.float32(sx) * np.float32(sws[0]))
    xin = nhwc_to_nchw(x) if nchw else x
    (y,) = qcall(
        GROUPED,
        [Q(xin, sx, zx), fq, Q(b, bias_scale, 0, const=True), *pad_args(padding), *stride, g, act, nchw],
        [out(xt, sy, zy)],
    )
    y = nchw_to_nhwc(y) if nchw else y
    lo, hi = ref_activation_range(act, xt, sy, zy)
    reals = [np.float64(np.float32(sx)) * np.float64(s) / np.float64(np.float32(sy)) for s in sws]
    expected = ref_requant(acc, reals, zy, lo, hi).astype(y.dtype)
    check_exact(y, expected)


# ------------------------------------------------------------ TRANSPOSE_CONV_2D references


def spec_transpose_pads(padding, out_hw, k_hw, stride):
    """(left, right, top, bottom) of an implicit scheme for the requested output size."""
    if padding == "VALID":
        return 0, 0, 0, 0
    res = []
    for o, k, s in ((out_hw[1], k_hw[1], stride[0]), (out_hw[0], k_hw[0], stride[1])):
        t = ((o + s - 1) // s - 1) * s + k
        head = (t - o) // 2 if t > o else 0
        res += [head, t - o - head]
    return tuple(res)


TCONV_CASES = [
    # (N, H, W, Cin, Cout, KH, KW, padding, (stride_w, stride_h), act, output HW for implicit padding)
    (1, 3, 3, 2, 3, 3, 3, (1, 1, 1, 1), (2, 2), 0, None),
    (2, 2, 4, 3, 2, 2, 3, (0, 0, 0, 0), (1, 1), 1, None),
    (1, 3, 2, 2, 2, 3, 2, (0, -1, 1, -2), (2, 3), 3, None),
    (1, 3, 3, 2, 3, 3, 3, "SAME", (2, 2), 0, (6, 6)),
    (1, 3, 3, 2, 3, 3, 3, "SAME", (2, 2), 2, (5, 5)),
    (1, 2, 3, 3, 2, 2, 2, "VALID", (2, 1), 0, (3, 6)),
    (2, 4, 3, 1, 2, 1, 1, "SAME", (1, 1), 1, (4, 3)),
]


def tconv_inputs(x_in, fin, bin_, padding, stride, act, out_hw, nchw, n, cout):
    if out_hw is None:
        return [x_in, fin, bin_, *padding, *stride, act, nchw]
    shape = [n, cout, *out_hw] if nchw else [n, *out_hw, cout]
    return [x_in, fin, bin_, np.array(shape), 1 if padding == "SAME" else 2, *stride, act, nchw]


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize(
    ("n", "h", "w", "cin", "cout", "kh", "kw", "padding", "stride", "act", "out_hw"), TCONV_CASES
)
def test_transpose_conv_float(rng, t, nchw, const, n, h, w, cin, cout, kh, kw, padding, stride, act, out_hw):
    x = as_type(rng.uniform(-1, 1, (n, h, w, cin)), t)
    f = as_type(rng.uniform(-1, 1, (cout, kh, kw, cin)), t)
    b = as_type(rng.uniform(-1, 1, cout), t)
    xin = nhwc_to_nchw(x) if nchw else x
    ins = tconv_inputs(
        tensor(xin, t),
        tensor(f, t, const=const),
        tensor(b, t, const=const),
        padding,
        stride,
        act,
        out_hw,
        nchw,
        n,
        cout,
    )
    y = call(TCONV, ins)
    y = nchw_to_nhwc(y) if nchw else y
    pads = padding if out_hw is None else spec_transpose_pads(padding, out_hw, (kh, kw), stride)
    expected = activation(act, spec_transpose_acc(x, f, pads, stride) + b.astype(np.float64))
    check_float(y, expected, t)
    if out_hw is not None:
        assert y.shape[1:3] == out_hw  # these cases request a reachable size
    if t == F32T and min(pads) >= 0:
        left, right, top, bottom = pads
        ref = ort_node(
            "ConvTranspose",
            {"x": nhwc_to_nchw(x), "w": np.ascontiguousarray(f.transpose(3, 0, 1, 2)), "b": b},
            strides=[stride[1], stride[0]],
            pads=[top, left, bottom, right],
        )
        check_float(y, nchw_to_nhwc(activation(act, ref)), F32T)


def test_transpose_conv_run_time_output_shape():
    x = np.ones((1, 2, 2, 1), np.float32)
    f = np.ones((1, 3, 3, 1), np.float32)
    shape = tensor(np.array([1, 4, 4, 1]), OperandType.TENSOR_INT32)
    run, args = prepare(
        TCONV, [tensor(x), tensor(f, const=True), tensor(np.zeros(1)), shape, 1, 2, 2, 0, False]
    )
    y = run(args)[0]
    check_float(
        y, spec_transpose_acc(x, f, spec_transpose_pads("SAME", (4, 4), (3, 3), (2, 2)), (2, 2)), F32T
    )
    args[3] = np.array([1, 3, 3, 1], np.int32)
    assert run(args)[0].shape == (1, 3, 3, 1)


@pytest.mark.parametrize("kind", ["u8", "s8", "pcu8", "pcs8"])
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize(
    ("n", "h", "w", "cin", "cout", "kh", "kw", "padding", "stride", "act", "out_hw"), TCONV_CASES
)
def test_transpose_conv_quant_bit_exact(
    rng, kind, nchw, n, h, w, cin, cout, kh, kw, padding, stride, act, out_hw
):
    x, xt, zx = input_of(rng, kind, (n, h, w, cin))
    fq, zw, sws = make_filter(rng, kind, (cout, kh, kw, cin), 0)
    b = random_bias(rng, cout, kh * kw * cin)
    pads = padding if out_hw is None else spec_transpose_pads(padding, out_hw, (kh, kw), stride)
    acc = spec_transpose_acc(x.astype(np.int64) - zx, fq.value.astype(np.int64) - zw, pads, stride, np.int64)
    acc += b.astype(np.int64)
    sx, sy, zy = scales_for(rng, xt, acc, sws, act)
    bias_scale = 0.0 if kind.startswith("pc") else float(np.float32(sx) * np.float32(sws[0]))
    xin = nhwc_to_nchw(x) if nchw else x
    ins = tconv_inputs(
        Q(xin, sx, zx), fq, Q(b, bias_scale, 0, const=True), padding, stride, act, out_hw, nchw, n, cout
    )
    (y,) = qcall(TCONV, ins, [out(xt, sy, zy)])
    y = nchw_to_nhwc(y) if nchw else y
    lo, hi = ref_activation_range(act, xt, sy, zy)
    reals = [np.float64(np.float32(sx)) * np.float64(s) / np.float64(np.float32(sy)) for s in sws]
    check_exact(y, ref_requant(acc, reals, zy, lo, hi).astype(y.dtype))


# ------------------------------------------------------------ signature errors

XF = np.ones((1, 4, 4, 4), np.float32)
FG = np.ones((4, 3, 3, 2), np.float32)
BF = np.zeros(4, np.float32)


def _float_conv(x=XF, f=FG, b=BF, xt=F32T, ft=F32T, bt=F32T):
    return [tensor(x, xt), tensor(f, ft, const=True), tensor(b, bt, const=True)]


@pytest.mark.parametrize(
    ("op", "ins", "words"),
    [
        (GROUPED, [*_float_conv(), 1, 1, 1, 2, 0], "inputs"),
        (GROUPED, [*_float_conv(), 1, 1, 1, 3, 0, False], "num_groups"),
        (GROUPED, [*_float_conv(), 1, 1, 1, 1, 0, False], "channels"),
        (GROUPED, [*_float_conv(), 1, 1, 1, 0, 0, False], "num_groups"),
        (GROUPED, [*_float_conv(), 3, 1, 1, 2, 0, False], "padding scheme"),
        (GROUPED, [*_float_conv(), 1, 0, 1, 2, 0, False], "stride"),
        (GROUPED, [*_float_conv(), 1, 1, 1, 2, 9, False], "activation"),
        (GROUPED, [*_float_conv(ft=F16T), 1, 1, 1, 2, 0, False], "input 1 has type TENSOR_FLOAT16"),
        (GROUPED, [*_float_conv(b=np.zeros(3, np.float32)), 1, 1, 1, 2, 0, False], "bias"),
        (GROUPED, [*_float_conv(x=np.ones((1, 2, 2, 4), np.float32)), 0, 0, 0, 0, 1, 1, 2, 0, False], "smaller than the effective filter"),
        (TCONV, [*_float_conv(f=np.ones((2, 3, 3, 4), np.float32), b=np.zeros(2)), 1, 1, 1, 0, False], "inputs"),
        (TCONV, [*_float_conv(f=np.ones((2, 3, 3, 3), np.float32), b=np.zeros(2)), 0, 0, 0, 0, 1, 1, 0, False], "channels"),
        (TCONV, [*_float_conv(f=np.ones((2, 3, 3, 4), np.float32), b=np.zeros(2)), -1, 0, 0, 0, 1, 1, 0, False], "padding left"),
        (TCONV, [*_float_conv(f=np.ones((2, 3, 3, 4), np.float32), b=np.zeros(2)), 0, 9, 0, 0, 1, 1, 0, False], "output would be"),
        (TCONV, [*_float_conv(f=np.ones((2, 3, 3, 4), np.float32), b=np.zeros(2)), np.array([1, 4, 4]), 1, 1, 1, 0, False], "output shape"),
        (TCONV, [*_float_conv(f=np.ones((2, 3, 3, 4), np.float32), b=np.zeros(2)), np.array([1, 4, 4, 2]), 0, 1, 1, 0, False], "padding scheme"),
    ],
)  # fmt: skip
def test_invalid_operations_are_refused(op, ins, words):
    with pytest.raises(HalError) as e:
        run, args = prepare(op, ins)
        run(args)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message and words in e.value.message, e.value.message


def test_quant_bias_scale_and_filter_type_are_checked():
    x = Q(np.zeros((1, 3, 3, 2), np.uint8), 0.5, 128)
    f = Q(np.zeros((2, 1, 1, 2), np.uint8), 0.25, 128, const=True)
    with pytest.raises(HalError, match="bias scale"):
        qcall(
            TCONV,
            [x, f, Q(np.zeros(2, np.int32), 0.1, 0, const=True), 0, 0, 0, 0, 1, 1, 0, False],
            [out(U8, 1.0, 0)],
        )
    fs = Q(np.zeros((2, 1, 1, 1), np.int8), 0.25, 0, const=True)
    with pytest.raises(HalError, match="filter"):
        qcall(
            GROUPED,
            [x, fs, Q(np.zeros(2, np.int32), 0.125, 0, const=True), 2, 1, 1, 2, 0, False],
            [out(U8, 1.0, 0)],
        )


def test_transpose_conv_huge_output_is_refused_before_allocating():
    ins = [
        *_float_conv(f=np.ones((2, 3, 3, 4), np.float32), b=np.zeros(2)),
        0,
        -(10**6),
        0,
        -(10**6),
        1,
        1,
        0,
        False,
    ]
    with pytest.raises(HalError) as e:
        run, args = prepare(TCONV, ins)
        run(args)
    assert e.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT


@pytest.mark.parametrize("kind", ["u8", "pcs8"])
def test_quant_run_time_filter_and_bias_match_constant_ones(rng, kind):
    """Weights that arrive with the request take the unpacked path and give the same bytes."""
    x, xt, zx = input_of(rng, kind, (1, 4, 4, 4))
    fq, _, sws = make_filter(rng, kind, (4, 3, 3, 2), 0)
    ft, _, _ = make_filter(rng, kind, (2, 2, 2, 4), 0)
    b4, b2 = random_bias(rng, 4, 18), random_bias(rng, 2, 16)
    sx, sy = 0.05, 0.5
    bias_scale = 0.0 if kind.startswith("pc") else float(np.float32(sx) * np.float32(sws[0]))
    tbias_scale = 0.0 if kind.startswith("pc") else float(np.float32(sx) * np.float32(ft.scale))
    for op, f, b, bs, params in (
        (GROUPED, fq, b4, bias_scale, [1, 1, 1, 2, 0, False]),
        (TCONV, ft, b2, tbias_scale, [1, 0, 1, 0, 2, 2, 1, False]),
    ):
        runtime = Q(f.value, f.scale, f.zero_point, const=False, channel_scales=f.channel_scales)
        outs = [out(xt, sy, 3)]
        (y_const,) = qcall(op, [Q(x, sx, zx), f, Q(b, bs, 0, const=True), *params], outs)
        (y_run,) = qcall(op, [Q(x, sx, zx), runtime, Q(b, bs, 0), *params], outs)
        check_exact(y_run, y_const)
