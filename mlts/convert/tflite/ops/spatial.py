"""Padding, space/batch/depth rearrangements and resizing, NHWC throughout.

PAD becomes PAD, or PAD_V2 when the file gives a pad value (a FLOAT32 scalar for float tensors,
the stored 8-bit value as INT32 for quantized ones: both pad with that value, 8-bit PAD with the
zero point). BATCH_TO_SPACE_ND is mapped only with zero crops (NNAPI has none). RESIZE_BILINEAR
takes the output size from the output tensor, RESIZE_NEAREST_NEIGHBOR from its size input, and both
pass align_corners and half_pixel_centers (NNAPI 1.3 defines both flags for both operations).
"""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import FLOAT_OR_QUANT8, emit_simple, expect_type, rank
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperationType

Op = OperationType


@register(
    "PAD",
    "PADV2",
    nnapi={"PAD": ("PAD", "PAD_V2"), "PADV2": ("PAD", "PAD_V2")},
    max_version=2,
    note="PAD_V2 when a pad value is given",
)
def pad(g: Graph, op: Operator) -> None:
    code = expect_type(g, 0, FLOAT_OR_QUANT8)
    if any(d == 0 for d in g.tensor(g.input(0)).shape):
        raise g.refuse("its input has no elements; NNAPI's PAD cannot take an empty tensor")
    if not g.has_input(2):
        emit_simple(g, Op.PAD, [0, 1])
        return
    value = g.const(2, "pad value").reshape(-1)
    if value.size != 1:
        raise g.refuse("its pad value is not one element")
    scalar = g.float32(float(value[0])) if code == schema.FLOAT32 else g.int32(int(value[0]))
    emit_simple(g, Op.PAD_V2, [0, 1], [scalar])


@register("SPACE_TO_BATCH_ND", nnapi="SPACE_TO_BATCH_ND", max_version=2)
def space_to_batch(g: Graph, op: Operator) -> None:
    emit_simple(g, Op.SPACE_TO_BATCH_ND, [0, 1, 2])


@register("BATCH_TO_SPACE_ND", nnapi="BATCH_TO_SPACE_ND", max_version=2, note="zero crops only")
def batch_to_space(g: Graph, op: Operator) -> None:
    crops = g.ints(2, "crops")
    if len(crops) != 4 or any(crops):
        raise g.refuse(f"its crops {crops} are not all zero; NNAPI's BATCH_TO_SPACE_ND does not crop")
    emit_simple(g, Op.BATCH_TO_SPACE_ND, [0, 1])


@register("SPACE_TO_DEPTH", "DEPTH_TO_SPACE", nnapi=("SPACE_TO_DEPTH", "DEPTH_TO_SPACE"), max_version=2)
def space_depth(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    block = int(g.option("block_size", 0))
    if block < 1:
        raise g.refuse(f"block size {block} must be >= 1")
    emit_simple(
        g, Op.SPACE_TO_DEPTH if op.code.name == "SPACE_TO_DEPTH" else Op.DEPTH_TO_SPACE, [0], [g.int32(block)]
    )


def _flags(g: Graph) -> tuple[bool, bool]:
    return bool(g.option("align_corners", False)), bool(g.option("half_pixel_centers", False))


@register(
    "RESIZE_BILINEAR",
    nnapi="RESIZE_BILINEAR",
    max_version=3,
    note="constant size; align_corners, half_pixel_centers",
)
def resize_bilinear(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    if rank(g, g.input(0)) != 4:
        raise g.refuse("its input is not rank 4")
    g.const(1, "size")
    out = g.tensor(g.output(0))
    if len(out.shape) != 4:
        raise g.refuse("its output is not rank 4")
    params = [g.int32(out.shape[2]), g.int32(out.shape[1])]
    align, half = _flags(g)
    if align or half:
        params += [g.bool(False), g.bool(align), g.bool(half)]
    emit_simple(g, Op.RESIZE_BILINEAR, [0], params)


@register(
    "RESIZE_NEAREST_NEIGHBOR",
    nnapi="RESIZE_NEAREST_NEIGHBOR",
    max_version=3,
    note="constant size; align_corners, half_pixel_centers",
)
def resize_nearest(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    size = g.ints(1, "size")
    if len(size) != 2:
        raise g.refuse(f"its size {size} is not [height, width]")
    params = [g.int32(size[1]), g.int32(size[0]), g.bool(False)]
    align, half = _flags(g)
    if align or half:
        params += [g.bool(align), g.bool(half)]
    emit_simple(g, Op.RESIZE_NEAREST_NEIGHBOR, [0], params)
