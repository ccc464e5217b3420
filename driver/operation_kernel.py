"""One operation of a plan: its kernel prepared (with errors naming the operation), and the checks of
what a kernel returns.

`prepare_operation` asks the kernel registered for an operation (or a declared extension's) to
prepare; IF and WHILE have no kernel (the plan runs their subgraphs). `check_output` holds a
kernel's result to its operand's dtype and known dimensions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import driver.ops  # noqa: F401  (registers every kernel)
from driver.control_flow import CONTROL_FLOW, referenced_subgraphs
from driver.operands import arg_info
from driver.ops import kernel_for
from driver.ops._base import ArgInfo, Kernel, Prepare, Run, kernel_record
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.extensions import ExtensionSpec, OperationView, resolve, validate_operation
from mlts.hal.types import Model

# Deadline check between operations: called with the operation index; raises to abort.
Checkpoint = Callable[[int], None]


def op_name(code: int, model: Model | None = None) -> str:
    try:
        return OperationType(code).name
    except ValueError:
        pass
    if model is not None:
        try:
            found = resolve(model, code)
        except HalError:
            found = None
        if found is not None:
            return f"{found[0]}:{found[1]}"
    return f"operation type {code}"


def type_name(code: int) -> str:
    try:
        return OperandType(code).name
    except ValueError:
        return f"type {code}"


def no_kernel(args: Sequence[Any]) -> list[np.ndarray]:
    raise HalError(ErrorStatus.GENERAL_FAILURE, "control flow runs inside a plan, not as a kernel")


def operation_label(index: int, code: int, sub_index: int = -1, model: Model | None = None) -> str:
    """How errors name an operation: its index, its type and, outside main, its subgraph."""
    where = "" if sub_index < 0 else f" of referenced subgraph {sub_index}"
    return f"operation {index}{where} ({op_name(code, model)})"


def prepare_operation(
    model: Model, index: int, extensions: Sequence[ExtensionSpec] = (), sub_index: int = -1
) -> Kernel:
    """Ask the kernel for operation `index` of a subgraph (-1: main) to prepare; errors name the operation.
    The prepared kernel comes as a `Kernel` record (a plain run function made one).

    An extension operation is first validated by its declared rule (`extensions`, the driver's own);
    its kernel is `prepare(view, ins, outs)`. IF and WHILE have no kernel: the plan runs them
    (driver.control_flow); here they are checked by preparing every operation of the subgraphs
    they reference.
    """
    sub = model.subgraph(sub_index)
    op = sub.operations[index]
    label = operation_label(index, op.type, sub_index, model)
    if op.type in CONTROL_FLOW:
        for r in referenced_subgraphs(model, sub, op):
            for j in range(len(model.referenced[r].operations)):
                prepare_operation(model, j, extensions, r)
        return Kernel(no_kernel)
    prepare: Prepare | None
    if resolve(model, op.type) is not None:
        spec, declared = validate_operation(model, index, extensions)
        view = OperationView(model, op, f"operation {index} ({spec.name}:{declared.name})", spec)
        kernel = declared.kernel

        def prepare(i: Sequence[ArgInfo], o: Sequence[ArgInfo]) -> Run:
            return kernel(view, i, o)
    else:
        prepare = kernel_for(op.type)
    if prepare is None:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{label}: no kernel for this operation")
    ins = [arg_info(model, sub.operands[i]) for i in op.inputs]
    outs = [arg_info(model, sub.operands[i]) for i in op.outputs]
    try:
        return kernel_record(prepare(ins, outs))
    except HalError as e:
        raise HalError(e.status, f"{label}: {e.message}") from None
    except Exception as e:  # a kernel bug must not take the driver down
        raise HalError(
            ErrorStatus.GENERAL_FAILURE, f"{label}: prepare failed: {type(e).__name__}: {e}"
        ) from None


def describe_args(args: Sequence[Any]) -> str:
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(f"{a.dtype}{list(a.shape)}")
        else:
            parts.append(repr(a))
    return "(" + ", ".join(parts) + ")"


def check_output(step: Any, index: int, operand, want: np.dtype, arr: np.ndarray) -> np.ndarray:
    """The kernel's result must have the operand's dtype `want` and agree with its known dimensions."""
    if arr.dtype != want:
        raise HalError(
            ErrorStatus.GENERAL_FAILURE,
            f"operation {step.index} ({op_name(step.type)}): output operand {index} is {arr.dtype}, expected {want} ({type_name(operand.type)})",
        )
    dims = operand.dimensions
    if dims and (len(dims) != arr.ndim or any(d and d != a for d, a in zip(dims, arr.shape, strict=False))):
        raise HalError(
            ErrorStatus.GENERAL_FAILURE,
            f"operation {step.index} ({op_name(step.type)}): output operand {index} has shape {list(arr.shape)}, model declares {list(dims)}",
        )
    return arr


# ------------------------------------------------------------ errors of a running step (one wording everywhere)


def relabel(step: Any, e: HalError) -> HalError:
    """A kernel's HalError, prefixed with the operation it came from."""
    return HalError(e.status, f"{step.label}: {e.message}", e.output_shapes)


def kernel_failed(step: Any, args: Sequence[Any], e: Exception) -> HalError:
    """Any other exception of a kernel: GENERAL_FAILURE naming the operation and its inputs."""
    return HalError(
        ErrorStatus.GENERAL_FAILURE,
        f"{step.label} failed on inputs {describe_args(args)}: {type(e).__name__}: {e}",
    )


def output_count_error(step: Any, results: Sequence[Any]) -> HalError:
    """A kernel that returned a different number of results than the operation has outputs."""
    return HalError(
        ErrorStatus.GENERAL_FAILURE,
        f"{step.label}: kernel returned {len(results)} outputs, expected {len(step.outputs)}",
    )
