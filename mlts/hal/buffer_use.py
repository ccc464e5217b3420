"""Memory domains: the rules for driver-managed buffers shared by drivers and the service.

`validate_memory_desc` checks an allocation's roles (NNAPI's validateMemoryDesc);
`bind_buffers` checks each use of a buffer token in a request (role, dimensions,
one role per execution, initialised inputs) and fills in an input's dimensions
from the buffer when the request leaves them open.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from mlts.hal._validate_common import check_dims, is_int
from mlts.hal.enums import SCALAR_TYPES, ErrorStatus
from mlts.hal.errors import HalError, invalid
from mlts.hal.types import BufferDesc, BufferRole, DataLocation, Model, Operand, Request, RequestArgument

# (prepared model, is_input, io_index): one role a buffer may play.
RoleKey = tuple[Any, bool, int]


def combine_dims(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The dimensions both `a` and `b` allow (0 = unknown, () = unknown rank); None when they conflict."""
    if not a:
        return tuple(b)
    if not b:
        return tuple(a)
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b, strict=True):
        if x and y and x != y:
            return None
        out.append(x or y)
    return tuple(out)


@dataclass(frozen=True)
class MemoryDesc:
    """What a valid allocation request describes: the common operand, its dimensions and the roles."""

    operand: Operand
    dimensions: tuple[int, ...]
    roles: frozenset[tuple[int, bool, int]]  # (id of prepared model, is_input, io_index)


def validate_memory_desc(
    desc: Any,
    prepared_models: Sequence[Any],
    input_roles: Sequence[Any],
    output_roles: Sequence[Any],
    model_of: Callable[[Any], Model | None],
) -> MemoryDesc:
    """Check an allocation's roles; INVALID_ARGUMENT at the first broken rule.

    `model_of(prepared)` returns the model a prepared model of this driver was
    prepared from, or None when the object is not one (another driver's, released).
    """
    if not isinstance(desc, BufferDesc):
        raise invalid(f"allocate: desc must be a BufferDesc, got {type(desc).__name__}")
    dims = check_dims(desc.dimensions, "allocate: desc.dimensions")
    if not prepared_models:
        raise invalid("allocate: no prepared models given; roles must name at least one")
    if not input_roles and not output_roles:
        raise invalid("allocate: no input or output roles given; a buffer needs at least one role")
    models = []
    for n, prepared in enumerate(prepared_models):
        model = model_of(prepared)
        if model is None:
            raise invalid(
                f"allocate: prepared model {n} is not a live prepared model of this driver "
                "(released, or prepared by another driver)"
            )
        models.append(model)
    roles: set[tuple[int, bool, int]] = set()
    operands: list[Operand] = []
    for is_input, kind, role_list in ((True, "input", input_roles), (False, "output", output_roles)):
        for n, role in enumerate(role_list):
            where = f"allocate: {kind} role {n}"
            if not isinstance(role, BufferRole):
                raise invalid(f"{where} must be a BufferRole, got {type(role).__name__}")
            if not is_int(role.model_index) or not 0 <= role.model_index < len(models):
                raise invalid(f"{where}: model index {role.model_index!r} out of range [0, {len(models)})")
            main = models[role.model_index].main
            indexes = main.input_indexes if is_input else main.output_indexes
            if not is_int(role.io_index) or not 0 <= role.io_index < len(indexes):
                raise invalid(
                    f"{where}: {kind} index {role.io_index!r} out of range; model {role.model_index} "
                    f"has {len(indexes)} {kind}s"
                )
            freq = role.frequency
            if (
                isinstance(freq, bool)
                or not isinstance(freq, (int, float))
                or not (math.isfinite(freq) and 0.0 < freq <= 1.0)
            ):
                raise invalid(f"{where}: frequency {freq!r} must be in (0, 1]")
            key = (id(prepared_models[role.model_index]), is_input, role.io_index)
            if key in roles:
                raise invalid(
                    f"{where}: {kind} {role.io_index} of model {role.model_index} is named twice; "
                    "each role may appear once"
                )
            roles.add(key)
            operands.append(main.operands[indexes[role.io_index]])
    first = operands[0]
    for operand in operands:
        if operand.type != first.type:
            raise invalid(f"allocate: roles disagree on the operand type ({first.type} and {operand.type})")
        if operand.scale != first.scale or operand.zero_point != first.zero_point:
            raise invalid(
                f"allocate: roles disagree on quantisation (scale {first.scale} / zero point "
                f"{first.zero_point} and {operand.scale} / {operand.zero_point})"
            )
        if operand.extra_params != first.extra_params:
            raise invalid("allocate: roles disagree on the operand's extra parameters")
        combined = combine_dims(dims, operand.dimensions)
        if combined is None:
            raise invalid(
                f"allocate: dimensions {list(dims)} and a role's operand dimensions "
                f"{list(operand.dimensions)} are incompatible"
            )
        dims = combined
    if first.type in SCALAR_TYPES and dims:
        raise invalid(f"allocate: dimensions {list(dims)} given for a scalar operand type")
    return MemoryDesc(first, dims, frozenset(roles))


def bind_buffers(request: Request, prepared: Any, lookup: Callable[[int], Any]) -> Request:
    """Check each argument that names a buffer token; the request with inputs' open dimensions filled in.

    `lookup(token)` returns the Buffer or raises INVALID_ARGUMENT. A buffer must
    have the role it plays (INVALID_ARGUMENT), play one role per execution
    (INVALID_ARGUMENT), agree on dimensions (INVALID_ARGUMENT), and hold data
    when it is an input (GENERAL_FAILURE).
    """
    if not isinstance(request, Request) or not all(
        isinstance(part, (tuple, list)) for part in (request.pools, request.inputs, request.outputs)
    ):
        return request  # malformed: validate_request says how
    pools = request.pools
    used: dict[int, str] = {}
    new_inputs = list(request.inputs)
    for is_input, kind, args in ((True, "input", request.inputs), (False, "output", request.outputs)):
        for k, arg in enumerate(args):
            if (
                not isinstance(arg, RequestArgument)
                or not isinstance(arg.location, DataLocation)
                or arg.has_no_value is not False
                or not is_int(arg.location.pool_index)
                or not 0 <= arg.location.pool_index < len(pools)
            ):
                continue
            pool = pools[arg.location.pool_index]
            if not is_int(pool):
                continue
            token = int(pool)  # type: ignore[arg-type]
            where = f"request {kind} {k}"
            if token in used:
                raise invalid(
                    f"{where}: buffer token {token} is already {used[token]} of this execution; "
                    "a buffer plays one role per execution"
                )
            used[token] = f"{kind} {k}"
            buffer = lookup(token)
            if not buffer.has_role(prepared, is_input, k):
                raise invalid(f"{where}: buffer token {token} was not allocated for {kind} {k} of this model")
            current = buffer.dimensions
            combined = combine_dims(current, arg.dimensions)
            if combined is None:
                raise invalid(
                    f"{where}: dimensions {list(arg.dimensions)} disagree with buffer token {token}'s "
                    f"{list(current)}"
                )
            if is_input:
                if not buffer.initialized:
                    raise HalError(
                        ErrorStatus.GENERAL_FAILURE,
                        f"{where}: buffer token {token} is uninitialised (never copied into or written)",
                    )
                if combined != tuple(arg.dimensions):
                    new_inputs[k] = replace(arg, dimensions=combined)
    if not used:
        return request
    return replace(request, inputs=tuple(new_inputs))


def bound_state(pools: Sequence[Any], lookup: Callable[[int], Any]) -> tuple[Any, tuple]:
    """What binding a request on `pools` depends on, for a caller that reuses a bound request.

    Returns the pools with every buffer token replaced by None (compare them by identity) and, for
    the tokens, the buffer objects and their state (`buffer_state`: what `bind_buffers` reads of
    them). A request bound once binds to the same result while both are the same: a released and
    reallocated token is another buffer object; a buffer given new dimensions or initialised since
    compares unequal. Pools without tokens come back as they are, with ().
    `lookup(token)` returns the buffer (or raises, as `bind_buffers` would).
    """
    buffers = [lookup(pool) for pool in pools if type(pool) is int]
    if not buffers:
        return pools, ()
    return [None if type(pool) is int else pool for pool in pools], buffer_state(buffers)


def buffer_state(buffers: Iterable[Any]) -> tuple:
    """What of `buffers` a bound request depends on, comparable with ==: the buffer objects, and their
    stamps (`Buffer.stamp`) when every one has a stamp, else their dimensions (tuples, replaced when
    they change, as `Buffer.dimensions` is) and initialised flags."""
    held = tuple(buffers)
    stamps = tuple(map(_STAMP, held))
    if None not in stamps:
        return held, stamps
    return held, tuple(map(_DIMENSIONS, held)), tuple(map(_INITIALIZED, held))


_STAMP = attrgetter("stamp")
_DIMENSIONS = attrgetter("dimensions")
_INITIALIZED = attrgetter("initialized")
