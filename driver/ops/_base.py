"""The kernel contract shared by every operation module.

A kernel module registers one `prepare` function per NNAPI operation code:

    @register(OperationType.ADD)
    def prepare(ins: Sequence[ArgInfo], outs: Sequence[ArgInfo]) -> Run: ...

`prepare` runs once, when the model is prepared. It checks the operation's
signature (input/output counts, operand types, ranks, parameter values),
pre-packs constant weights, and returns `run(args) -> list[np.ndarray]`.
`args` holds the current value of every input, in order: a NumPy array for
tensors (already of the operand's dtype and shape), a Python int/float/bool
for scalars, and None for omitted optional inputs. `run` returns one array
per output, of the output operand's dtype.

A signature or parameter the kernel cannot honour raises `HalError`
(INVALID_ARGUMENT for a malformed operation); the executor turns that into
"unsupported" for getSupportedOperations and into a prepare failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.hal.enums import OperandType, OperationType
from mlts.hal.errors import invalid
from mlts.hal.types import SymmPerChannelQuantParams

Run = Callable[[Sequence[Any]], list[np.ndarray]]
Prepare = Callable[[Sequence["ArgInfo"], Sequence["ArgInfo"]], Run]


@dataclass(frozen=True, slots=True)
class ArgInfo:
    """What a kernel may know about one operand at prepare time."""

    type: int
    shape: tuple[int, ...]  # 0 marks an unknown dimension; () for scalars
    scale: float = 0.0
    zero_point: int = 0
    channel_quant: SymmPerChannelQuantParams | None = None
    value: Any = None  # constant value (ndarray or Python scalar), else None
    omitted: bool = False  # NO_VALUE: an optional input left out

    @property
    def is_constant(self) -> bool:
        return self.value is not None


_REGISTRY: dict[int, Prepare] = {}


def register(code: OperationType) -> Callable[[Prepare], Prepare]:
    """Register `prepare` as the kernel for operation `code` (one per code)."""

    def deco(fn: Prepare) -> Prepare:
        if int(code) in _REGISTRY:
            raise RuntimeError(f"two kernels registered for {code.name}")
        _REGISTRY[int(code)] = fn
        return fn

    return deco


def kernel_for(code: int) -> Prepare | None:
    return _REGISTRY.get(code)


def registered_operations() -> list[OperationType]:
    return sorted(OperationType(c) for c in _REGISTRY)


# ------------------------------------------------------------ signature helpers


def expect_count(
    name: str, ins: Sequence[ArgInfo], allowed: Sequence[int], outs: Sequence[ArgInfo], n_out: int = 1
) -> None:
    if len(ins) not in allowed:
        raise invalid(f"{name}: expected {' or '.join(map(str, allowed))} inputs, got {len(ins)}")
    if len(outs) != n_out:
        raise invalid(f"{name}: expected {n_out} outputs, got {len(outs)}")


def expect_type(name: str, what: str, arg: ArgInfo, *types: OperandType) -> None:
    if arg.type not in types:
        allowed = ", ".join(t.name for t in types)
        raise invalid(
            f"{name}: {what} has type {OperandType(arg.type).name if arg.type in OperandType._value2member_map_ else arg.type}, expected {allowed}"
        )


def const_scalar(name: str, what: str, arg: ArgInfo) -> Any:
    """A parameter that this driver needs at prepare time."""
    if arg.value is None:
        raise invalid(f"{name}: {what} must be a constant")
    v = arg.value
    return v.item() if isinstance(v, np.ndarray) else v
