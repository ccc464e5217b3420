"""PAD_V2: like PAD, filling with the value of input 2 (FLOAT32) instead of zeros."""

from __future__ import annotations

from collections.abc import Sequence

from driver.ops._base import ArgInfo, Run, expect_count, register
from driver.ops._pad_common import prepare_pad
from driver.ops._params import float_param
from mlts.hal.enums import OperationType


@register(OperationType.PAD_V2)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    expect_count("PAD_V2", ins, (3,), outs)
    return prepare_pad("PAD_V2", ins, outs, float_param("PAD_V2", "pad value", ins, 2))
