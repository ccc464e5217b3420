"""A mixed float/quantized chain model and its inputs for the partitioning and concurrency tests."""

from __future__ import annotations

import numpy as np

from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType, PaddingScheme
from mlts.hal.types import Model

T = OperandType
O = OperationType  # noqa: E741
Q_SCALE, Q2_SCALE, Q_ZP = 0.05, 0.1, 128
X_SHAPE, Y_SHAPE = (1, 5, 5, 2), (1, 5, 5, 3)


def chain_model(relax: bool = False) -> Model:
    """CONV_2D 3x3 SAME -> RELU -> ADD k -> MUL y (output 0) -> QUANTIZE -> quant ADD q+q -> DEQUANTIZE (output 1)."""
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, X_SHAPE)
    y = b.add_input(T.TENSOR_FLOAT32, Y_SHAPE)
    w = b.add_constant(rng.uniform(-0.5, 0.5, (3, 3, 3, 2)).astype(np.float32))
    bias = b.add_constant(np.array([0.1, -0.2, 0.05], np.float32))
    k = b.add_constant(np.array([0.25, -0.5, 0.125], np.float32))
    none = b.add_scalar(0, T.INT32)
    c = b.add_operand(T.TENSOR_FLOAT32, Y_SHAPE)
    b.add_operation(
        O.CONV_2D,
        [
            x,
            w,
            bias,
            b.add_scalar(PaddingScheme.SAME, T.INT32),
            b.add_scalar(1, T.INT32),
            b.add_scalar(1, T.INT32),
            none,
        ],
        [c],
    )
    r = b.add_operand(T.TENSOR_FLOAT32, Y_SHAPE)
    b.add_operation(O.RELU, [c], [r])
    a = b.add_operand(T.TENSOR_FLOAT32, Y_SHAPE)
    b.add_operation(O.ADD, [r, k, none], [a])
    m = b.add_operand(T.TENSOR_FLOAT32, Y_SHAPE)
    b.add_operation(O.MUL, [a, y, none], [m])
    q = b.add_operand(T.TENSOR_QUANT8_ASYMM, Y_SHAPE, Q_SCALE, Q_ZP)
    b.add_operation(O.QUANTIZE, [m], [q])
    q2 = b.add_operand(T.TENSOR_QUANT8_ASYMM, Y_SHAPE, Q2_SCALE, Q_ZP)
    b.add_operation(O.ADD, [q, q, none], [q2])
    d = b.add_operand(T.TENSOR_FLOAT32, Y_SHAPE)
    b.add_operation(O.DEQUANTIZE, [q2], [d])
    b.mark_outputs(m, d)
    return b.build(relax=relax)


def chain_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [
        rng.uniform(-1, 1, X_SHAPE).astype(np.float32),
        rng.uniform(-1.5, 1.5, Y_SHAPE).astype(np.float32),
    ]
