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

Expensive derived constants (transposed or centred weights, stacked gate
matrices) go through `packed(name, compute)`: the executor's Plan records them
per operation so that the compilation cache can store them, and a Plan built
from the cache hands the stored arrays back instead of computing them again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.hal.enums import ErrorStatus, OperandType, OperationType, name_of_code
from mlts.hal.errors import HalError, invalid
from mlts.hal.types import SymmPerChannelQuantParams

Run = Callable[[Sequence[Any]], list[np.ndarray]]
Prepare = Callable[[Sequence["ArgInfo"], Sequence["ArgInfo"]], Run]
# bind(shapes, pointers, scratch) -> driver.ops._bind.BoundStep or None (see `Binding`).
Bind = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Binding:
    """How a kernel puts its compiled call into a chunk of bound calls (driver.bound_steps).

    `bind(shapes, pointers, scratch)` gets the shapes and data addresses of the inputs at positions
    `inputs` (the ones read at run time; by default the first) and returns the bound call, or None
    when it cannot bind for those shapes (the step then runs through its kernel).
    """

    bind: Bind
    inputs: tuple[int, ...] = (0,)


@dataclass(frozen=True, slots=True)
class Kernel:
    """A prepared operation, as a record: what the plan calls and what it may do instead.

    `run(args)` computes the results from the arguments (None for an input a request left without a
    value). `direct`, when given, is the same computation for a caller that knows every input has
    a value (without the wrapper that handles missing ones). `binding`, when given, lets the plan
    run the step inside a chunk of compiled calls; it applies to `direct` (or `run`). A kernel
    that needs neither is a plain `Run` function; `kernel_record` makes a record of either. A record
    is called like its `run`.
    """

    run: Run
    direct: Run | None = None
    binding: Binding | None = None

    def __call__(self, args: Sequence[Any]) -> list[np.ndarray]:
        return self.run(args)

    @property
    def fast(self) -> Run:
        """`direct`, or `run` when the kernel has no separate form for complete inputs."""
        return self.run if self.direct is None else self.direct


def kernel_record(prepared: Run | Kernel) -> Kernel:
    """What a prepare function returned, as a `Kernel` record."""
    if isinstance(prepared, Kernel):
        return prepared
    return Kernel(prepared)


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
        raise invalid(f"{name}: {what} has type {name_of_code(OperandType, arg.type)}, expected {allowed}")


def const_scalar(name: str, what: str, arg: ArgInfo) -> Any:
    """A parameter that this driver needs at prepare time."""
    if arg.value is None:
        raise invalid(f"{name}: {what} must be a constant")
    v = arg.value
    return v.item() if isinstance(v, np.ndarray) else v


# ------------------------------------------------------------ packed constants

#: (operation index, name) -> array: the packed constants of one plan.
PackedArrays = dict[tuple[int, str], np.ndarray]
#: dtype kinds a packed array may have: bool, signed and unsigned integers, floats (never objects).
PACKED_KINDS = "biuf"


@dataclass(slots=True)
class _StepStore:
    """Where `packed` records (and, for a plan built from a cache, finds) one operation's arrays."""

    step: int
    record: PackedArrays
    cached: Mapping[tuple[int, str], np.ndarray] | None


_STORE: ContextVar[_StepStore | None] = ContextVar("driver_packed_store", default=None)


@contextmanager
def packing_step(
    step: int, record: PackedArrays, cached: Mapping[tuple[int, str], np.ndarray] | None = None
) -> Iterator[None]:
    """While operation `step` prepares: `packed` records into `record`, or serves from `cached` when given."""
    token = _STORE.set(_StepStore(step, record, cached))
    try:
        yield
    finally:
        _STORE.reset(token)


def packed(
    name: str,
    compute: Callable[[], np.ndarray],
    *,
    shape: tuple[int, ...] | None = None,
    dtypes: tuple[type, ...] = (),
) -> np.ndarray:
    """`compute()`, a derived constant this operation keeps; from the compilation cache when the plan has one.

    Outside a plan (getSupportedOperations) this is `compute()`. A fresh result must be a C-contiguous
    numeric array (what the cache can store and give back bit for bit). A cached array is checked
    against `shape` and `dtypes` when the kernel states them.
    """
    store = _STORE.get()
    if store is None or store.cached is None:
        value = _fresh(name, compute)
    else:
        value = _from_cache(store.cached, (store.step, name), shape, dtypes)
    if store is not None:
        if (store.step, name) in store.record:
            raise RuntimeError(f"packed array {name!r} is asked for twice by one operation")
        store.record[(store.step, name)] = value
    return value


def _fresh(name: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    value = compute()
    if (
        not isinstance(value, np.ndarray)
        or value.dtype.kind not in PACKED_KINDS
        or not value.flags.c_contiguous
    ):
        raise TypeError(
            f"packed array {name!r} must be a C-contiguous numeric ndarray, got {_describe(value)}"
        )
    return value


def _from_cache(
    cached: Mapping[tuple[int, str], np.ndarray],
    key: tuple[int, str],
    shape: tuple[int, ...] | None,
    dtypes: tuple[type, ...],
) -> np.ndarray:
    value = cached.get(key)
    if value is None:
        raise HalError(ErrorStatus.GENERAL_FAILURE, f"the compilation cache holds no packed array {key[1]!r}")
    _check_cached(key[1], value, shape, dtypes)
    return value


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        order = "C-contiguous" if value.flags.c_contiguous else "not C-contiguous"
        return f"{value.dtype}{list(value.shape)} ({order})"
    return type(value).__name__


def _check_cached(
    name: str, value: np.ndarray, shape: tuple[int, ...] | None, dtypes: tuple[type, ...]
) -> None:
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise HalError(
            ErrorStatus.GENERAL_FAILURE,
            f"cached packed array {name!r} has shape {list(value.shape)}, expected {list(shape)}",
        )
    if dtypes and value.dtype not in [np.dtype(d) for d in dtypes]:
        allowed = ", ".join(np.dtype(d).name for d in dtypes)
        raise HalError(
            ErrorStatus.GENERAL_FAILURE,
            f"cached packed array {name!r} has dtype {value.dtype}, expected {allowed}",
        )
