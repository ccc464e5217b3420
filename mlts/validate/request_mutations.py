"""Invalid requests made from a valid one, one broken rule at a time (VTS ValidateRequest and more).

`valid_request(model)` lays every input and output of the main subgraph out
in one input pool and one output pool; `request_mutants` breaks it. As for
models, `judge` keeps the mutants the reference validator rejects and names
the rule that fired.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal, TypedDict, Unpack

from mlts.hal import validate
from mlts.hal.enums import ELEMENT_SIZE, OperandType
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import LOOP_TIMEOUT_MAXIMUM_NS, DataLocation, Model, Request, RequestArgument
from mlts.validate.mutations import mutation_site

_ALIGN = 8
#: The two argument lists of a Request.
Role = Literal["inputs", "outputs"]
ROLES: tuple[Role, ...] = ("inputs", "outputs")


@dataclass(frozen=True)
class RequestMutant:
    """One invalid request (or invalid execution argument) for a valid model."""

    family: str
    detail: str
    request: Request
    loop_timeout: int | None = None
    rule: str = ""
    message: str = ""


def _size(model: Model, index: int) -> int:
    operand = model.main.operands[index]
    return ELEMENT_SIZE[OperandType(operand.type)] * math.prod(operand.dimensions)


def valid_request(model: Model, fill: Iterable[bytes] | None = None) -> Request:
    """A request for every input and output of `model` (fully specified shapes), inputs zero or `fill`."""
    sub = model.main
    datas = list(fill) if fill is not None else None

    def lay_out(indexes: tuple[int, ...], pool: int) -> tuple[list[RequestArgument], int]:
        args, offset = [], 0
        for i in indexes:
            length = _size(model, i)
            args.append(RequestArgument(False, DataLocation(pool, offset, length)))
            offset += -(-length // _ALIGN) * _ALIGN
        return args, offset

    inputs, in_size = lay_out(sub.input_indexes, 0)
    outputs, out_size = lay_out(sub.output_indexes, 1)
    # Shared memory: every execution path takes it (fenced executions and bursts take nothing else).
    in_pool = SharedMemory.create(max(in_size, 1), "mlts-validate-in")
    if datas is not None:
        for arg, data in zip(inputs, datas, strict=True):
            start = arg.location.offset
            in_pool.buffer[start : start + arg.location.length] = data
    out_pool = SharedMemory.create(max(out_size, 1), "mlts-validate-out")
    return Request(tuple(inputs), tuple(outputs), (in_pool, out_pool))


def rule_of_request(
    request: Request, model: Model, loop_timeout: int | None = None
) -> tuple[str, str] | None:
    """(rule site, message) of the first rule the request (or its loop timeout) breaks, or None."""
    try:
        validate.validate_request(request, model)
        validate.validate_loop_timeout(loop_timeout)
    except HalError as e:
        return mutation_site(e), e.message
    return None


def judge_requests(mutants: Iterable[RequestMutant], model: Model) -> Iterator[RequestMutant]:
    for m in mutants:
        found = rule_of_request(m.request, model, m.loop_timeout)
        if found is not None:
            yield replace(m, rule=found[0], message=found[1])


class ArgumentChanges(TypedDict, total=False):
    """Fields of a RequestArgument that `_arg` may replace."""

    has_no_value: bool
    location: DataLocation
    dimensions: tuple[int, ...]


def _args(request: Request, role: Role) -> tuple[RequestArgument, ...]:
    return request.inputs if role == "inputs" else request.outputs


def _with_args(request: Request, role: Role, args: tuple[RequestArgument, ...]) -> Request:
    return replace(request, inputs=args) if role == "inputs" else replace(request, outputs=args)


def _arg(request: Request, role: Role, pos: int, **changes: Unpack[ArgumentChanges]) -> Request:
    args = list(_args(request, role))
    args[pos] = replace(args[pos], **changes)
    return _with_args(request, role, tuple(args))


def request_mutants(model: Model, request: Request) -> Iterator[RequestMutant]:
    """Argument counts, pool indexes, locations, dimensions, omitted values, tokens and loop timeouts."""
    sub = model.main
    for role in ROLES:
        args = _args(request, role)
        if args:
            yield RequestMutant(
                f"request {role}",
                f"last of {len(args)} {role} removed",
                _with_args(request, role, args[:-1]),
            )
            yield RequestMutant(
                f"request {role}", f"an extra {role[:-1]}", _with_args(request, role, (*args, args[0]))
            )
    for role in ROLES:
        indexes = sub.input_indexes if role == "inputs" else sub.output_indexes
        args = _args(request, role)
        for pos, arg in enumerate(args[:2]):
            operand = sub.operands[indexes[pos]]
            what = f"{role[:-1]} {pos}"
            loc = arg.location
            pool_size = request.pools[loc.pool_index].size  # type: ignore[union-attr]
            yield RequestMutant(
                "request pool index",
                f"{what}: pool_index {len(request.pools)}",
                _arg(request, role, pos, location=replace(loc, pool_index=len(request.pools))),
            )
            yield RequestMutant(
                "request location",
                f"{what}: offset past the end of its pool",
                _arg(request, role, pos, location=replace(loc, offset=pool_size)),
            )
            yield RequestMutant(
                "request location",
                f"{what}: length one byte short",
                _arg(request, role, pos, location=replace(loc, length=max(loc.length - 1, 0))),
            )
            yield RequestMutant(
                "request location",
                f"{what}: length 2**32-1",
                _arg(request, role, pos, location=replace(loc, length=2**32 - 1)),
            )
            yield RequestMutant(
                "request omitted value",
                f"{what}: has_no_value with a location",
                _arg(request, role, pos, has_no_value=True),
            )
            dims = operand.dimensions
            if operand.is_scalar_type:
                yield RequestMutant(
                    "request dimensions",
                    f"{what}: dimensions [1] for a scalar",
                    _arg(request, role, pos, dimensions=(1,)),
                )
            elif dims:
                yield RequestMutant(
                    "request dimensions",
                    f"{what}: one more dimension",
                    _arg(request, role, pos, dimensions=(1, *dims)),
                )
                yield RequestMutant(
                    "request dimensions",
                    f"{what}: dimension 0 is {dims[0] + 1}, the model fixes {dims[0]}",
                    _arg(request, role, pos, dimensions=(dims[0] + 1, *dims[1:])),
                )
    yield RequestMutant(
        "request buffer token",
        "pool 0 is buffer token 4294967295, which the client never allocated",
        replace(request, pools=(2**32 - 1, *request.pools[1:])),
    )
    yield RequestMutant(
        "loop timeout",
        f"loop timeout {LOOP_TIMEOUT_MAXIMUM_NS + 1} ns (above 15 s)",
        request,
        loop_timeout=LOOP_TIMEOUT_MAXIMUM_NS + 1,
    )
