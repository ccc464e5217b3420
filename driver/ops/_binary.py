"""What ADD, SUB, MUL, DIV, MAXIMUM and MINIMUM share: a broadcasting float32 (or float16, see `_adapt`) ufunc, then the fused activation if the op has one.

ADD and MUL also take quant8 inputs: both inputs and the output share one
8-bit type (scales and zero points may differ); the op's `quant` factory
gives the int64 result before the activation clamp, which is
`activation_range` of the output, then the result saturates to the type.
The result depends only on the two input bytes, so prepare tabulates it for
all 65536 pairs and run is one lookup per element: for two inputs of one shape
the compiled `mk_pair_table_q8` (in a bound run of compiled calls too,
driver.bound_steps), else NumPy's take with broadcasting.

TENSOR_INT32 (NNAPI 1.3), where the op's `int_fn` is given: both inputs and the
output TENSOR_INT32, 32-bit wrapping arithmetic, fused activation NONE only.
The ops with a fused activation (ADD, SUB, MUL, DIV) take tensors of rank at most 4.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from driver.ops import _bind, _fast
from driver.ops._activation import apply_activation, parse_activation
from driver.ops._base import ArgInfo, Binding, Kernel, Run, expect_count
from driver.ops._params import float_outputs, float_tensor
from driver.ops._qelementwise import (
    as_bytes,
    check_quant_params,
    quant8_output,
    requantize_table,
    tensor_kind,
)
from driver.ops._quant import QUANT8_DTYPE, activation_range, check_same_type, saturate
from driver.ops._workspace import address, output
from mlts.hal.enums import OperandType
from mlts.hal.errors import invalid

MAX_RANK = 4

# (a, b) int8/uint8 arrays -> int64 result before the activation clamp, NumPy broadcasting.
QuantBinary = Callable[[np.ndarray, np.ndarray], np.ndarray]
# (op name, input 0, input 1, output) -> QuantBinary; raises INVALID_ARGUMENT for scales it cannot honour.
QuantFactory = Callable[[str, ArgInfo, ArgInfo, ArgInfo], QuantBinary]


def _broadcast(name: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if a == b:
        return a  # the common case, without NumPy's general rule
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        raise invalid(
            f"{name}: input shapes {a} and {b} do not broadcast (each dimension must match or be 1)"
        ) from None


def prepare_binary(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    ufunc: Callable[..., Any],
    *,
    fused_activation: bool = True,
    quant: QuantFactory | None = None,
    int_fn: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> Run:
    """A kernel computing `ufunc(a, b, out=...)` with NumPy broadcasting, then the activation of input 2 (if any).

    With `quant`, quant8 inputs are accepted and computed by the factory's function; with
    `int_fn`, TENSOR_INT32 inputs by `int_fn(a, b)` on int32 arrays.
    """
    expect_count(name, ins, (3,) if fused_activation else (2,), outs)
    if fused_activation:
        for k in (0, 1):
            if len(ins[k].shape) > MAX_RANK:
                raise invalid(
                    f"{name}: input {k} has rank {len(ins[k].shape)}; at most {MAX_RANK} is supported"
                )
    if int_fn is not None and ins[0].type == OperandType.TENSOR_INT32:
        return _prepare_int32(name, ins, outs, int_fn, fused_activation)
    if quant is not None and tensor_kind(name, "input 0", ins[0]):
        return _prepare_quant(name, ins, outs, quant, fused_activation)
    float_tensor(name, "input 0", ins[0])
    float_tensor(name, "input 1", ins[1])
    float_outputs(name, outs)
    act = parse_activation(name, ins, 2) if fused_activation else 0
    _check_static_shapes(name, ins)

    # Division by zero gives inf/nan as in IEEE float; no warning spam. NumPy's decorator form sets the
    # error state around each call (per thread, as the `with` block does) in one Python call instead of three.
    quiet = np.errstate(divide="ignore", invalid="ignore", over="ignore")(ufunc)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        a, b = args[0], args[1]
        shape = a.shape
        if shape != b.shape:
            shape = _broadcast(name, shape, b.shape)
        # The step's reused buffer: no fresh pages to fault in for a large tensor on every run.
        out = output(shape, np.float32)
        quiet(a, b, out=out)  # by keyword: NumPy deprecates a positional `out` for maximum and minimum
        return [out] if act == 0 else [apply_activation(act, out)]

    return run


def _prepare_int32(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    int_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
    fused_activation: bool,
) -> Run:
    for what, arg in (("input 1", ins[1]), ("output 0", outs[0])):
        if arg.type != OperandType.TENSOR_INT32:
            raise invalid(
                f"{name}: {what} is {OperandType(arg.type).name}; with TENSOR_INT32 input 0 it must be TENSOR_INT32"
            )
    if fused_activation and parse_activation(name, ins, 2) != 0:
        raise invalid(f"{name}: a TENSOR_INT32 operation takes fused activation NONE (0) only")
    _check_static_shapes(name, ins)

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        a, b = args[0], args[1]
        shape = _broadcast(name, a.shape, b.shape)
        with np.errstate(over="ignore"):
            out = int_fn(a.astype(np.int32, copy=False), b.astype(np.int32, copy=False))
        return [np.ascontiguousarray(np.broadcast_to(out, shape), dtype=np.int32)]

    return run


def _check_static_shapes(name: str, ins: Sequence[ArgInfo]) -> None:
    sa, sb = ins[0].shape, ins[1].shape
    if sa and sb and 0 not in sa and 0 not in sb:
        _broadcast(name, sa, sb)


def _prepare_quant(
    name: str, ins: Sequence[ArgInfo], outs: Sequence[ArgInfo], quant: QuantFactory, fused_activation: bool
) -> Run:
    a, b, out = ins[0], ins[1], outs[0]
    check_same_type(name, "input 1", b, a)
    check_quant_params(name, "input 1", b)
    quant8_output(name, "output 0", out, a)
    act = parse_activation(name, ins, 2) if fused_activation else 0
    _check_static_shapes(name, ins)
    lo, hi = activation_range(act, out.type, out.scale, out.zero_point)
    table = _pair_table(quant(name, a, b, out), a, b, lo, hi, out.type)
    if not _fast.enabled():

        def run_numpy(args: Sequence[Any]) -> list[np.ndarray]:
            x, y = args[0], args[1]
            _broadcast(name, x.shape, y.shape)
            return [_take_pairs(table, x, y)]

        return run_numpy
    table_bytes = table.view(np.uint8)
    table_ptr = address(table_bytes)
    dtype = table.dtype
    lookup = _fast.LIB.mk_pair_table_q8

    def run(args: Sequence[Any]) -> list[np.ndarray]:
        x, y = args[0], args[1]
        shape = _broadcast(name, x.shape, y.shape)
        if x.shape != y.shape or not (x.flags.c_contiguous and y.flags.c_contiguous):
            return [_take_pairs(table, x, y)]
        z = output(shape, dtype)
        lookup(x.ctypes.data, y.ctypes.data, table_ptr, z.ctypes.data, z.size)
        return [z]

    def bind(
        shapes: Sequence[tuple[int, ...]], ptrs: Sequence[int], scratch: _bind.Scratch
    ) -> _bind.BoundStep | None:
        """`run`'s compiled lookup for two inputs of one shape (driver.bound_steps)."""
        if shapes[0] != shapes[1]:
            return None
        return _bind.bind_pair_table_q8(shapes[0], ptrs[0], ptrs[1], table_bytes, dtype)

    return Kernel(run, binding=Binding(bind, (0, 1)))


def _take_pairs(table: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """table[(byte of x) * 256 + (byte of y)] with NumPy broadcasting."""
    index = (as_bytes(x).astype(np.intp) << 8) | as_bytes(y)
    return np.take(table, index)


def _pair_table(fn: QuantBinary, a: ArgInfo, b: ArgInfo, lo: int, hi: int, out_type: int) -> np.ndarray:
    """The saturated result for every pair of bytes, flat: entry (byte_a << 8) | byte_b."""
    every = np.arange(256, dtype=np.uint8)
    xs: np.ndarray = every.view(QUANT8_DTYPE[a.type])[:, None]
    ys: np.ndarray = every.view(QUANT8_DTYPE[b.type])[None, :]
    return saturate(fn(xs, ys), lo, hi, out_type).reshape(-1)


def prepare_extremum(
    name: str,
    ins: Sequence[ArgInfo],
    outs: Sequence[ArgInfo],
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Run:
    """MAXIMUM or MINIMUM (`fn` is np.maximum or np.minimum): no fused activation, NaN propagates.

    Quant8 (NNAPI's evalQuant8): each input byte is first requantized to the output's
    scale and zero point, then `fn` picks between the two requantized bytes.
    """

    def quant(name: str, a: ArgInfo, b: ArgInfo, out: ArgInfo) -> QuantBinary:
        ta = requantize_table(a, out).astype(np.int64)
        tb = requantize_table(b, out).astype(np.int64)

        def pick(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            return fn(ta[as_bytes(x)], tb[as_bytes(y)])

        return pick

    return prepare_binary(name, ins, outs, fn, fused_activation=False, quant=quant, int_fn=fn)
