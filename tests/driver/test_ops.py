"""Elementwise, arithmetic, fully connected, softmax, shape, reduction and slicing kernels against references."""

from __future__ import annotations

import numpy as np
import pytest

import driver.ops
from driver.ops import ArgInfo
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from tests.driver.opkit import (
    Const,
    Omit,
    activation,
    call,
    check,
    nchw,
    nhwc,
    ort_node,
    prepare,
    rand,
    reference_node,
)

Op = OperationType
RNG = np.random.default_rng(1234)


def test_every_listed_operation_is_registered():
    expected = {
        "CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D", "FULLY_CONNECTED",
        "ADD", "MUL", "SUB", "DIV", "RELU", "RELU1", "RELU6", "LOGISTIC", "TANH", "HARD_SWISH", "ELU",
        "ABS", "EXP", "SQRT", "RSQRT", "NEG", "FLOOR", "SOFTMAX", "LOG_SOFTMAX", "RESHAPE", "SQUEEZE",
        "EXPAND_DIMS", "CONCATENATION", "PAD", "PAD_V2", "TRANSPOSE", "MEAN", "REDUCE_MAX", "REDUCE_SUM",
        "STRIDED_SLICE", "SLICE", "RESIZE_BILINEAR",
    }  # fmt: skip
    assert expected <= {op.name for op in driver.ops.registered_operations()}


# ----------------------------------------------------------------- elementwise

X64 = RNG.uniform(-4, 4, size=(2, 3, 5)).astype(np.float32).astype(np.float64)
UNARY = [
    (Op.RELU, lambda x: np.maximum(x, 0)),
    (Op.RELU1, lambda x: np.clip(x, -1, 1)),
    (Op.RELU6, lambda x: np.clip(x, 0, 6)),
    (Op.LOGISTIC, lambda x: 1 / (1 + np.exp(-x))),
    (Op.TANH, np.tanh),
    (Op.HARD_SWISH, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    (Op.ABS, np.abs),
    (Op.EXP, np.exp),
    (Op.NEG, np.negative),
    (Op.FLOOR, np.floor),
]


@pytest.mark.parametrize("op, ref", UNARY, ids=[op.name for op, _ in UNARY])
def test_unary(op, ref):
    check(call(op, X64.astype(np.float32)), ref(X64))


@pytest.mark.parametrize("op, ref", [(Op.SQRT, np.sqrt), (Op.RSQRT, lambda x: 1 / np.sqrt(x))])
def test_sqrt_family(op, ref):
    x = np.abs(X64) + 0.01
    check(call(op, x.astype(np.float32)), ref(x))
    assert np.isnan(call(op, np.array([-1.0], np.float32))).all()


def test_logistic_saturates_without_overflow():
    x = np.array([-200.0, -90.0, 0.0, 90.0], np.float32)
    check(call(Op.LOGISTIC, x), [0.0, 0.0, 0.5, 1.0])


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_elu(alpha):
    check(call(Op.ELU, X64.astype(np.float32), alpha), np.where(X64 > 0, X64, alpha * np.expm1(X64)))


def test_unary_output_is_fresh():
    x = np.array([1.0, 2.0], np.float32)
    x.flags.writeable = False
    y = call(Op.RELU, x)
    assert y.flags.writeable and not np.shares_memory(x, y)


# ----------------------------------------------------------------- arithmetic

BINARY = [(Op.ADD, np.add), (Op.SUB, np.subtract), (Op.MUL, np.multiply), (Op.DIV, np.divide)]
SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((1, 3, 1), (2, 1, 5)), ((3, 1), (1,))]


@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "trailing", "both", "scalarlike"])
@pytest.mark.parametrize("op, ref", BINARY, ids=[op.name for op, _ in BINARY])
def test_binary(op, ref, shapes, act):
    a = rand(RNG, *shapes[0], lo=-4, hi=4)
    b = rand(RNG, *shapes[1], lo=0.5, hi=2) * np.where(RNG.random(shapes[1]) < 0.5, -1, 1).astype(np.float32)
    check(call(op, a, Const(b), act), activation(act, ref(a.astype(np.float64), b.astype(np.float64))))


def test_binary_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(HalError, match=r"\(2, 3\) and \(4,\) do not broadcast"):
        prepare(Op.ADD, [np.zeros((2, 3), np.float32), np.zeros(4, np.float32), 0])


def test_div_by_zero_is_ieee():
    got = call(Op.DIV, np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32), 0)
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


# ------------------------------------------------------------ fully connected


@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize(
    "in_shape, units", [((1, 8), 5), ((3, 8), 4), ((2, 2, 3, 2), 6), ((4, 1, 1, 16), 10)]
)
@pytest.mark.parametrize("const_w", [True, False])
def test_fully_connected(in_shape, units, act, const_w):
    x = rand(RNG, *in_shape)
    size = 8 if in_shape[-1] != 16 else 16
    w, b = rand(RNG, units, size), rand(RNG, units)
    ref = x.reshape(-1, size).astype(np.float64) @ w.T.astype(np.float64) + b
    check(call(Op.FULLY_CONNECTED, x, Const(w) if const_w else w, Const(b), act), activation(act, ref))


def test_fully_connected_errors():
    w, b = Const(np.zeros((4, 6), np.float32)), Const(np.zeros(4, np.float32))
    with pytest.raises(HalError, match="bias shape is \\(3,\\), expected \\(4,\\)"):
        prepare(Op.FULLY_CONNECTED, [np.zeros((2, 6), np.float32), w, Const(np.zeros(3, np.float32)), 0])
    run, args = prepare(Op.FULLY_CONNECTED, [ArgInfo(int(OperandType.TENSOR_FLOAT32), ()), w, b, 0])
    args[0] = np.zeros((2, 5), np.float32)
    with pytest.raises(HalError, match=r"\(2, 5\) cannot be flattened to \[batch, 6\]"):
        run(args)


# ------------------------------------------------------------------- softmax


@pytest.mark.parametrize("beta, axis", [(1.0, None), (0.5, -1), (2.0, 0), (1.0, 1)])
def test_softmax_and_log_softmax(beta, axis):
    x = rand(RNG, 3, 4, 5, lo=-5, hi=5)
    z = beta * x.astype(np.float64)
    ax = -1 if axis is None else axis
    z = z - z.max(axis=ax, keepdims=True)
    log_sm = z - np.log(np.exp(z).sum(axis=ax, keepdims=True))
    extra = [] if axis is None else [axis]
    check(call(Op.SOFTMAX, x, beta, *extra), np.exp(log_sm))
    check(call(Op.LOG_SOFTMAX, x, beta, ax), log_sm)


def test_softmax_matches_onnxruntime():
    x = rand(RNG, 2, 1001, lo=-8, hi=8)
    check(call(Op.SOFTMAX, x, 1.0), ort_node("Softmax", {"x": x}, axis=-1))


def test_softmax_errors():
    with pytest.raises(HalError, match="beta is 0.0, expected a positive value"):
        prepare(Op.SOFTMAX, [np.zeros((2, 3), np.float32), 0.0])
    with pytest.raises(HalError, match="axis 2 is out of range for rank 2"):
        prepare(Op.SOFTMAX, [np.zeros((2, 3), np.float32), 1.0, 2])


# -------------------------------------------------------------- shape ops


@pytest.mark.parametrize(
    "shape, target, expected",
    [((2, 3, 4), [4, 6], (4, 6)), ((2, 3, 4), [-1, 4], (6, 4)), ((1, 1, 1, 1001), [1, -1], (1, 1001))],
)
@pytest.mark.parametrize("const_shape", [True, False])
def test_reshape(shape, target, expected, const_shape):
    x = rand(RNG, *shape)
    t = np.array(target, np.int32)
    got = call(Op.RESHAPE, x, Const(t) if const_shape else t)
    check(got, x.reshape(expected))
    assert not np.shares_memory(got, x)


@pytest.mark.parametrize(
    "target, match", [([5, 5], "holds 25 elements, the input has 24"), ([-1, -1], "at most one -1")]
)
def test_reshape_errors(target, match):
    run, args = prepare(Op.RESHAPE, [rand(RNG, 2, 3, 4), Const(np.array(target, np.int32))])
    with pytest.raises(HalError, match=match) as e:
        run(args)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "axes, expected",
    [("omit", (3, 4)), ([0], (3, 1, 4)), ([-2, 0], (3, 4)), ([], (3, 4))],
)
def test_squeeze(axes, expected):
    x = rand(RNG, 1, 3, 1, 4)
    extra = (
        []
        if axes is None
        else [Omit(OperandType.TENSOR_INT32)]
        if axes == "omit"
        else [Const(np.array(axes, np.int32))]
    )
    check(call(Op.SQUEEZE, x, *extra), x.reshape(expected))


def test_squeeze_rejects_non_unit_dimension():
    run, args = prepare(Op.SQUEEZE, [rand(RNG, 1, 3), Const(np.array([1], np.int32))])
    with pytest.raises(HalError, match=r"cannot squeeze dimensions \[1\] of shape \(1, 3\)"):
        run(args)


@pytest.mark.parametrize("axis", [0, 1, 3, -1, -4])
def test_expand_dims(axis):
    x = rand(RNG, 2, 3, 4)
    check(call(Op.EXPAND_DIMS, x, axis), np.expand_dims(x, axis))


def test_expand_dims_rejects_out_of_range_axis():
    with pytest.raises(HalError, match=r"axis 4 is out of range for rank 4"):
        prepare(Op.EXPAND_DIMS, [rand(RNG, 2, 3, 4), 4])


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concatenation(axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for s in shapes[1:]:
        s[axis] = 1 + len(str(s))  # different sizes along the axis
    xs = [rand(RNG, *s) for s in shapes]
    check(call(Op.CONCATENATION, xs[0], Const(xs[1]), xs[2], axis), np.concatenate(xs, axis=axis))


def test_concatenation_errors():
    with pytest.raises(HalError, match="at least 2 inputs"):
        prepare(Op.CONCATENATION, [0])
    run, args = prepare(Op.CONCATENATION, [rand(RNG, 2, 3), rand(RNG, 3, 3), 1])
    with pytest.raises(HalError, match=r"input 1 has shape \(3, 3\), expected \(2, 3\) except along axis 1"):
        run(args)


@pytest.mark.parametrize("pads", [[[0, 0], [1, 2], [2, 1], [0, 0]], [[1, 0], [0, 0], [0, 3], [2, 2]]])
def test_pad_and_pad_v2(pads):
    x = rand(RNG, 1, 3, 4, 2)
    p = Const(np.array(pads, np.int32))
    check(call(Op.PAD, x, p), np.pad(x, pads))
    check(call(Op.PAD_V2, x, p, -7.5), np.pad(x, pads, constant_values=-7.5))


def test_pad_errors():
    with pytest.raises(HalError, match=r"paddings have shape \(2, 2\), expected \[3, 2\]"):
        prepare(Op.PAD, [rand(RNG, 1, 2, 3), Const(np.zeros((2, 2), np.int32))])
    with pytest.raises(HalError, match="negative amount"):
        prepare(Op.PAD, [rand(RNG, 2), Const(np.array([[-1, 0]], np.int32))])


@pytest.mark.parametrize("perm", ["omit", [0, 2, 3, 1], [3, 1, 0, 2]])
def test_transpose(perm):
    x = rand(RNG, 2, 3, 4, 5)
    extra = (
        []
        if perm is None
        else [Omit(OperandType.TENSOR_INT32)]
        if perm == "omit"
        else [Const(np.array(perm, np.int32))]
    )
    axes = None if perm in (None, "omit") else perm
    check(call(Op.TRANSPOSE, x, *extra), np.transpose(x, axes))


@pytest.mark.parametrize(
    "shape, perm",
    [((1, 3, 16, 16), [0, 2, 3, 1]), ((2, 5, 4, 6), [0, 2, 3, 1]), ((4, 8, 9), [1, 2, 0]), ((8, 40), [1, 0])],
)
def test_transpose_to_a_short_last_dimension(shape, perm):
    """NCHW to NHWC of an image (a short new last dimension) is copied index by index: same result."""
    x = rand(RNG, *shape)
    got = call(Op.TRANSPOSE, x, Const(np.array(perm, np.int32)))
    np.testing.assert_array_equal(got, np.transpose(x, perm))
    assert got.flags.c_contiguous


def test_transpose_rejects_bad_perm():
    with pytest.raises(HalError, match=r"perm \[0, 0, 1\] is not a permutation of 0..2"):
        prepare(Op.TRANSPOSE, [rand(RNG, 2, 3, 4), Const(np.array([0, 0, 1], np.int32))])


# -------------------------------------------------------------- reductions


@pytest.mark.parametrize("axes", [[1], [1, 2], [-1, 0], [0, 1, 2], [2, 2]])
@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize(
    "op, ref",
    [(Op.MEAN, np.mean), (Op.REDUCE_MAX, np.max), (Op.REDUCE_SUM, np.sum)],
    ids=["mean", "max", "sum"],
)
def test_reductions(op, ref, axes, keep):
    x = rand(RNG, 2, 3, 4)
    keep_arg = int(keep) if op == Op.MEAN else keep
    expected = ref(x.astype(np.float64), axis=tuple(sorted({a % 3 for a in axes})), keepdims=keep)
    if expected.ndim == 0:
        expected = expected.reshape(1)
    check(call(op, x, Const(np.array(axes, np.int32)), keep_arg), expected)


def test_mean_global_pool_shape_and_keep_dims_type():
    x = rand(RNG, 1, 7, 7, 8)
    check(
        call(Op.MEAN, x, Const(np.array([1, 2], np.int32)), 1),
        x.astype(np.float64).mean(axis=(1, 2), keepdims=True),
    )
    with pytest.raises(HalError, match="keep_dims has type INT32, expected BOOL"):
        prepare(Op.REDUCE_SUM, [x, Const(np.array([1], np.int32)), 1])


# ----------------------------------------------------------------- slicing

STRIDED = [
    # begin, end, strides, begin_mask, end_mask, shrink_mask, python index
    ([0, 1, 0], [2, 3, 4], [1, 1, 1], 0, 0, 0, np.s_[0:2, 1:3, 0:4]),
    ([1, 0, -1], [2, 3, 0], [1, 2, -1], 0, 0, 0, np.s_[1:2, 0:3:2, -1:0:-1]),
    ([0, 0, 0], [0, 0, 0], [1, 1, 2], 0b111, 0b111, 0, np.s_[:, :, ::2]),
    ([-1, 0, 3], [0, 2, 0], [1, 1, -1], 0b001, 0b101, 0, np.s_[:, 0:2, 3::-1]),
    ([1, 0, 2], [2, 3, 3], [1, 1, 1], 0, 0, 0b101, np.s_[1, 0:3, 2]),
    ([-10, 0, 10], [10, -10, -10], [1, 1, -1], 0, 0, 0, np.s_[0:2, 0:0, 3::-1]),
]


@pytest.mark.parametrize("case", STRIDED, ids=[f"ss{i}" for i in range(len(STRIDED))])
def test_strided_slice(case):
    begin, end, strides, bm, em, sm, index = case
    x = rand(RNG, 2, 3, 4)
    i32 = lambda v: Const(np.array(v, np.int32))  # noqa: E731
    check(call(Op.STRIDED_SLICE, x, i32(begin), i32(end), i32(strides), bm, em, sm), x[index])


def test_strided_slice_matches_onnx_slice():
    x = rand(RNG, 4, 6)
    starts, ends, steps = np.array([1, 5]), np.array([4, 0]), np.array([2, -2])
    i32 = lambda v: Const(v.astype(np.int32))  # noqa: E731
    got = call(Op.STRIDED_SLICE, x, i32(starts), i32(ends), i32(steps), 0, 0, 0)
    feeds = {"x": x, "s": starts, "e": ends, "a": np.array([0, 1]), "t": steps}
    check(got, reference_node("Slice", feeds))


def test_strided_slice_rejects_zero_stride():
    z = Const(np.zeros(2, np.int32))
    run, args = prepare(Op.STRIDED_SLICE, [rand(RNG, 2, 2), z, z, z, 0, 0, 0])
    with pytest.raises(HalError, match="non-zero strides"):
        run(args)


@pytest.mark.parametrize(
    "begin, size", [([0, 1, 1], [2, 2, 3]), ([1, 0, 2], [-1, -1, 2]), ([0, 0, 0], [1, 3, -1])]
)
def test_slice(begin, size):
    x = rand(RNG, 2, 3, 5)
    index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size, strict=True))
    check(call(Op.SLICE, x, Const(np.array(begin, np.int32)), np.array(size, np.int32)), x[index])


def test_slice_rejects_out_of_range():
    run, args = prepare(
        Op.SLICE, [rand(RNG, 2, 3), Const(np.array([1, 1], np.int32)), Const(np.array([2, 1], np.int32))]
    )
    with pytest.raises(HalError, match="dimension 0 of size 2: begin 1 and size 2 are out of range"):
        run(args)


# ------------------------------------------------------------------ resize


@pytest.mark.parametrize(
    "out_hw, align, half, layout",
    [
        ((8, 10), False, False, None),
        ((3, 5), False, False, False),
        ((9, 7), True, False, True),
        ((12, 8), False, True, None),
        ((2, 3), False, True, True),
    ],
)
def test_resize_bilinear(out_hw, align, half, layout):
    x = rand(RNG, 2, 5, 4, 3)
    is_nchw = layout is True
    extra = []
    if layout is not None or align or half:
        extra = [bool(layout), align, half]
    got = call(Op.RESIZE_BILINEAR, nchw(x) if is_nchw else x, out_hw[1], out_hw[0], *extra)
    mode = "align_corners" if align else "half_pixel" if half else "asymmetric"
    sizes = np.array([2, 3, *out_hw], np.int64)
    ref = ort_node(
        "Resize",
        {"x": nchw(x), "sizes": sizes},
        ["x", "", "", "sizes"],
        mode="linear",
        coordinate_transformation_mode=mode,
    )
    check(got, ref if is_nchw else nhwc(ref))


def test_resize_bilinear_by_scale_and_errors():
    x = rand(RNG, 1, 4, 4, 2)
    assert call(Op.RESIZE_BILINEAR, x, 2.0, 1.5).shape == (1, 6, 8, 2)
    with pytest.raises(HalError, match="cannot both be true"):
        prepare(Op.RESIZE_BILINEAR, [x, 8, 8, False, True, True])


# --------------------------------------------------------- generic errors


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (Op.RELU, [np.zeros(3, np.float32), 1], "expected 1 inputs, got 2"),
        (Op.ADD, [np.zeros(3, np.float32), np.zeros(3, np.float32)], "expected 3 inputs, got 2"),
        (
            Op.ADD,
            [np.zeros(3, np.int32), np.zeros(3, np.float32), 0],
            "input 1 is TENSOR_FLOAT32; with TENSOR_INT32 input 0 it must be TENSOR_INT32",
        ),
        (Op.TANH, [ArgInfo(int(OperandType.TENSOR_INT32), (3,))], "TENSOR_INT32"),
        (Op.MUL, [np.zeros(3, np.float32), np.zeros(3, np.float32), 9], "fused activation is 9"),
        (Op.ELU, [np.zeros(3, np.float32), 1], "alpha has type INT32, expected FLOAT32"),
        (Op.SOFTMAX, [ArgInfo(int(OperandType.TENSOR_FLOAT16), (3,)), 1.0], "input 1 has type FLOAT32"),
        (
            Op.MEAN,
            [np.zeros(3, np.float32), Const(np.array([0.0], np.float32)), 1],
            "axes has type TENSOR_FLOAT32",
        ),
    ],
)
def test_signature_errors(op, inputs, match):
    with pytest.raises(HalError, match=match) as e:
        prepare(op, inputs)
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT


def test_non_constant_parameter_is_read_at_run_time():
    from driver.ops._base import kernel_for as registered_kernel

    x = np.array([-1.0, 0.5, 2.0], np.float32)
    act = ArgInfo(int(OperandType.INT32), ())
    with pytest.raises(HalError, match="ADD: fused activation must be a constant"):
        f32 = ArgInfo(int(OperandType.TENSOR_FLOAT32), (3,))
        registered_kernel(int(Op.ADD))([f32, f32, act], [f32])
    run, _ = prepare(Op.ADD, [x, x, act])
    (y,) = run([x, x, np.array(1, np.int32)])
    check(y, np.maximum(2 * x, 0))


@pytest.mark.parametrize(
    ("code", "fn"), [(OperationType.MAXIMUM, np.maximum), (OperationType.MINIMUM, np.minimum)]
)
@pytest.mark.parametrize(("sa", "sb"), [((2, 3, 4), (2, 3, 4)), ((1, 5, 5, 8), (8,)), ((3, 1), (1, 4))])
def test_maximum_minimum_broadcast_exactly(code, fn, sa, sb):
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, sa).astype(np.float32)
    b = rng.uniform(-1, 1, sb).astype(np.float32)
    from driver.ops import ArgInfo, kernel_for
    from mlts.hal.enums import OperandType

    ins = [ArgInfo(OperandType.TENSOR_FLOAT32, sa), ArgInfo(OperandType.TENSOR_FLOAT32, sb)]
    outs = [ArgInfo(OperandType.TENSOR_FLOAT32, np.broadcast_shapes(sa, sb))]
    (out,) = kernel_for(code)(ins, outs)([a, b])
    assert out.shape == np.broadcast_shapes(sa, sb) and out.dtype == np.float32
    np.testing.assert_array_equal(out, fn(a.astype(np.float64), b.astype(np.float64)).astype(np.float32))


def test_maximum_rejects_an_activation_input():
    from driver.ops import ArgInfo, kernel_for
    from mlts.hal.enums import ErrorStatus, OperandType
    from mlts.hal.errors import HalError

    t = ArgInfo(OperandType.TENSOR_FLOAT32, (2,))
    with pytest.raises(HalError) as e:
        kernel_for(OperationType.MAXIMUM)([t, t, ArgInfo(OperandType.INT32, (), value=0)], [t])
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
