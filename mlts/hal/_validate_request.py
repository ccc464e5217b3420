"""Validation of a Request against the main subgraph of an already valid model."""

from __future__ import annotations

from typing import Any

from mlts.hal._validate_common import (
    ELEMENT_BYTES,
    UINT32_MAX,
    check_dims,
    check_location_fields,
    is_int,
    known_product,
    type_label,
)
from mlts.hal.enums import SCALAR_TYPES
from mlts.hal.errors import invalid
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.types import DataLocation, Model, Operand, Request, RequestArgument


def check_request(request: Request, model: Model, allow_unspecified_output: bool) -> None:
    """Raise INVALID_ARGUMENT at the first rule `request` breaks for `model`."""
    if not isinstance(request, Request):
        raise invalid(f"request must be a Request record, got {type(request).__name__}")
    pool_sizes = _pool_sizes(request.pools)
    main = model.main
    for role, args, indexes in (
        ("input", request.inputs, main.input_indexes),
        ("output", request.outputs, main.output_indexes),
    ):
        if not isinstance(args, (tuple, list)):
            raise invalid(f"request {role}s must be a tuple of RequestArgument, got {type(args).__name__}")
        if len(args) != len(indexes):
            raise invalid(f"request has {len(args)} {role}s; the main subgraph has {len(indexes)}")
        for pos, (arg, index) in enumerate(zip(args, indexes, strict=True)):
            operand = main.operands[index]
            where = f"request {role} {pos} (operand {index} of main subgraph, {type_label(operand.type)})"
            _check_argument(arg, operand, pool_sizes, role == "input", allow_unspecified_output, where)


def _pool_sizes(pools: Any) -> tuple[int | None, ...]:
    """Byte size of each memory pool; None for a driver buffer token."""
    if not isinstance(pools, (tuple, list)):
        raise invalid(f"request pools must be a tuple, got {type(pools).__name__}")
    sizes: list[int | None] = []
    for i, pool in enumerate(pools):
        if isinstance(pool, (HostMemory, SharedMemory)):
            sizes.append(pool.size)
        elif is_int(pool):
            if not 0 < pool <= UINT32_MAX:
                raise invalid(
                    f"request pool {i} is buffer token {pool}; valid tokens are in [1, {UINT32_MAX}]"
                )
            sizes.append(None)
        else:
            raise invalid(
                f"request pool {i} is {type(pool).__name__}; pools are HostMemory, SharedMemory "
                "or an int buffer token > 0"
            )
    return tuple(sizes)


def _check_argument(
    arg: Any,
    operand: Operand,
    pool_sizes: tuple[int | None, ...],
    is_input: bool,
    allow_unspecified_output: bool,
    where: str,
) -> None:
    if not isinstance(arg, RequestArgument):
        raise invalid(f"{where}: expected a RequestArgument, got {type(arg).__name__}")
    if not isinstance(arg.has_no_value, bool):
        raise invalid(f"{where}: has_no_value must be a bool, got {arg.has_no_value!r}")
    if not isinstance(arg.location, DataLocation):
        raise invalid(f"{where}: location must be a DataLocation, got {type(arg.location).__name__}")
    pool, offset, length = check_location_fields(arg.location, where)
    dims = check_dims(arg.dimensions, where)
    if arg.has_no_value:
        # An omitted argument: the executor treats it as NO_VALUE.
        if pool or offset or length or dims:
            raise invalid(
                f"{where}: has_no_value with location ({pool}, {offset}, {length}) and dimensions "
                f"{list(dims)}; an omitted argument needs an all-zero location and no dimensions"
            )
        return
    if pool >= len(pool_sizes):
        raise invalid(
            f"{where}: location.pool_index {pool} out of range (request has {len(pool_sizes)} pools)"
        )
    size = pool_sizes[pool]
    if size is None:
        if offset or length:
            raise invalid(
                f"{where}: pool {pool} is a driver buffer; location offset {offset} and length {length} must be 0"
            )
    elif offset + length > size:
        raise invalid(
            f"{where}: location offset {offset} + length {length} exceeds pool {pool} ({size} bytes)"
        )
    resolved = _resolve_dims(operand, dims, where)
    is_scalar = operand.type in SCALAR_TYPES
    fully_specified = is_scalar or (bool(resolved) and 0 not in resolved)
    if is_input and not fully_specified:
        raise invalid(
            f"{where}: input dimensions {list(resolved)} are not fully specified "
            "(known rank, no 0); give them in the request"
        )
    if not is_input and not allow_unspecified_output and not fully_specified:
        raise invalid(
            f"{where}: output dimensions {list(resolved)} are not fully specified "
            "and this execution does not allow unspecified outputs"
        )
    element = ELEMENT_BYTES.get(operand.type)
    if is_input and size is not None and element is not None:
        expected = element * known_product(resolved)
        if length != expected:
            raise invalid(
                f"{where}: location.length {length} != {expected} bytes (type size x dims {list(resolved)})"
            )


def _resolve_dims(operand: Operand, dims: tuple[int, ...], where: str) -> tuple[int, ...]:
    """The argument's dimensions merged with the operand's; invalid if they disagree."""
    model_dims = operand.dimensions
    if not dims:
        return model_dims
    if operand.type in SCALAR_TYPES:
        raise invalid(f"{where}: dimensions {list(dims)} given for a scalar; scalars take no dimensions")
    if model_dims:
        if len(dims) != len(model_dims):
            raise invalid(
                f"{where}: rank {len(dims)} (dimensions {list(dims)}) != model rank {len(model_dims)} "
                f"(dimensions {list(model_dims)})"
            )
        for axis, (d, m) in enumerate(zip(dims, model_dims, strict=True)):
            if m and d != m:
                raise invalid(
                    f"{where}: dimension {axis} is {d}, the model fixes it to {m} "
                    f"(model dimensions {list(model_dims)}, 0 = any)"
                )
    return dims
