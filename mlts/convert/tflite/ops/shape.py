"""Operators that move values: reshape, squeeze, transpose, concatenate, pack, split, slice, tile, fill.

Parameters TFLite keeps in constant tensors (shapes, permutations, axes) are NNAPI scalars or
constant tensors here. PACK becomes CONCATENATION then RESHAPE (the delegate's lowering), for every
axis but the last. Where NNAPI 1.3 defines an operation for fewer types than TFLite (no INT32
RESHAPE, TRANSPOSE, SQUEEZE or STRIDED_SLICE), the operator is refused with that reason.
"""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import (
    FLOAT_OR_QUANT8,
    FLOAT_QUANT8_INT32,
    activation,
    emit_simple,
    expect_type,
    rank,
    type_of,
)
from mlts.convert.tflite.registry import needs_level, register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType
_MOVING = (schema.FLOAT32, schema.FLOAT16, schema.UINT8, schema.INT8)


def _axis(g: Graph, axis: int, n: int, what: str = "axis") -> int:
    if not -n <= axis < n:
        raise g.refuse(f"{what} {axis} is outside a rank-{n} tensor")
    return axis % n


@register(
    "RESHAPE", nnapi="RESHAPE", max_version=1, note="constant shape (input or new_shape option); ranks <= 4"
)
def reshape(g: Graph, op: Operator) -> None:
    if type_of(g, 0) == schema.INT32:
        raise g.refuse(needs_level(6, "its input is INT32"))
    expect_type(g, 0, FLOAT_OR_QUANT8)
    for what, index in (("input", g.input(0)), ("output", g.output(0))):
        if rank(g, index) > 4:
            raise g.refuse(f"its {what} has rank above 4; the NNAPI delegate maps RESHAPE for ranks <= 4")
    if g.has_input(1):
        if g.tensor(g.input(1)).type != schema.INT32:
            raise g.refuse("its shape tensor is not INT32")
        shape = g.ints(1, "shape")
    else:
        shape = [int(v) for v in g.option("new_shape", ()) or ()]
        if shape == [0]:
            shape = []  # legacy files write [0] for a scalar
    if not shape:
        raise g.refuse("it reshapes to a scalar (rank 0), which NNAPI's RESHAPE cannot give")
    g.emit(Op.RESHAPE, [g.operand(g.input(0)), g.int32_vector(shape)], [g.new_operand(g.output(0))])


@register("SQUEEZE", nnapi="SQUEEZE", max_version=1, note="squeeze_dims, or every size-1 dimension")
def squeeze(g: Graph, op: Operator) -> None:
    expect_type(g, 0, _MOVING)
    n = rank(g, g.input(0))
    dims = [_axis(g, int(d), n, "squeeze dimension") for d in g.option("squeeze_dims", ()) or ()]
    axes = g.int32_vector(dims) if dims else g.omitted(OperandType.TENSOR_INT32)
    g.emit(Op.SQUEEZE, [g.operand(g.input(0)), axes], [g.new_operand(g.output(0))])


@register("EXPAND_DIMS", nnapi="EXPAND_DIMS", max_version=1, note="constant INT32 axis")
def expand_dims(g: Graph, op: Operator) -> None:
    expect_type(g, 0, (schema.FLOAT32, schema.FLOAT16, schema.INT32, schema.UINT8, schema.INT8))
    if g.tensor(g.input(1)).type != schema.INT32:
        raise g.refuse("its axis is not an INT32 constant")
    axis = g.ints(1, "axis")
    if len(axis) != 1:
        raise g.refuse(f"its axis {axis} is not one value")
    emit_simple(g, Op.EXPAND_DIMS, [0], [g.int32(axis[0])])


@register("TRANSPOSE", nnapi="TRANSPOSE", max_version=2, note="constant permutation; rank <= 4")
def transpose(g: Graph, op: Operator) -> None:
    expect_type(g, 0, _MOVING)
    perm = g.ints(1, "permutation")
    if rank(g, g.input(0)) > 4:
        raise g.refuse("its input has rank above 4; NNAPI's TRANSPOSE takes ranks <= 4")
    g.emit(Op.TRANSPOSE, [g.operand(g.input(0)), g.int32_vector(perm)], [g.new_operand(g.output(0))])


@register("CONCATENATION", nnapi="CONCATENATION", max_version=2, note="no fused activation; rank <= 4")
def concatenation(g: Graph, op: Operator) -> None:
    activation(g, allow=False)
    first = g.input(0)
    expect_type(g, 0, _MOVING)
    n = rank(g, first)
    if n > 4:
        raise g.refuse("its inputs have rank above 4; the NNAPI delegate maps CONCATENATION for ranks <= 4")
    axis = _axis(g, int(g.option("axis", 0)), max(n, 1))
    inputs = [g.operand(i) for i in op.inputs if i >= 0]
    g.emit(Op.CONCATENATION, [*inputs, g.int32(axis)], [g.new_operand(g.output(0))])


@register("PACK", nnapi=("CONCATENATION", "RESHAPE"), max_version=2, note="any axis but the last")
def pack(g: Graph, op: Operator) -> None:
    if type_of(g, 0) in (schema.UINT8, schema.INT32):
        raise g.refuse(needs_level(6, f"its input is {schema.type_name(type_of(g, 0))} (NNAPI's PACK)"))
    expect_type(g, 0, (schema.FLOAT32, schema.INT8))
    first = g.tensor(g.input(0))
    n = len(first.shape)
    axis = int(g.option("axis", 0))
    if axis in (-1, n):
        raise g.refuse(needs_level(6, "it packs along a new last dimension (NNAPI's PACK)"))
    axis = _axis(g, axis, n + 1)
    inputs = [i for i in op.inputs if i >= 0]
    for i in inputs:
        if g.tensor(i).shape != first.shape:
            raise g.refuse("its inputs differ in shape")
    joined = list(first.shape)
    joined[axis] = sum(g.tensor(i).shape[axis] for i in inputs)
    kind, scale, zp, _ = g.operand_type(first)
    tmp = g.temp(kind, joined, scale, zp)
    g.emit(Op.CONCATENATION, [*(g.operand(i) for i in inputs), g.int32(axis)], [tmp])
    out = g.output(0)
    g.emit(Op.RESHAPE, [tmp, g.int32_vector(g.shape(out))], [g.new_operand(out)])


@register("SPLIT", nnapi="SPLIT", max_version=3, note="constant INT32 axis")
def split(g: Graph, op: Operator) -> None:
    expect_type(g, 1, FLOAT_QUANT8_INT32, "value input")
    if g.tensor(g.input(0)).type != schema.INT32:
        raise g.refuse("its axis is not an INT32 constant")
    axis = _axis(g, g.ints(0, "axis")[0], max(rank(g, g.input(1)), 1))
    count = int(g.option("num_splits", len(op.outputs)))
    if count != len(op.outputs) or count < 1:
        raise g.refuse(f"num_splits {count} does not match its {len(op.outputs)} outputs")
    outs = [g.new_operand(g.output(k)) for k in range(count)]
    g.emit(Op.SPLIT, [g.operand(g.input(1)), g.int32(axis), g.int32(count)], outs)


@register("SLICE", nnapi="SLICE", max_version=2, note="INT32 begin and size")
def slice_(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_QUANT8_INT32)
    for k, what in ((1, "begin"), (2, "size")):
        if g.tensor(g.input(k)).type != schema.INT32:
            raise g.refuse(f"its {what} is not INT32")
    emit_simple(g, Op.SLICE, [0, 1, 2])


@register(
    "STRIDED_SLICE",
    nnapi="STRIDED_SLICE",
    max_version=2,
    note="begin, end and shrink-axis masks; ellipsis and new-axis masks refused",
)
def strided_slice(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    for name in ("ellipsis_mask", "new_axis_mask"):
        if int(g.option(name, 0) or 0):
            raise g.refuse(
                f"{name} is set; NNAPI's STRIDED_SLICE has no such mask (the delegate would drop it)"
            )
    if g.option("offset", False):
        raise g.refuse("offset is set; NNAPI's STRIDED_SLICE takes absolute ends")
    masks = [g.int32(int(g.option(k, 0) or 0)) for k in ("begin_mask", "end_mask", "shrink_axis_mask")]
    emit_simple(g, Op.STRIDED_SLICE, [0, 1, 2, 3], masks)


@register("TILE", nnapi="TILE", max_version=1, note="INT32 multipliers")
def tile(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_QUANT8_INT32)
    if g.tensor(g.input(1)).type != schema.INT32:
        raise g.refuse("its multipliers are not INT32")
    emit_simple(g, Op.TILE, [0, 1])


@register("FILL", nnapi="FILL", max_version=1, note="constant dimensions and value")
def fill(g: Graph, op: Operator) -> None:
    dims = g.ints(0, "dimensions")
    if not dims:
        raise g.refuse("it fills a scalar, which NNAPI's FILL cannot give")
    value = g.const(1, "value").reshape(-1)
    code = g.tensor(g.input(1)).type
    if code == schema.FLOAT32:
        scalar = g.float32(float(value[0]))
    elif code in (schema.INT32, schema.INT64):
        v = int(value[0])
        if not -(2**31) <= v < 2**31:
            raise g.refuse(f"its value {v} does not fit in int32")
        scalar = g.int32(v)
    else:
        raise g.refuse(f"its value is {schema.type_name(code)}; NNAPI fills FLOAT32 or INT32")
    g.emit(Op.FILL, [g.int32_vector(dims), scalar], [g.new_operand(g.output(0))])


def _split_sizes(g: Graph, sizes: list[int], total: int) -> list[int]:
    """SPLIT_V's sizes with the one -1 resolved (ComputeSplitVUnknownSplitSize), every size > 0."""
    unknown = [k for k, v in enumerate(sizes) if v == -1]
    if len(unknown) > 1 or any(v < -1 for v in sizes):
        raise g.refuse(f"its size_splits {sizes} hold more than one -1 or a negative size")
    known = sum(v for v in sizes if v != -1)
    resolved = [total - known if v == -1 else v for v in sizes]
    if any(v == 0 for v in resolved):
        raise g.refuse(
            f"its split sizes {resolved} include 0; the NNAPI delegate maps non-zero split sizes only"
        )
    if any(v < 0 for v in resolved) or sum(resolved) != total:
        raise g.refuse(f"its split sizes {resolved} do not add up to the axis's {total}")
    return resolved


@register(
    "SPLIT_V",
    nnapi="SLICE",
    max_version=2,
    note="one SLICE per output (the delegate's lowering); constant INT32 size_splits and axis",
)
def split_v(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_QUANT8_INT32)
    x = g.tensor(g.input(0))
    splits, axis_t = g.tensor(g.input(1)), g.tensor(g.input(2))
    if splits.type != schema.INT32 or len(splits.shape) != 1:
        raise g.refuse("its size_splits are not a constant INT32 vector")
    if axis_t.type != schema.INT32:
        raise g.refuse("its axis is not an INT32 constant")
    sizes = g.ints(1, "size_splits")
    n = max(len(x.shape), 1)
    axis = _axis(g, g.ints(2, "axis")[0], n)
    if len(sizes) != len(op.outputs):
        raise g.refuse(f"it has {len(sizes)} split sizes but {len(op.outputs)} outputs")
    shape = list(g.shape(g.input(0)))
    begin = 0
    for k, size in enumerate(_split_sizes(g, sizes, shape[axis])):
        starts = [begin if d == axis else 0 for d in range(len(shape))]
        lengths = [size if d == axis else shape[d] for d in range(len(shape))]
        inputs = [g.operand(g.input(0)), g.int32_vector(starts), g.int32_vector(lengths)]
        g.emit(Op.SLICE, inputs, [g.new_operand(g.output(k))])
        begin += size


@register(
    "UNPACK",
    nnapi=("RESHAPE", "SPLIT"),
    max_version=2,
    note="RESHAPE then SPLIT (the delegate's lowering); ranks 2-4, any axis but the last",
)
def unpack(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    x = g.tensor(g.input(0))
    n = len(x.shape)
    if not 1 < n <= 4:
        raise g.refuse(f"its input has rank {n}; the NNAPI delegate maps UNPACK for ranks 2 to 4")
    axis = int(g.option("axis", 0))
    if axis in (-1, n - 1):
        raise g.refuse("it unpacks along the last dimension, which the NNAPI delegate does not map")
    axis = _axis(g, axis, n)
    count = int(g.option("num", 0))
    if count != x.shape[axis] or count != len(op.outputs):
        raise g.refuse(
            f"num {count} does not match the axis's {x.shape[axis]} values and its {len(op.outputs)} outputs"
        )
    merged = [*x.shape[:axis], x.shape[axis] * x.shape[axis + 1], *x.shape[axis + 2 :]]
    kind, scale, zp, _ = g.operand_type(x)
    tmp = g.temp(kind, merged, scale, zp)
    g.emit(Op.RESHAPE, [g.operand(g.input(0)), g.int32_vector(merged)], [tmp])
    outs = [g.new_operand(i) for i in op.outputs]
    g.emit(Op.SPLIT, [tmp, g.int32(axis), g.int32(count)], outs)
