"""What every registered kernel gets without writing it: TENSOR_FLOAT16, and inputs a request leaves out.

`kernel_for(code)` hands out the registered `prepare` wrapped twice:

Float16. NNAPI lets a driver compute a TENSOR_FLOAT16 operation in float32 and
round the results to float16. An operation whose operands include
TENSOR_FLOAT16 or FLOAT16 is prepared as its float32 twin (every float16 operand
described as TENSOR_FLOAT32 / FLOAT32, constant values widened exactly); at run
time float16 arguments are widened (exact) and each float32 result of a
TENSOR_FLOAT16 output is rounded to nearest float16. Float widths may not mix
within one operation (a TENSOR_FLOAT32 operand, or a FLOAT32 scalar, next to
float16 ones is INVALID_ARGUMENT), except in CAST, whose whole point is to
convert between them.

Inputs without a value. An optional input may be a model input that the
request leaves without a value (hasNoValue): the kernel then receives None for
it at run time, which its prepare could not know. The first run that leaves
out a given set of such inputs prepares the kernel again with them marked
omitted (as a NO_VALUE constant would be) and keeps that variant; a kernel that
requires one of them fails that preparation with INVALID_ARGUMENT. The wrapper
is a `Kernel` record whose `direct` is the kernel's own run (and `binding` its
binding), for a caller (the plan) that knows none of the inputs can arrive
without a value.

Scalars given at run time. NNAPI lets a scalar operand (an activation code, a
stride, an axis) be a model input whose value comes with each request. Kernels
read their scalar parameters at prepare time, so when an operation has such
inputs and its kernel refuses to prepare without their values, preparation is
deferred: each run prepares the kernel with the scalars' values as constants and
keeps that variant per distinct set of values (at most MAX_VARIANTS are kept; a
value set beyond those is prepared for its run only). A value the kernel
refuses fails that execution with the kernel's INVALID_ARGUMENT.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from driver.ops._base import ArgInfo, Kernel, Prepare, Run, kernel_record
from driver.ops._base import kernel_for as registered_kernel
from mlts.hal.enums import SCALAR_TYPES, OperandType, OperationType
from mlts.hal.errors import HalError, invalid

T = OperandType
FLOAT16_TYPES = frozenset({T.TENSOR_FLOAT16, T.FLOAT16})
FLOAT32_TYPES = frozenset({T.TENSOR_FLOAT32, T.FLOAT32})
_WIDER: dict[int, OperandType] = {T.TENSOR_FLOAT16: T.TENSOR_FLOAT32, T.FLOAT16: T.FLOAT32}
#: Operations whose float operands may have different widths.
MIXED_WIDTHS = frozenset({OperationType.CAST})
#: Operations whose kernels take float16 operands themselves (mixed widths where NNAPI allows them,
#: float16 arithmetic where the reference computes in float16): the wrapper leaves them alone.
NATIVE_FLOAT16 = frozenset(
    {
        OperationType.AXIS_ALIGNED_BBOX_TRANSFORM,
        OperationType.BIDIRECTIONAL_SEQUENCE_LSTM,
        OperationType.BIDIRECTIONAL_SEQUENCE_RNN,
        OperationType.BOX_WITH_NMS_LIMIT,
        OperationType.DETECTION_POSTPROCESSING,
        OperationType.EMBEDDING_LOOKUP,
        OperationType.GENERATE_PROPOSALS,
        OperationType.HASHTABLE_LOOKUP,
        OperationType.HEATMAP_MAX_KEYPOINT,
        OperationType.LSH_PROJECTION,
        OperationType.RANDOM_MULTINOMIAL,
        OperationType.RNN,
        OperationType.ROI_ALIGN,
        OperationType.ROI_POOLING,
        OperationType.SVDF,
        OperationType.UNIDIRECTIONAL_SEQUENCE_RNN,
    }
)
#: How many sets of value-less inputs one operation keeps a prepared variant for.
MAX_VARIANTS = 16


def kernel_for(code: int) -> Prepare | None:
    """The kernel registered for operation `code`, with float16 and value-less inputs handled."""
    prepare = registered_kernel(code)
    if prepare is None:
        return None
    if code not in NATIVE_FLOAT16:
        prepare = _float16(code, prepare)
    return _runtime_scalars(_without_values(prepare))


def _name(code: int) -> str:
    try:
        return OperationType(code).name
    except ValueError:
        return f"operation type {code}"


# ------------------------------------------------------------ float16


def _widen_info(arg: ArgInfo) -> ArgInfo:
    wider = _WIDER.get(arg.type)
    if wider is None:
        return arg
    value = arg.value
    if isinstance(value, np.ndarray):
        value = value.astype(np.float32)
    elif value is not None:
        value = float(value)
    return dataclasses.replace(arg, type=int(wider), value=value)


def _check_widths(code: int, ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> None:
    """Float16 and float32 operands may not mix; input 0 decides the operation's width, as in NNAPI."""
    if code in MIXED_WIDTHS:
        return
    wide = bool(ins) and ins[0].type in FLOAT32_TYPES and not ins[0].omitted
    odd = FLOAT16_TYPES if wide else FLOAT32_TYPES
    for what, args in (("input", ins), ("output", outs)):
        for i, arg in enumerate(args):
            if arg.type in odd and not arg.omitted:
                want = T(arg.type).name.replace("FLOAT16", "FLOAT32") if wide else _float16_twin(arg.type)
                raise invalid(
                    f"{_name(code)}: {what} {i} has type {T(arg.type).name} in an operation on "
                    f"{'float32' if wide else 'float16'} operands; expected {want}"
                )


def _float16_twin(code: int) -> str:
    return "TENSOR_FLOAT16" if code == T.TENSOR_FLOAT32 else "FLOAT16"


def _float16(code: int, prepare: Prepare) -> Prepare:
    def prepare16(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
        if not any(a.type in FLOAT16_TYPES and not a.omitted for a in (*ins, *outs)):
            return prepare(ins, outs)
        _check_widths(code, ins, outs)
        run = kernel_record(prepare([_widen_info(a) for a in ins], [_widen_info(a) for a in outs])).run
        narrow = tuple(o.type == T.TENSOR_FLOAT16 for o in outs)

        def run16(args: Sequence[Any]) -> list[np.ndarray]:
            wide = [
                a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float16 else a
                for a in args
            ]
            results = run(wide)
            with np.errstate(over="ignore"):  # beyond float16's range is inf, as IEEE rounding says
                return [
                    r.astype(np.float16) if i < len(narrow) and narrow[i] and r.dtype == np.float32 else r
                    for i, r in enumerate(results)
                ]

        return run16

    return prepare16


# ------------------------------------------------------------ inputs without a value


def _without_values(prepare: Prepare) -> Prepare:
    def prepare_any(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
        prepared = prepare(ins, outs)
        # Inputs that arrive at run time: a request may leave any of them without a value.
        candidates = tuple(i for i, a in enumerate(ins) if a.value is None and not a.omitted)
        if not candidates:
            return prepared
        kernel = kernel_record(prepared)
        run = kernel.run
        variants: dict[tuple[int, ...], Run] = {}
        lock = threading.Lock()

        def variant(missing: tuple[int, ...]) -> Run:
            with lock:
                found = variants.get(missing)
            if found is not None:
                return found
            marked = [dataclasses.replace(a, omitted=True) if i in missing else a for i, a in enumerate(ins)]
            made = kernel_record(prepare(marked, outs)).run
            with lock:
                if len(variants) < MAX_VARIANTS:
                    variants[missing] = made
            return made

        def run_any(args: Sequence[Any]) -> list[np.ndarray]:
            for i in candidates:
                if args[i] is None:
                    break
            else:
                return run(args)
            missing = tuple(i for i in candidates if args[i] is None)
            chosen = variant(missing)
            try:
                return chosen(args)
            except HalError:
                raise
            except (AttributeError, TypeError, ValueError, IndexError) as e:
                # The kernel does not treat these inputs as optional.
                raise invalid(
                    f"input(s) {list(missing)} have no value, which this operation requires "
                    f"({type(e).__name__}: {e})"
                ) from None

        # `direct` for callers that know no input is missing.
        return Kernel(run_any, direct=kernel.fast, binding=kernel.binding)

    return prepare_any


# ------------------------------------------------------------ scalars given at run time


def _runtime_scalars(prepare: Prepare) -> Prepare:
    def prepare_scalars(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run:
        late = tuple(
            i for i, a in enumerate(ins) if a.type in SCALAR_TYPES and a.value is None and not a.omitted
        )
        if not late:
            return prepare(ins, outs)
        try:
            return prepare(ins, outs)
        except HalError:
            pass  # the kernel needs the values: prepare once they are known
        variants: dict[tuple[Any, ...], Run] = {}
        lock = threading.Lock()

        def run_scalars(args: Sequence[Any]) -> list[np.ndarray]:
            values = tuple(_scalar_value(args[i]) for i in late)
            with lock:
                run = variants.get(values)
            if run is None:
                given = list(ins)
                for i, v in zip(late, values, strict=True):
                    given[i] = (
                        dataclasses.replace(ins[i], omitted=True)
                        if v is None
                        else dataclasses.replace(ins[i], value=v)
                    )
                run = kernel_record(prepare(given, outs)).run
                with lock:
                    if len(variants) < MAX_VARIANTS:
                        variants[values] = run
            return run(args)

        return run_scalars

    return prepare_scalars


def _scalar_value(arg: Any) -> Any:
    """A run-time scalar argument (a 0-d array from the request, or None) as a Python value."""
    if arg is None:
        return None
    return np.asarray(arg).reshape(-1)[0].item()
