"""Shared by the bound-step tests (driver.bound_steps): a model of two chunks of bindable steps, its
inputs, and a plan whose steps all run one by one."""

from __future__ import annotations

import numpy as np

from driver.executor import Plan
from driver.straight_line import compile_steps
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O


def unbound(plan: Plan) -> Plan:
    """The plan's straight-line function with every step called one by one (no chunk binds)."""
    plan._straight = compile_steps(
        plan.steps, plan.input_indexes, plan.output_indexes, plan._template, plan.sub.operands, bind=False
    )
    plan._straight_tried = True
    return plan


def _conv(bld, rng, x, cin, cout, k, stride, pad, act, out_hw):
    w = bld.add_constant(rng.standard_normal((cout, k, k, cin)).astype(np.float32))
    b = bld.add_constant(rng.standard_normal(cout).astype(np.float32))
    y = bld.add_operand(T.TENSOR_FLOAT32, (1, *out_hw, cout))
    args = [x, w, b, bld.add_int32(pad), bld.add_int32(stride), bld.add_int32(stride), bld.add_int32(act)]
    bld.add_operation(O.CONV_2D, args, [y])
    return y


def _depthwise(bld, rng, x, cin, mult, stride, act, out_hw):
    w = bld.add_constant(rng.standard_normal((1, 3, 3, cin * mult)).astype(np.float32))
    b = bld.add_constant(rng.standard_normal(cin * mult).astype(np.float32))
    y = bld.add_operand(T.TENSOR_FLOAT32, (1, *out_hw, cin * mult))
    args = [x, w, b, bld.add_int32(1), bld.add_int32(stride), bld.add_int32(stride), bld.add_int32(mult)]
    bld.add_operation(O.DEPTHWISE_CONV_2D, [*args, bld.add_int32(act)], [y])
    return y


def _model():
    """x [1,12,12,3] -> conv 3x3/2 (im2col) -> depthwise x2 -> conv 1x1 = a (an output, read later)
    -> a2 = a + a -> ADD a2 + a with RELU (not bound) -> depthwise/2 -> conv 1x1 = m -> conv 3x3
    VALID to one pixel -> RESHAPE to [1, 10]: two chunks, six outputs of the plan."""
    rng = np.random.default_rng(7)
    bld = ModelBuilder()
    x = bld.add_input(T.TENSOR_FLOAT32, (1, 12, 12, 3))
    c1 = _conv(bld, rng, x, 3, 8, 3, 2, 1, 3, (6, 6))  # SAME, RELU6
    d1 = _depthwise(bld, rng, c1, 8, 2, 1, 1, (6, 6))  # RELU
    a = _conv(bld, rng, d1, 16, 16, 1, 1, 2, 0, (6, 6))  # VALID 1x1, no activation
    a2 = bld.add_operand(T.TENSOR_FLOAT32, (1, 6, 6, 16))
    bld.add_operation(O.ADD, [a, a, bld.add_int32(0)], [a2])
    s = bld.add_operand(T.TENSOR_FLOAT32, (1, 6, 6, 16))
    bld.add_operation(O.ADD, [a2, a, bld.add_int32(1)], [s])  # RELU: not bound
    d2 = _depthwise(bld, rng, s, 16, 1, 2, 2, (3, 3))  # RELU1
    m = _conv(bld, rng, d2, 16, 8, 1, 1, 2, 1, (3, 3))
    one = _conv(bld, rng, m, 8, 10, 3, 1, 2, 0, (1, 1))  # one row: the GEMM's loop for few rows
    flat = bld.add_operand(T.TENSOR_FLOAT32, (1, 10))
    bld.add_operation(O.RESHAPE, [one, bld.add_int32_tensor([1, -1])], [flat])
    bld.mark_outputs([a, m, c1, d2, one, flat])
    return bld.build()


def _inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((1, 12, 12, 3)).astype(np.float32) for _ in range(n)]
