"""DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND, CHANNEL_SHUFFLE, RESIZE_NEAREST_NEIGHBOR.

Every type (float32, float16, quant8 asymm and signed) and both layouts, against onnxruntime
(DepthToSpace DCR, SpaceToDepth, Resize nearest), loops written from the NNAPI specification,
and the CTS specs' hand-checked examples. Data movement is exact for every type.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from tests.driver.opkit import ort_node
from tests.driver.spatialkit import (
    F16T,
    F32T,
    S8,
    U8,
    as_type,
    call,
    check_exact,
    fp16_scalar,
    nchw_to_nhwc,
    nhwc_to_nchw,
    omitted,
    out,
    prepare,
    spec_depth_to_space,
    tensor,
    unset,
)

D2S, S2D = OperationType.DEPTH_TO_SPACE, OperationType.SPACE_TO_DEPTH
B2S, S2B = OperationType.BATCH_TO_SPACE_ND, OperationType.SPACE_TO_BATCH_ND
SHUFFLE, RESIZE = OperationType.CHANNEL_SHUFFLE, OperationType.RESIZE_NEAREST_NEIGHBOR
TYPES = [F32T, F16T, U8, S8]
QPARAMS = {F32T: (0.0, 0), F16T: (0.0, 0), U8: (0.5, 128), S8: (0.25, -3)}


def data(rng, shape, t):
    if t in (U8, S8):
        info = np.iinfo(np.uint8 if t == U8 else np.int8)
        return rng.integers(info.min, info.max + 1, size=shape).astype(info.dtype)
    return as_type(rng.uniform(-4, 4, size=shape), t)


def qtensor(x, t, **kw):
    scale, zp = QPARAMS[t]
    return tensor(x, t, scale, zp, **kw)


def run_layout(op, x_nhwc, t, params, layout, layout_at_end=True):
    """Run `op` on NHWC data in `layout` ("nhwc", "nchw", "omit", "unset", "none"); the result as NHWC."""
    x = nhwc_to_nchw(x_nhwc) if layout == "nchw" else x_nhwc
    ins = [qtensor(x, t), *params]
    if layout in ("nhwc", "nchw"):
        ins.append(layout == "nchw")
    elif layout == "omit":
        ins.append(omitted(OperandType.BOOL))
    elif layout == "unset":
        ins.append(unset(OperandType.BOOL))
    y = call(op, ins)
    return nchw_to_nhwc(y) if layout == "nchw" else y


LAYOUTS = ["nhwc", "nchw", "none", "omit", "unset"]

# ------------------------------------------------------------ spec loops (independent of the kernels)


def spec_batch_to_space(x, bh, bw):
    n, h, w, c = x.shape
    nb = n // (bh * bw)
    y = np.empty((nb, h * bh, w * bw, c), x.dtype)
    for b, i, j in itertools.product(range(nb), range(h * bh), range(w * bw)):
        y[b, i, j] = x[((i % bh) * bw + j % bw) * nb + b, i // bh, j // bw]
    return y


def spec_space_to_batch(x, bh, bw, pads, fill):
    (top, bottom), (left, right) = pads
    n, h, w, c = x.shape
    oh, ow = (h + top + bottom) // bh, (w + left + right) // bw
    y = np.empty((n * bh * bw, oh, ow, c), x.dtype)
    for ob, i, j in itertools.product(range(n * bh * bw), range(oh), range(ow)):
        b, off = ob % n, ob // n
        si, sj = i * bh + off // bw - top, j * bw + off % bw - left
        y[ob, i, j] = x[b, si, sj] if 0 <= si < h and 0 <= sj < w else fill
    return y


def spec_shuffle(x, groups, axis):
    c = x.shape[axis]
    y = np.empty_like(x)
    for k in range(c):
        src = (k % groups) * (c // groups) + k // groups
        np.moveaxis(y, axis, 0)[k] = np.moveaxis(x, axis, 0)[src]
    return y


# ------------------------------------------------------------ DEPTH_TO_SPACE / SPACE_TO_DEPTH


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_depth_to_space_against_spec_and_onnx(t, layout):
    rng = np.random.default_rng(1)
    x = data(rng, (2, 2, 3, 8), t)
    y = run_layout(D2S, x, t, [2], layout)
    check_exact(y, spec_depth_to_space(x, 2))
    if t != F16T:  # ONNX DepthToSpace in DCR mode has NNAPI's element order (NCHW)
        ref = ort_node("DepthToSpace", {"x": nhwc_to_nchw(x).astype(np.float32)}, blocksize=2, mode="DCR")
        np.testing.assert_array_equal(nhwc_to_nchw(y).astype(np.float32), ref)


def test_depth_to_space_crd_mode_is_not_nnapi():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8)
    crd = ort_node("DepthToSpace", {"x": nhwc_to_nchw(x)}, blocksize=2, mode="CRD")
    assert not np.array_equal(nhwc_to_nchw(call(D2S, [tensor(x), 2])), crd)


def test_depth_to_space_cts_example():
    x = np.array([1.4, 2.3, 3.2, 4.1, 5.4, 6.3, 7.2, 8.1], np.float32).reshape(1, 1, 1, 8)
    y = call(D2S, [tensor(x), 2])
    np.testing.assert_array_equal(y.reshape(-1), x.reshape(-1))
    assert y.shape == (1, 2, 2, 2)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bs", [1, 2, 3])
def test_space_to_depth_inverts_depth_to_space_and_matches_onnx(t, layout, bs):
    rng = np.random.default_rng(bs)
    x = data(rng, (1, 6, 3 * bs, 2), t)
    y = run_layout(S2D, x, t, [bs], layout)
    assert y.shape == (1, 6 // bs, 3, 2 * bs * bs)
    check_exact(spec_depth_to_space(y, bs), x)
    if t != F16T:
        ref = ort_node("SpaceToDepth", {"x": nhwc_to_nchw(x).astype(np.float32)}, blocksize=bs)
        np.testing.assert_array_equal(nhwc_to_nchw(y).astype(np.float32), ref)


# ------------------------------------------------------------ BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND


def test_batch_to_space_cts_example():
    x = np.arange(1, 17, dtype=np.float32).reshape(4, 2, 2, 1)
    y = call(B2S, [tensor(x), np.array([2, 2])])
    expected = [1, 5, 2, 6, 9, 13, 10, 14, 3, 7, 4, 8, 11, 15, 12, 16]
    np.testing.assert_array_equal(y.reshape(-1), expected)
    assert y.shape == (1, 4, 4, 1)


def test_space_to_batch_cts_example():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 4, 4, 1)
    y = call(S2B, [tensor(x), np.array([2, 2]), np.array([[0, 0], [0, 0]])])
    expected = [1, 3, 9, 11, 2, 4, 10, 12, 5, 7, 13, 15, 6, 8, 14, 16]
    np.testing.assert_array_equal(y.reshape(-1), expected)
    assert y.shape == (4, 2, 2, 1)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("block", [(2, 3), (1, 2), (3, 1)])
def test_batch_to_space_against_spec(t, layout, block):
    rng = np.random.default_rng(7)
    x = data(rng, (2 * block[0] * block[1], 2, 3, 3), t)
    y = run_layout(B2S, x, t, [np.array(block)], layout)
    check_exact(y, spec_batch_to_space(x, *block))


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("block", "pads"), [((2, 3), ((1, 1), (1, 2))), ((2, 2), ((0, 0), (0, 1))), ((1, 3), ((2, 0), (0, 0)))]
)
def test_space_to_batch_against_spec_and_round_trip(t, layout, block, pads):
    rng = np.random.default_rng(8)
    x = data(rng, (2, 4, 3, 2), t)
    y = run_layout(S2B, x, t, [np.array(block), np.array(pads)], layout)
    fill = QPARAMS[t][1] if t in (U8, S8) else 0
    check_exact(y, spec_space_to_batch(x, *block, pads, fill))
    # BATCH_TO_SPACE_ND undoes it up to the padding.
    back = call(B2S, [qtensor(y, t), np.array(block)])
    (top, _), (left, _) = pads
    check_exact(back[:, top : top + 4, left : left + 3], x)


def test_space_to_batch_pads_quant_with_the_zero_point():
    x = np.full((1, 1, 1, 1), 200, np.uint8)
    y = call(S2B, [tensor(x, U8, 0.1, 77), np.array([2, 2]), np.array([[0, 1], [1, 0]])])
    np.testing.assert_array_equal(y.reshape(-1), [77, 200, 77, 77])


def test_run_time_block_shape_and_paddings():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    block = tensor(np.array([2, 2]), OperandType.TENSOR_INT32)
    pads = tensor(np.zeros((2, 2)), OperandType.TENSOR_INT32)
    y = call(S2B, [tensor(x), block, pads])
    check_exact(y, spec_space_to_batch(x, 2, 2, ((0, 0), (0, 0)), 0))
    run, args = prepare(
        S2B, [tensor(x), block, tensor(np.array([[0, 0], [-1, 1]]), OperandType.TENSOR_INT32)]
    )
    with pytest.raises(HalError, match="paddings"):
        run(args)


# ------------------------------------------------------------ CHANNEL_SHUFFLE


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize(
    ("shape", "groups", "axis"),
    [
        ((12,), 3, 0),
        ((2, 6), 2, -1),
        ((2, 6, 3), 3, 1),
        ((1, 2, 3, 8), 4, 3),
        ((4, 2, 3, 2), 2, -4),
        ((2, 6), 6, 1),
    ],
)
def test_channel_shuffle_against_spec(t, shape, groups, axis):
    rng = np.random.default_rng(3)
    x = data(rng, shape, t)
    y = call(SHUFFLE, [qtensor(x, t), groups, axis])
    check_exact(y, spec_shuffle(x, groups, axis % len(shape)))


def test_channel_shuffle_hand_example():
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(call(SHUFFLE, [tensor(x), 2, 0]), [0, 3, 1, 4, 2, 5])


# ------------------------------------------------------------ RESIZE_NEAREST_NEIGHBOR


def spec_nearest(in_size, out_size, align, half):
    """The NNAPI/TFLite index rule, one scalar at a time in float32."""
    f = np.float32
    scale = f(in_size - 1) / f(out_size - 1) if align and out_size > 1 else f(in_size) / f(out_size)
    idx = []
    for o in range(out_size):
        src = (f(o) + f(0.5)) * scale if half else f(o) * scale
        v = int(np.floor(src)) if not align else int(np.floor(src) + (1 if src - np.floor(src) >= 0.5 else 0))
        v = min(v, in_size - 1)
        idx.append(max(v, 0) if half else v)
    return idx


def spec_resize(x, oh, ow, align, half):
    rows = spec_nearest(x.shape[1], oh, align, half)
    cols = spec_nearest(x.shape[2], ow, align, half)
    return x[:, rows][:, :, cols]


RESIZE_CASES = [
    # (H, W, size or scale params, (OH, OW), align, half)
    (3, 4, (8, 6), (6, 8), False, False),
    (4, 4, (2, 2), (2, 2), False, False),
    (3, 5, (7, 4), (4, 7), True, False),
    (3, 5, (7, 4), (4, 7), False, True),
    (2, 3, (1.5, 2.0), (4, 4), False, False),
    (5, 5, (0.6, 0.5), (2, 3), False, True),
    (2, 2, (3, 3), (3, 3), True, False),
]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize(("h", "w", "params", "out_hw", "align", "half"), RESIZE_CASES)
def test_resize_nearest_against_spec(t, nchw, h, w, params, out_hw, align, half):
    rng = np.random.default_rng(h * 10 + w)
    x = data(rng, (2, h, w, 3), t)
    p = list(params)
    if isinstance(p[0], float) and t == F16T:
        p = [fp16_scalar(v) for v in p]
    xin = nhwc_to_nchw(x) if nchw else x
    flags = [align, half] if (align or half) else []
    y = call(RESIZE, [qtensor(xin, t), *p, nchw, *flags])
    y = nchw_to_nhwc(y) if nchw else y
    assert y.shape[1:3] == out_hw
    check_exact(y, spec_resize(x, *out_hw, align, half))


@pytest.mark.parametrize(
    ("align", "half", "attrs"),
    [
        (False, False, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
        (
            True,
            False,
            {"coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"},
        ),
        (False, True, {"coordinate_transformation_mode": "tf_half_pixel_for_nn", "nearest_mode": "floor"}),
    ],
)
@pytest.mark.parametrize(("h", "w", "oh", "ow"), [(3, 4, 6, 8), (4, 6, 3, 4), (5, 3, 7, 2)])
def test_resize_nearest_against_onnxruntime(align, half, attrs, h, w, oh, ow):
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 2, h, w)).astype(np.float32)
    ref = ort_node(
        "Resize",
        {"x": x, "sizes": np.array([1, 2, oh, ow], np.int64)},
        ["x", "", "", "sizes"],
        mode="nearest",
        **attrs,
    )
    y = call(RESIZE, [tensor(x), ow, oh, True, align, half])
    np.testing.assert_array_equal(y, ref)


def test_resize_optional_flags_omitted_or_unset():
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 4, 1)
    base = call(RESIZE, [tensor(x), 7, 5, False])
    for flag in (omitted(OperandType.BOOL), unset(OperandType.BOOL)):
        check_exact(call(RESIZE, [tensor(x), 7, 5, False, flag, flag]), base)
    run, args = prepare(RESIZE, [tensor(x), 7, 5, False, unset(OperandType.BOOL), unset(OperandType.BOOL)])
    args[4], args[5] = True, False
    check_exact(run(args)[0], spec_resize(x, 5, 7, True, False))
    args[5] = True
    with pytest.raises(HalError, match="cannot both be true"):
        run(args)


# ------------------------------------------------------------ signature errors


def _bad(op, ins, output=None):
    with pytest.raises(HalError) as e:
        run, args = prepare(op, ins, output)
        run(args)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert op.name in e.value.message
    return e.value.message


X4 = np.zeros((1, 2, 2, 4), np.float32)


@pytest.mark.parametrize(
    ("op", "ins", "output", "words"),
    [
        (D2S, [tensor(X4), 0], None, "block_size"),
        (D2S, [tensor(X4), 3], None, "divisible"),
        (D2S, [tensor(X4[0]), 2], None, "rank"),
        (D2S, [tensor(X4.astype(np.int32), OperandType.TENSOR_INT32), 1], None, "type"),
        (D2S, [tensor(X4.astype(np.uint8), U8, 0.5, 1), 1], out(U8, 0.5, 2), "zero point"),
        (D2S, [tensor(X4), 1], out(F16T), "type"),
        (S2D, [tensor(X4), 3], None, "divisible"),
        (B2S, [tensor(X4), np.array([2, 2])], None, "divisible"),
        (B2S, [tensor(X4), np.array([2, 0])], None, "block_shape"),
        (B2S, [tensor(X4), np.array([2, 2, 1])], None, "block_shape"),
        (S2B, [tensor(X4), np.array([3, 1]), np.zeros((2, 2), int)], None, "divisible"),
        (S2B, [tensor(X4), np.array([1, 1]), np.array([[0, -1], [0, 0]])], None, "paddings"),
        (S2B, [tensor(X4), np.array([1, 1]), np.zeros((2,), int)], None, "paddings"),
        (SHUFFLE, [tensor(X4), 3, -1], None, "divisible"),
        (SHUFFLE, [tensor(X4), 2, 4], None, "axis"),
        (SHUFFLE, [tensor(X4), 0, 0], None, "num_groups"),
        (SHUFFLE, [tensor(np.zeros((1, 1, 1, 1, 2), np.float32)), 1, 0], None, "rank"),
        (RESIZE, [tensor(X4), 2, 2], None, "inputs"),
        (RESIZE, [tensor(X4), 0, 2, False], None, "output width"),
        (RESIZE, [tensor(X4), 2.0, 2, False], None, "one type"),
        (RESIZE, [tensor(X4), 0.1, 0.1, False], None, "must be > 0"),
        (RESIZE, [tensor(X4), -1.0, 1.0, False], None, "width scale"),
        (RESIZE, [tensor(X4, F16T), 2.0, 2.0, False], None, "FLOAT16"),
        (RESIZE, [tensor(X4), 2, 2, False, True, True], None, "cannot both"),
    ],
)
def test_invalid_operations_are_refused(op, ins, output, words):
    assert words in _bad(op, ins, output)


@pytest.mark.parametrize(
    ("op", "ins"),
    [
        (RESIZE, [tensor(X4), 100000, 100000, False]),
        (RESIZE, [tensor(X4), 60000.0, 60000.0, False]),
        (S2B, [tensor(X4), np.array([1, 1]), np.array([[0, 100000], [0, 100000]])]),
    ],
)
def test_huge_outputs_are_refused_before_allocating(op, ins):
    with pytest.raises(HalError) as e:
        run, args = prepare(op, ins)
        run(args)
    assert e.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
    assert "limit" in e.value.message


def test_non_finite_scales_are_refused():
    assert "finite" in _bad(RESIZE, [tensor(X4), float("nan"), 1.0, False])
    assert "finite" in _bad(RESIZE, [tensor(X4), float("inf"), 1.0, False])
