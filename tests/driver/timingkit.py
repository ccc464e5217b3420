"""A small float chain model for the per-operation timing tests."""

from __future__ import annotations

import numpy as np

from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as Op


def chain_model():
    """y = relu((x + c) * c) - c: four operations on [2, 3] float32."""
    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, (2, 3))
    c = b.add_constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    none = b.add_scalar(0, T.INT32)
    t1 = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    t2 = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    t3 = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    y = b.add_operand(T.TENSOR_FLOAT32, (2, 3))
    b.add_operation(Op.ADD, (x, c, none), (t1,))
    b.add_operation(Op.MUL, (t1, c, none), (t2,))
    b.add_operation(Op.RELU, (t2,), (t3,))
    b.add_operation(Op.SUB, (t3, c, none), (y,))
    b.mark_outputs(y)
    return b.build()
