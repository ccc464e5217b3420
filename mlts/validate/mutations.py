"""Invalid models made from valid ones, one broken HAL rule at a time (the mutation families of AOSP's VTS).

Every generator takes a valid model and yields `Mutant`s. A mutant counts only
if the reference validator (mlts.hal.validate, NNAPI's ValidateHal rules)
rejects it — `judge` keeps those and names the rule that fired (the source
line of the check that raised, e.g. `_validate_operand.py:141`), so a run can
say which rules it covered. Mutants that happen to stay valid are dropped;
mutants the wire cannot carry (a lifetime outside the enum) are never made.
"""

from __future__ import annotations

import os
import struct
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TypedDict, Unpack

from mlts.hal import validate
from mlts.hal.enums import OperandLifeTime, OperandType, OperationType, name_of_code
from mlts.hal.errors import HalError
from mlts.hal.types import (
    DataLocation,
    ExtensionNameAndPrefix,
    ExtraParams,
    Model,
    Operand,
    Operation,
    SymmPerChannelQuantParams,
)

T = OperandType
L = OperandLifeTime
#: An operation code that is neither an OperationType nor an extension operation (prefix 0).
BAD_OPERATION_CODE = 1000
#: An operand type code that is neither an OperandType nor an extension type.
BAD_OPERAND_CODE = 1000
#: Types an operand may be swapped for without changing its byte size (so constants stay well formed).
SAME_SIZE: tuple[tuple[int, ...], ...] = (
    (T.TENSOR_FLOAT32, T.TENSOR_INT32),
    (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_BOOL8, T.TENSOR_QUANT8_SYMM),
    (T.TENSOR_FLOAT16, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM),
    (T.FLOAT32, T.INT32, T.UINT32),
    (T.BOOL,),
    (T.FLOAT16,),
)
_QUANT = {
    T.TENSOR_QUANT8_ASYMM: (0.5, 128),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (0.5, 0),
    T.TENSOR_QUANT8_SYMM: (0.5, 0),
    T.TENSOR_QUANT16_SYMM: (0.125, 0),
    T.TENSOR_QUANT16_ASYMM: (0.125, 0),
}
#: Scalar parameter values tried in turn; each that the reference rejects is a case.
PARAMETER_VALUES: dict[int, tuple[float | int, ...]] = {
    T.INT32: (-1, 0, 2**31 - 1, -(2**31), 7),
    T.UINT32: (0, 2**32 - 1),
    T.FLOAT32: (-1.0, 0.0, 3.0e38),
    T.BOOL: (2,),
}
_PACK = {T.INT32: "<i", T.UINT32: "<I", T.FLOAT32: "<f", T.BOOL: "<B"}


@dataclass(frozen=True)
class Mutant:
    """One invalid model: which family of mutation, what was changed, and (once judged) the rule it breaks."""

    family: str
    detail: str
    model: Model
    rule: str = ""  # "file.py:line" of the reference check that rejects it
    message: str = ""  # the reference validator's message


def rule_of(model: Model) -> tuple[str, str] | None:
    """(rule site, message) of the first HAL rule `model` breaks, or None when it is valid."""
    try:
        validate.validate_model(model)
    except HalError as e:
        return mutation_site(e), e.message
    return None


def mutation_site(error: BaseException) -> str:
    """'file.py:line' of the deepest frame under mlts/hal that raised `error`."""
    site = "unknown"
    for frame, line in traceback.walk_tb(error.__traceback__):
        path = frame.f_code.co_filename
        if f"{os.sep}mlts{os.sep}hal{os.sep}" in path and not path.endswith("errors.py"):
            site = f"{os.path.basename(path)}:{line}"
    return site


def judge(mutants: Iterable[Mutant]) -> Iterator[Mutant]:
    """The mutants the reference rejects, each with the rule it breaks; valid ones are dropped."""
    for m in mutants:
        found = rule_of(m.model)
        if found is not None:
            yield replace(m, rule=found[0], message=found[1])


# ------------------------------------------------------------------ record editing


class SubgraphChanges(TypedDict, total=False):
    """Fields of a Subgraph that `with_main` may replace."""

    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


class OperandChanges(TypedDict, total=False):
    """Fields of an Operand that `set_operand` may replace."""

    type: int
    dimensions: tuple[int, ...]
    number_of_consumers: int
    scale: float
    zero_point: int
    lifetime: OperandLifeTime
    location: DataLocation
    extra_params: ExtraParams


class OperationChanges(TypedDict, total=False):
    """Fields of an Operation that `set_operation` may replace."""

    type: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def with_main(model: Model, **changes: Unpack[SubgraphChanges]) -> Model:
    return replace(model, main=replace(model.main, **changes))


def put_operand(model: Model, index: int, operand: Operand) -> Model:
    """`model` with main operand `index` replaced by `operand`."""
    operands = list(model.main.operands)
    operands[index] = operand
    return with_main(model, operands=tuple(operands))


def set_operand(model: Model, index: int, **changes: Unpack[OperandChanges]) -> Model:
    return put_operand(model, index, replace(model.main.operands[index], **changes))


def set_operation(model: Model, k: int, **changes: Unpack[OperationChanges]) -> Model:
    ops = list(model.main.operations)
    ops[k] = replace(ops[k], **changes)
    return with_main(model, operations=tuple(ops))


def recount_consumers(model: Model) -> Model:
    """number_of_consumers made true again after operations changed their inputs."""
    sub = model.main
    counts = [0] * len(sub.operands)
    for op in sub.operations:
        for i in op.inputs:
            if 0 <= i < len(counts):
                counts[i] += 1
    operands = tuple(replace(o, number_of_consumers=c) for o, c in zip(sub.operands, counts, strict=True))
    return with_main(model, operands=operands)


def add_operand(model: Model, operand: Operand) -> tuple[Model, int]:
    operands = (*model.main.operands, operand)
    return with_main(model, operands=operands), len(operands) - 1


def retyped(operand: Operand, new_type: int) -> Operand:
    """`operand` as type `new_type` with the scale and zero point that type takes."""
    scale, zp = _QUANT.get(T(new_type), (0.0, 0))
    return replace(operand, type=new_type, scale=scale, zero_point=zp, extra_params=None)


def same_size_types(code: int) -> tuple[int, ...]:
    """The other types of `code`'s byte size and kind (tensor or scalar)."""
    for group in SAME_SIZE:
        if code in group:
            return tuple(t for t in group if t != code)
    return ()


def write_scalar(model: Model, index: int, value: float | int) -> Model | None:
    """The model with constant scalar operand `index` holding `value`, or None when it is not one."""
    operand = model.main.operands[index]
    fmt = _PACK.get(operand.type)  # type: ignore[call-overload]
    if fmt is None or operand.lifetime != L.CONSTANT_COPY or operand.location.length != struct.calcsize(fmt):
        return None
    try:
        data = struct.pack(fmt, value)
    except (struct.error, OverflowError):
        return None
    values = bytearray(model.operand_values)
    start = operand.location.offset
    values[start : start + len(data)] = data
    return replace(model, operand_values=bytes(values))


def _op_name(code: int) -> str:
    return name_of_code(OperationType, code)


def type_name(code: int) -> str:
    """The OperandType name of `code`, else the code as digits."""
    return name_of_code(T, code)


# ------------------------------------------------------------------ operand mutations (VTS mutateOperand*)


def operand_mutants(model: Model, indexes: Iterable[int] | None = None) -> Iterator[Mutant]:
    """Type, rank, scale, zero point, lifetime, consumers, location and extra parameters of each operand."""
    sub = model.main
    for i in range(len(sub.operands)) if indexes is None else indexes:
        o = sub.operands[i]
        what = f"operand {i} ({type_name(o.type)}, {o.lifetime.name})"
        yield Mutant(
            "operand type", f"{what}: type {BAD_OPERAND_CODE}", set_operand(model, i, type=BAD_OPERAND_CODE)
        )
        yield Mutant(
            "operand type",
            f"{what}: undeclared extension type",
            set_operand(model, i, type=(7 << 16) | 1, scale=0.0, zero_point=0, extra_params=None),
        )
        if o.is_scalar_type:
            yield Mutant(
                "operand rank", f"{what}: scalar with dimensions [1]", set_operand(model, i, dimensions=(1,))
            )
        elif o.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            yield Mutant(
                "operand rank",
                f"{what}: constant with an unknown dimension",
                set_operand(model, i, dimensions=(0, *o.dimensions[1:]) if o.dimensions else (0,)),
            )
        for scale in (-1.0, 0.0, 1.0):
            if scale != o.scale:
                yield Mutant("operand scale", f"{what}: scale {scale}", set_operand(model, i, scale=scale))
        for zp in (-1, 1, 256, 128, -129, 65536):
            if zp != o.zero_point:
                yield Mutant(
                    "operand zero point", f"{what}: zero point {zp}", set_operand(model, i, zero_point=zp)
                )
        yield Mutant(
            "operand consumers",
            f"{what}: number_of_consumers {o.number_of_consumers + 1}",
            set_operand(model, i, number_of_consumers=o.number_of_consumers + 1),
        )
        yield from _lifetime_mutants(model, i, what)
        yield from _location_mutants(model, i, what)
        yield from _extra_params_mutants(model, i, what)


def _lifetime_mutants(model: Model, i: int, what: str) -> Iterator[Mutant]:
    o = model.main.operands[i]
    for lifetime in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.CONSTANT_COPY, L.NO_VALUE):
        if lifetime == o.lifetime:
            continue
        location = o.location
        if lifetime in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.NO_VALUE):
            location = DataLocation()
        yield Mutant(
            "operand lifetime",
            f"{what}: lifetime {lifetime.name}",
            set_operand(model, i, lifetime=lifetime, location=location),
        )


def _location_mutants(model: Model, i: int, what: str) -> Iterator[Mutant]:
    o = model.main.operands[i]
    loc = o.location
    if o.lifetime == L.CONSTANT_COPY:
        end = len(model.operand_values)
        yield Mutant(
            "operand location",
            f"{what}: offset past operand_values",
            set_operand(model, i, location=replace(loc, offset=end)),
        )
        yield Mutant(
            "operand location",
            f"{what}: pool_index 1",
            set_operand(model, i, location=replace(loc, pool_index=1)),
        )
        if loc.length:
            yield Mutant(
                "operand location",
                f"{what}: length one byte short",
                set_operand(model, i, location=replace(loc, length=loc.length - 1)),
            )
    elif o.lifetime == L.CONSTANT_REFERENCE:
        yield Mutant(
            "operand location",
            f"{what}: pool_index {len(model.pools)}",
            set_operand(model, i, location=replace(loc, pool_index=len(model.pools))),
        )
        yield Mutant(
            "operand location",
            f"{what}: offset past its pool",
            set_operand(model, i, location=replace(loc, offset=model.pools[loc.pool_index].size)),
        )
    else:
        yield Mutant(
            "operand location",
            f"{what}: location (0, 4, 4) for a lifetime without data",
            set_operand(model, i, location=DataLocation(0, 4, 4)),
        )


def _extra_params_mutants(model: Model, i: int, what: str) -> Iterator[Mutant]:
    o = model.main.operands[i]
    if o.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and isinstance(o.extra_params, SymmPerChannelQuantParams):
        p = o.extra_params
        yield Mutant(
            "operand extra params",
            f"{what}: no channel quantisation",
            set_operand(model, i, extra_params=None),
        )
        yield Mutant(
            "operand extra params",
            f"{what}: one channel scale too many",
            set_operand(model, i, extra_params=replace(p, scales=(*p.scales, 1.0))),
        )
        yield Mutant(
            "operand extra params",
            f"{what}: channel scale 0",
            set_operand(model, i, extra_params=replace(p, scales=(0.0, *p.scales[1:]))),
        )
        yield Mutant(
            "operand extra params",
            f"{what}: channel_dim {len(o.dimensions)}",
            set_operand(model, i, extra_params=replace(p, channel_dim=len(o.dimensions))),
        )
    else:
        yield Mutant(
            "operand extra params",
            f"{what}: channel quantisation on a {type_name(o.type)}",
            set_operand(model, i, extra_params=SymmPerChannelQuantParams((1.0,), 0)),
        )


# ------------------------------------------------------------------ graph mutations (VTS mutateOperation*, remove*)


def graph_mutants(model: Model) -> Iterator[Mutant]:
    """Operation codes, operand indexes, writers, removed pieces and subgraph I/O lists."""
    sub = model.main
    n = len(sub.operands)
    for k, op in enumerate(sub.operations):
        what = f"operation {k} ({_op_name(op.type)})"
        yield Mutant(
            "operation type",
            f"{what}: type {BAD_OPERATION_CODE}",
            set_operation(model, k, type=BAD_OPERATION_CODE),
        )
        yield Mutant(
            "operation type",
            f"{what}: undeclared extension operation",
            set_operation(model, k, type=(7 << 16) | 1),
        )
        if op.inputs:
            yield Mutant(
                "operation input index",
                f"{what}: input 0 is operand {n}",
                set_operation(model, k, inputs=(n, *op.inputs[1:])),
            )
        yield Mutant(
            "operation output index",
            f"{what}: output 0 is operand {n}",
            set_operation(model, k, outputs=(n, *op.outputs[1:])),
        )
        if op.outputs and op.inputs:
            yield Mutant(
                "operation reads its own output",
                f"{what}: input 0 is its output 0",
                recount_consumers(set_operation(model, k, inputs=(op.outputs[0], *op.inputs[1:]))),
            )
        for j in sub.input_indexes[:1]:
            yield Mutant(
                "operation writes a subgraph input",
                f"{what}: also writes model input operand {j}",
                set_operation(model, k, outputs=(*op.outputs, j)),
            )
        removed = sub.operations[:k] + sub.operations[k + 1 :]
        yield Mutant(
            "operation removed", f"{what} removed", recount_consumers(with_main(model, operations=removed))
        )
    yield Mutant(
        "subgraph inputs", "input index out of range", with_main(model, input_indexes=(*sub.input_indexes, n))
    )
    if sub.input_indexes:
        yield Mutant(
            "subgraph inputs",
            "an input listed twice",
            with_main(model, input_indexes=(*sub.input_indexes, sub.input_indexes[0])),
        )
        yield Mutant(
            "subgraph inputs",
            "input 0 dropped from the list",
            with_main(model, input_indexes=sub.input_indexes[1:]),
        )
    yield Mutant("subgraph outputs", "no outputs", with_main(model, output_indexes=()))
    yield Mutant(
        "subgraph outputs",
        "output index out of range",
        with_main(model, output_indexes=(*sub.output_indexes, n)),
    )
    yield Mutant(
        "subgraph outputs",
        "an output listed twice",
        with_main(model, output_indexes=(*sub.output_indexes, sub.output_indexes[0])),
    )
    yield Mutant("subgraph operations", "no operations", recount_consumers(with_main(model, operations=())))
    yield Mutant(
        "referenced subgraphs", "a referenced subgraph nobody uses", replace(model, referenced=(sub,))
    )
    yield from extension_mutants(model)


def extension_mutants(model: Model) -> Iterator[Mutant]:
    """extension_name_to_prefix entries that break the naming and bijection rules."""
    table = model.extension_name_to_prefix
    bad = [
        (
            "extension name",
            "name 'noextension' (not reverse-domain)",
            (ExtensionNameAndPrefix("noextension", 1),),
        ),
        ("extension prefix", "prefix 0", (ExtensionNameAndPrefix("com.example.a", 0),)),
        (
            "extension prefix",
            "two names share prefix 1",
            (ExtensionNameAndPrefix("com.example.a", 1), ExtensionNameAndPrefix("com.example.b", 1)),
        ),
        (
            "extension name",
            "one name with two prefixes",
            (ExtensionNameAndPrefix("com.example.a", 1), ExtensionNameAndPrefix("com.example.a", 2)),
        ),
    ]
    for family, detail, entries in bad:
        yield Mutant(family, detail, replace(model, extension_name_to_prefix=(*table, *entries)))


# ------------------------------------------------------------------ per-operation mutations (the operation's signature)
