"""PAD: zeros added before and after each dimension, amounts from input 1 (TENSOR_INT32 [rank, 2]).

Quant8 pads with the zero point (the output's, which equals the input's), i.e. with the real value 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._pad_common import prepare_pad
from mlts.hal.enums import OperationType


@register(OperationType.PAD)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count("PAD", ins, (2,), outs)
    return prepare_pad("PAD", ins, outs, None)
