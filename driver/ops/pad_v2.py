"""PAD_V2: like PAD, filling with the value of input 2 instead of zeros.

The pad value is a FLOAT32 scalar for a float32 input and, for quant8 (NNAPI
1.2 rule), an INT32 scalar in quantized units, which must lie in the type's
range (NNAPI's reference would keep only its low byte).
"""

from __future__ import annotations

from collections.abc import Sequence

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._pad_common import prepare_pad
from driver.ops._params import float_param, int_param
from driver.ops._qelementwise import tensor_kind
from driver.ops._quant import QUANT8_RANGE, type_label
from mlts.hal.enums import OperationType
from mlts.hal.errors import invalid

NAME = "PAD_V2"


def _quant_pad_value(ins: Sequence[ArgInfo]) -> int:
    value = int_param(NAME, "pad value", ins, 2)
    lo, hi = QUANT8_RANGE[ins[0].type]
    if not lo <= value <= hi:
        raise invalid(
            f"{NAME}: pad value is {value}, expected [{lo}, {hi}] for a {type_label(ins[0].type)} input"
        )
    return value


@register(OperationType.PAD_V2)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count(NAME, ins, (3,), outs)
    if tensor_kind(NAME, "input", ins[0]):
        return prepare_pad(NAME, ins, outs, _quant_pad_value(ins))
    return prepare_pad(NAME, ins, outs, float_param(NAME, "pad value", ins, 2))
