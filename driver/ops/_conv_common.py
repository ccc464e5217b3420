"""What CONV_2D and DEPTHWISE_CONV_2D share: telling the padding forms apart, checking filter and bias."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from driver.ops._base import ArgInfo, packed
from driver.ops._params import as_f32, float_tensor
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid


def is_explicit(
    name: str,
    ins: Sequence[ArgInfo],
    layout_at: int,
    explicit_counts: Sequence[int],
    implicit_counts: Sequence[int],
) -> bool:
    """True for the explicit-padding form: input `layout_at` is BOOL (the layout) only in the implicit form."""
    n = len(ins)
    implicit = n == min(implicit_counts) or (n > layout_at and ins[layout_at].type == OperandType.BOOL)
    counts = implicit_counts if implicit else explicit_counts
    if n not in counts:
        form = "implicit" if implicit else "explicit"
        raise invalid(
            f"{name}: {n} inputs for the {form}-padding form, expected {' or '.join(map(str, counts))}"
        )
    return not implicit


def check_filter_and_bias(
    name: str, ins: Sequence[ArgInfo], cout_axis: int, *, quant: bool = False
) -> tuple[int, int, int, int]:
    """Types and shapes of input, filter [D0,KH,KW,D3] and bias [filter dim `cout_axis`]; returns the filter shape.

    With `quant` only the shapes are checked: `_qconv.quant_signature` checks the quantized types.
    """
    if not quant:
        float_tensor(name, "input", ins[0])
        float_tensor(name, "filter", ins[1])
        float_tensor(name, "bias", ins[2])
    if len(ins[0].shape) not in (0, 4):
        raise invalid(f"{name}: input has rank {len(ins[0].shape)} (shape {ins[0].shape}), expected 4")
    fshape = ins[1].value.shape if ins[1].value is not None else ins[1].shape
    if len(fshape) != 4 or 0 in fshape:
        raise invalid(f"{name}: filter shape is {tuple(fshape)}, expected a fully known rank-4 shape")
    cout = fshape[cout_axis]
    bshape = ins[2].value.shape if ins[2].value is not None else ins[2].shape
    if tuple(bshape) not in ((cout,), (0,), ()):
        raise invalid(f"{name}: bias shape is {tuple(bshape)}, expected ({cout},)")
    return tuple(int(d) for d in fshape)  # type: ignore[return-value]


def constant_or_none(arg: ArgInfo, pack: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
    """`pack(value)` for a constant operand, computed once; None when the value comes at run time."""
    return None if arg.value is None else pack(np.asarray(arg.value))


def packed_constant(
    name: str,
    arg: ArgInfo,
    pack: Callable[[np.ndarray], np.ndarray],
    shape: tuple[int, ...],
    dtypes: tuple[type, ...] = (np.float32,),
) -> np.ndarray | None:
    """`pack(value)` of a constant operand as packed array `name` (kept by the compilation cache), else None.

    `shape` and `dtypes` are what the packed array must be (checked when it comes from the cache).
    """
    if arg.value is None:
        return None
    value = np.asarray(arg.value)
    return packed(name, lambda: pack(value), shape=shape, dtypes=dtypes)


def bias_vector(value: np.ndarray) -> np.ndarray:
    """A bias as a contiguous float32 vector."""
    return as_f32(value).reshape(-1)
