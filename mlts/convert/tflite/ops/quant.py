"""QUANTIZE, DEQUANTIZE and DENSIFY.

QUANTIZE of a float32 tensor is NNAPI's QUANTIZE. QUANTIZE of an 8-bit tensor (TFLite's
requantization, e.g. uint8 input to int8 model) is DEQUANTIZE to float32 then QUANTIZE, exactly
the delegate's lowering: NNAPI quantizes only from float. DEQUANTIZE of an 8-bit tensor is NNAPI's
DEQUANTIZE (per channel where the file quantizes per channel). DEQUANTIZE of a constant FLOAT16
tensor and DENSIFY of a constant sparse tensor are no operations at all: the converter stores the
float32 or dense value as the constant the consumers read (the delegate's first pass does the
same for FLOAT16 weights, and densifies sparse convolution filters).
"""

from __future__ import annotations

from mlts.convert.tflite import schema
from mlts.convert.tflite.context import PER_CHANNEL, PLAIN, Graph
from mlts.convert.tflite.model import Operator
from mlts.convert.tflite.ops._common import QUANT8, emit_simple, expect_output_type, expect_type
from mlts.convert.tflite.registry import register
from mlts.hal.enums import OperandType, OperationType

Op = OperationType


def _positive_scale(g: Graph, index: int, what: str) -> None:
    q = g.tensor(index).quant
    if q is None or not q.scales or min(q.scales) <= 0:
        raise g.refuse(f"its {what} has no quantization scale > 0")


@register(
    "QUANTIZE", nnapi=("QUANTIZE", "DEQUANTIZE"), max_version=2, note="8-bit input: DEQUANTIZE then QUANTIZE"
)
def quantize(g: Graph, op: Operator) -> None:
    code = expect_type(g, 0, (schema.FLOAT32, schema.UINT8, schema.INT8))
    expect_output_type(g, QUANT8)
    _positive_scale(g, g.output(0), "output")
    x = g.operand(g.input(0))
    if code != schema.FLOAT32:
        _positive_scale(g, g.input(0), "input")
        tmp = g.temp(OperandType.TENSOR_FLOAT32, g.shape(g.input(0)))
        g.emit(Op.DEQUANTIZE, [x], [tmp])
        x = tmp
    g.emit(Op.QUANTIZE, [x], [g.new_operand(g.output(0))])


@register(
    "DEQUANTIZE",
    nnapi=("DEQUANTIZE", "CAST"),
    max_version=2,
    note="constant FLOAT16: stored as float32; run-time FLOAT16: CAST",
)
def dequantize(g: Graph, op: Operator) -> None:
    index = g.input(0)
    t = g.tensor(index)
    if t.type == schema.FLOAT16:
        # A run-time float16 tensor (constants never reach here): float16 -> float32 is exact.
        emit_simple(g, Op.CAST, [0])
        return
    expect_type(g, 0, QUANT8)
    flavour = PER_CHANNEL if t.quant is not None and t.quant.per_channel else PLAIN
    g.emit(Op.DEQUANTIZE, [g.operand(index, flavour)], [g.new_operand(g.output(0))])


@register("DENSIFY", nnapi=(), max_version=None, note="constant sparse tensors only: densified at conversion")
def densify(g: Graph, op: Operator) -> None:
    raise g.refuse("its input is not a constant sparse tensor; the NNAPI delegate densifies constants only")
