"""Transpose -> TRANSPOSE, with the permutation rewritten for NHWC operands (or no op when it cancels out)."""

from __future__ import annotations

from onnx import NodeProto

from mlts.convert.context import NHWC_AXIS, TO_NHWC, Context, Tensor, where
from mlts.convert.errors import ConversionError
from mlts.convert.ops._common import attrs
from mlts.convert.qflow import EXACT, out_quant
from mlts.convert.registry import register
from mlts.hal.enums import OperationType


def nn_perm(perm: list[int], in_nhwc: bool, out_nhwc: bool) -> list[int]:
    """The NN permutation taking the input operand to the output operand in their layouts."""
    rank = len(perm)
    to_nn = list(TO_NHWC) if out_nhwc else list(range(rank))
    from_onnx = list(NHWC_AXIS) if in_nhwc else list(range(rank))
    # Output NN axis i holds ONNX output axis to_nn[i] = ONNX input axis perm[to_nn[i]].
    return [from_onnx[perm[to_nn[i]]] for i in range(rank)]


@register("Transpose", 1)
def transpose(ctx: Context, node: NodeProto) -> None:
    """TRANSPOSE; perm defaults to reversing the axes."""
    x = ctx.tensor(node)
    rank = x.rank
    perm = list(attrs(node).get("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)):
        raise ConversionError(f"{where(node)} has perm {perm}; expected a permutation of 0..{rank - 1}")
    out_shape = tuple(x.shape[p] for p in perm)
    quant = out_quant(ctx, node.output[0], x.quant, EXACT)
    candidates = [True, False] if rank == 4 else [False]
    for out_nhwc in candidates:
        if nn_perm(perm, x.nhwc, out_nhwc) == list(range(rank)):
            # The operand already holds the result in one of the two layouts.
            ctx.bind(node.output[0], Tensor(x.operand, out_shape, out_nhwc, quant))
            ctx.counts["cancelled_transpose"] += 1
            return
    out_nhwc = x.nhwc and rank == 4
    out = ctx.new_tensor(node.output[0], out_shape, out_nhwc, quant)
    ctx.emit(OperationType.TRANSPOSE, [x.operand, ctx.ints(nn_perm(perm, x.nhwc, out_nhwc))], [out.operand])
