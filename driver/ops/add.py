"""ADD: a + b elementwise with NumPy broadcasting, then the fused activation (input 2).

Quant8 (NNAPI's addQuant8, TFLite's scheme): with left_shift = 20 and
twice_max = 2 * max(s_a, s_b), each input becomes ((x - zp) << 20) scaled by
s / twice_max; the sum is scaled by twice_max / (2^20 * s_out), the output
zero point added, then clamped to the activation range and saturated. All
three multipliers must lie in (0, 1), as NNAPI's reference requires.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._base import ArgInfo, Binding, Kernel, Run, register
from driver.ops._binary import QuantBinary, prepare_binary
from driver.ops._qelementwise import as_bytes, byte_values, f32, smaller_than_one
from driver.ops._quant import multiply_by_quantized_multiplier
from mlts.hal.enums import OperandType, OperationType

LEFT_SHIFT = 20


def _input_table(name: str, arg: ArgInfo, twice_max: float) -> np.ndarray:
    """Per byte: ((x - zp) << 20) scaled by s / twice_max."""
    m, e = smaller_than_one(name, f32(arg.scale) / twice_max, "input scale / twice the larger input scale")
    return multiply_by_quantized_multiplier((byte_values(arg.type) - arg.zero_point) << LEFT_SHIFT, m, e)


def _quant_add(name: str, a: ArgInfo, b: ArgInfo, out: ArgInfo) -> QuantBinary:
    twice_max = 2 * max(f32(a.scale), f32(b.scale))
    real_out = twice_max / ((1 << LEFT_SHIFT) * f32(out.scale))
    m, e = smaller_than_one(name, real_out, "twice the larger input scale / (2^20 * output scale)")
    ta, tb = _input_table(name, a, twice_max), _input_table(name, b, twice_max)
    zp = out.zero_point

    def add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return multiply_by_quantized_multiplier(ta[as_bytes(x)] + tb[as_bytes(y)], m, e) + zp

    return add


@register(OperationType.ADD)
def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
    run = prepare_binary("ADD", ins, outs, np.add, int_fn=np.add, quant=_quant_add)
    f32_types = all(a.type == OperandType.TENSOR_FLOAT32 for a in (ins[0], ins[1], outs[0]))
    if _fast.enabled() and f32_types and ins[2].value is not None and int(ins[2].value) == 0:

        def bind(
            shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
        ) -> _bind.BoundStep | None:
            """`run` as one compiled sum for float32 inputs of one shape, without activation
            (driver.bound_steps)."""
            if shapes[0] != shapes[1]:
                return None
            return _bind.bind_add_f32(shapes[0], ptrs[0], ptrs[1])

        return Kernel(run, binding=Binding(bind, (0, 1)))
    return run
