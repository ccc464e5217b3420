"""Output shapes before any kernel runs, so sizes are checked before anything is allocated.

A step's output shape is known without running it when the model declares
it fully, or when a shape rule here computes it from the input shapes and
the values of its parameters (constants, model inputs). Rules cover the
operations whose output can be much larger than their inputs: broadcasting
element-wise operations, padding, resizing, concatenation, tiling and
filling. `Budget` turns the shapes
into byte counts and checks them against the request's output buffers and
the driver's memory budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.budget import DEFAULT_EXECUTION_BYTES
from mlts.hal.enums import ErrorStatus, OperationType
from mlts.hal.errors import HalError
from mlts.hal.types import OutputShape

Shape = tuple[int, ...]
#: (input shapes or None, input values or None) -> output shapes, or None when they cannot be known yet.
ShapeRule = Callable[[Sequence[Shape | None], Sequence[Any]], list[Shape] | None]

#: Bytes one execution may hold in intermediate and output tensors at once (driver.budget).
DEFAULT_MEMORY_BUDGET = DEFAULT_EXECUTION_BYTES

_RULES: dict[int, ShapeRule] = {}


def _rule(*codes: OperationType) -> Callable[[ShapeRule], ShapeRule]:
    def deco(fn: ShapeRule) -> ShapeRule:
        for code in codes:
            _RULES[int(code)] = fn
        return fn

    return deco


@_rule(
    OperationType.ADD,
    OperationType.SUB,
    OperationType.MUL,
    OperationType.DIV,
    OperationType.MAXIMUM,
    OperationType.MINIMUM,
)
def _broadcast(shapes: Sequence[Shape | None], values: Sequence[Any]) -> list[Shape] | None:
    a, b = shapes[0], shapes[1]
    if a is None or b is None:
        return None
    try:
        return [tuple(int(d) for d in np.broadcast_shapes(a, b))]
    except ValueError:
        return None  # the kernel reports the mismatch


@_rule(OperationType.PAD, OperationType.PAD_V2)
def _pad(shapes: Sequence[Shape | None], values: Sequence[Any]) -> list[Shape] | None:
    x, pads = shapes[0], values[1]
    if x is None or pads is None:
        return None
    p = np.asarray(pads)
    if p.shape != (len(x), 2) or (p < 0).any():
        return None
    return [tuple(int(d) + int(b) + int(a) for d, (b, a) in zip(x, p.tolist(), strict=True))]


@_rule(OperationType.RESIZE_BILINEAR, OperationType.RESIZE_NEAREST_NEIGHBOR)
def _resize(shapes: Sequence[Shape | None], values: Sequence[Any]) -> list[Shape] | None:
    x = shapes[0]
    if x is None or len(x) != 4 or values[1] is None or values[2] is None:
        return None
    nchw = bool(values[3]) if len(values) > 3 and values[3] is not None else False
    n, h, w, c = (x[0], x[2], x[3], x[1]) if nchw else x
    if isinstance(values[1], float | np.floating):  # scales, as the kernel applies them
        ow, oh = int(w * float(values[1])), int(h * float(values[2]))
    elif isinstance(values[1], int | np.integer):
        ow, oh = int(values[1]), int(values[2])
    else:
        return None
    if ow <= 0 or oh <= 0:
        return None
    return [(n, c, oh, ow) if nchw else (n, oh, ow, c)]


@_rule(OperationType.CONCATENATION)
def _concatenation(shapes: Sequence[Shape | None], values: Sequence[Any]) -> list[Shape] | None:
    axis = values[-1]
    parts = [p for p in shapes[:-1] if p is not None]
    if not parts or len(parts) != len(shapes) - 1 or axis is None:
        return None
    rank = len(parts[0])
    if rank == 0 or any(len(p) != rank for p in parts):
        return None
    ax = int(np.asarray(axis).reshape(-1)[0])
    ax = ax + rank if ax < 0 else ax
    if not 0 <= ax < rank:
        return None
    out = [int(d) for d in parts[0]]
    out[ax] = sum(int(p[ax]) for p in parts)
    return [tuple(out)]


@_rule(OperationType.TILE)
def _tile(shapes: Sequence[Shape | None], values: Sequence[Any]) -> list[Shape] | None:
    x, multiples = shapes[0], values[1]
    if x is None or multiples is None:
        return None
    m = np.asarray(multiples).reshape(-1)
    if m.size != len(x) or (m <= 0).any():
        return None
    return [tuple(int(d) * int(k) for d, k in zip(x, m.tolist(), strict=True))]


@_rule(OperationType.FILL)
def _fill(shapes: Sequence[Shape | None], values: Sequence[Any]) -> list[Shape] | None:
    dims = values[0]
    if dims is None:
        return None
    d = np.asarray(dims).reshape(-1)
    if (d <= 0).any():
        return None
    return [tuple(int(v) for v in d.tolist())]


def infer(
    op_type: int, declared: Sequence[Shape], shapes: Sequence[Shape | None], values: Sequence[Any]
) -> list[Shape] | None:
    """The output shapes of one operation, or None when only running it can tell.

    `declared` are the output operands' dimensions (0 or [] for unknown).
    """
    if all(d and all(declared_dim > 0 for declared_dim in d) for d in declared):
        return [tuple(d) for d in declared]
    rule = _RULES.get(op_type)
    if rule is None:
        return None
    try:
        inferred = rule(shapes, values)
    except (TypeError, ValueError, IndexError):
        return None  # malformed parameters: the kernel says what is wrong
    if inferred is None or len(inferred) != len(declared):
        return None
    return inferred


def nbytes(shape: Shape, dtype: np.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


class Budget:
    """Checks predicted tensor sizes against the request's output buffers and a memory budget.

    `output_limits[k]` is the byte length of output k's buffer (None: omitted);
    `output_of[idx]` maps an operand index to the model output it is.
    """

    def __init__(
        self,
        limit: int,
        output_of: dict[int, int],
        output_limits: Sequence[int | None] | None,
        declared_outputs: Sequence[Shape],
    ) -> None:
        self.limit = limit
        self.output_of = output_of
        self.output_limits = output_limits
        self.declared_outputs = declared_outputs
        self.known: dict[int, Shape] = {}
        self.short: dict[int, str] = {}  # model outputs whose buffer is too small

    def check(
        self, where: str, index: int, shape: Shape, dtype: np.dtype, live: int, *, outputs: bool = True
    ) -> int:
        """Refuse a tensor of `shape` over the memory budget (RESOURCE_EXHAUSTED_PERSISTENT) and,
        with `outputs`, note a model output too big for its buffer; returns its size in bytes."""
        size = nbytes(shape, dtype)
        k = self.output_of.get(index)
        if outputs and k is not None:
            self.known[k] = shape
            limit = self.output_limits[k] if self.output_limits is not None else None
            if limit is not None and size > limit:
                self.short[k] = f"output {k} needs {size} bytes, has {limit}"
        if size > self.limit or live + size > self.limit:
            self.raise_if_short()  # what the client can fix comes first
            raise HalError(
                ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                f"{where}: output operand {index} of shape {list(shape)} needs {size} bytes; with "
                f"{live} bytes already held that is over the execution's memory budget of {self.limit} "
                "bytes (option max_execution_mb)",
            )
        return size

    def raise_if_short(self) -> None:
        """OUTPUT_INSUFFICIENT_SIZE with every output's shape as far as known, if any buffer is too small."""
        if not self.short:
            return
        shapes = tuple(
            OutputShape(self.known.get(k, tuple(self.declared_outputs[k])), k not in self.short)
            for k in range(len(self.declared_outputs))
        )
        raise HalError(
            ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "; ".join(self.short[k] for k in sorted(self.short)), shapes
        )
