"""Pooling: implicit padding, strides, filter size and fused activation, as NNAPI orders them."""

from __future__ import annotations

from mlts.convert.tflite.context import Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import (
    FLOAT,
    FLOAT_OR_QUANT8,
    activation,
    emit_simple,
    expect_type,
    padding,
)
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperationType

Op = OperationType
_POOLS = {"AVERAGE_POOL_2D": Op.AVERAGE_POOL_2D, "MAX_POOL_2D": Op.MAX_POOL_2D, "L2_POOL_2D": Op.L2_POOL_2D}


def _params(g: Graph) -> list[int]:
    values = [int(g.option(k, 1)) for k in ("stride_w", "stride_h", "filter_width", "filter_height")]
    if any(v < 1 for v in values):
        raise g.refuse(f"strides and filter size {values} must be >= 1")
    return [g.int32(padding(g)), *(g.int32(v) for v in values), g.int32(activation(g))]


@register("AVERAGE_POOL_2D", "MAX_POOL_2D", nnapi=("AVERAGE_POOL_2D", "MAX_POOL_2D"), max_version=2)
def pool(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT_OR_QUANT8)
    emit_simple(g, _POOLS[op.code.name], [0], _params(g))


@register("L2_POOL_2D", nnapi="L2_POOL_2D", max_version=1, note="FLOAT32")
def l2_pool(g: Graph, op: Operator) -> None:
    expect_type(g, 0, FLOAT)
    emit_simple(g, Op.L2_POOL_2D, [0], _params(g))
