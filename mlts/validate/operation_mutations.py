"""Invalid models made from one operation of a valid model: its operand types, ranks, quantisation, tensor
and scalar parameters, each broken on its own (the per-operation mutation families of AOSP's VTS).

Shares `Mutant`, `rule_of` and the model-editing helpers with `mlts.validate.mutations`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import replace

from mlts.hal import opprobe
from mlts.hal.enums import OperandLifeTime, OperandType
from mlts.hal.memory import HostMemory
from mlts.hal.types import DataLocation, Model, Operation
from mlts.validate.mutations import (
    PARAMETER_VALUES,
    Mutant,
    add_operand,
    put_operand,
    recount_consumers,
    retyped,
    rule_of,
    same_size_types,
    set_operand,
    set_operation,
    type_name,
    with_main,
    write_scalar,
)

T = OperandType
L = OperandLifeTime


def operation_mutants(model: Model, k: int = 0) -> Iterator[Mutant]:
    """Input and output counts, operand types, ranks, parameter values and constness of operation `k`."""
    sub = model.main
    op = sub.operations[k]
    yield Mutant(
        "operation input count",
        f"last of {len(op.inputs)} inputs removed",
        recount_consumers(set_operation(model, k, inputs=op.inputs[:-1])),
    )
    if op.inputs:
        yield Mutant(
            "operation input count",
            f"input {len(op.inputs)} added",
            recount_consumers(set_operation(model, k, inputs=(*op.inputs, op.inputs[0]))),
        )
    extra_out = replace(sub.operands[op.outputs[0]], lifetime=L.SUBGRAPH_OUTPUT, number_of_consumers=0)
    grown, new = add_operand(model, extra_out)
    grown = set_operation(grown, k, outputs=(*op.outputs, new))
    yield Mutant(
        "operation output count",
        f"output {len(op.outputs)} added",
        with_main(grown, output_indexes=(*grown.main.output_indexes, new)),
    )
    yield from _slot_type_mutants(model, k)
    yield from _slot_rank_mutants(model, k)
    yield from _parameter_mutants(model, k)
    yield from _quantisation_mutants(model, k)
    yield from _tensor_parameter_mutants(model, k)


def _slots(op: Operation) -> list[tuple[str, int, int]]:
    """(role, position, operand index) of each input, then each output of `op`."""
    return [("input", p, i) for p, i in enumerate(op.inputs)] + [
        ("output", p, i) for p, i in enumerate(op.outputs)
    ]


def _quantisation_mutants(model: Model, k: int) -> Iterator[Mutant]:
    """Scales and zero points an operation ties to other operands (fixed output scales, bias scales)."""
    for role, pos, i in _slots(model.main.operations[k]):
        o = model.main.operands[i]
        if o.scale <= 0 or o.extra_params is not None:
            continue
        for scale, zp in ((o.scale * 2, o.zero_point), (o.scale, o.zero_point + 1)):
            mutant = set_operand(model, i, scale=scale, zero_point=zp)
            if rule_of(mutant) is not None:
                yield Mutant(
                    "operation operand quantisation",
                    f"{role} {pos} (operand {i}): scale {scale}, zero point {zp}",
                    mutant,
                )
                break


def _tensor_parameter_mutants(model: Model, k: int) -> Iterator[Mutant]:
    """Constant TENSOR_INT32 parameters (axes, paddings, sizes) filled with out-of-range values."""
    op = model.main.operations[k]
    for pos, i in enumerate(op.inputs):
        o = model.main.operands[i]
        if o.type != T.TENSOR_INT32 or o.lifetime not in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            continue
        rules: set[str] = set()
        for value in (-100, 100, -1):
            mutant = fill_constant(model, i, value)
            found = None if mutant is None else rule_of(mutant)
            if mutant is not None and found is not None and found[0] not in rules:
                rules.add(found[0])
                yield Mutant(
                    "operation tensor parameter value", f"input {pos} (operand {i}) all {value}", mutant
                )


def fill_constant(model: Model, index: int, value: int) -> Model | None:
    """The model with every element of constant TENSOR_INT32 operand `index` set to `value`."""
    o = model.main.operands[index]
    loc = o.location
    data = struct.pack("<i", value) * (loc.length // 4)
    if o.lifetime == L.CONSTANT_COPY:
        values = bytearray(model.operand_values)
        if loc.offset + loc.length > len(values):
            return None
        values[loc.offset : loc.offset + loc.length] = data
        return replace(model, operand_values=bytes(values))
    if loc.pool_index >= len(model.pools):
        return None
    pools = list(model.pools)
    buf = bytearray(pools[loc.pool_index].buffer)
    if loc.offset + loc.length > len(buf):
        return None
    buf[loc.offset : loc.offset + loc.length] = data
    pools[loc.pool_index] = HostMemory(buf)
    return replace(model, pools=tuple(pools))


def _slot_type_mutants(model: Model, k: int) -> Iterator[Mutant]:
    for role, pos, i in _slots(model.main.operations[k]):
        o = model.main.operands[i]
        if o.lifetime == L.NO_VALUE:
            continue
        for new_type in same_size_types(o.type):
            mutant = put_operand(model, i, retyped(o, new_type))
            if rule_of(mutant) is not None:
                yield Mutant(
                    "operation operand type",
                    f"{role} {pos} (operand {i}) {type_name(o.type)} -> {type_name(new_type)}",
                    mutant,
                )
                break


def _slot_rank_mutants(model: Model, k: int) -> Iterator[Mutant]:
    op = model.main.operations[k]
    for role, indexes in (("input", op.inputs), ("output", op.outputs)):
        for pos, i in enumerate(indexes):
            o = model.main.operands[i]
            if o.is_scalar_type or o.lifetime not in (
                L.SUBGRAPH_INPUT,
                L.SUBGRAPH_OUTPUT,
                L.TEMPORARY_VARIABLE,
            ):
                continue
            if not o.dimensions:
                continue
            for dims, text in (((1, *o.dimensions), "one more"), ((1,) * 6 + o.dimensions, "six more")):
                mutant = set_operand(model, i, dimensions=dims)
                if rule_of(mutant) is not None:
                    yield Mutant(
                        "operation operand rank", f"{role} {pos} (operand {i}): {text} dimension(s)", mutant
                    )
                    break


def _parameter_mutants(model: Model, k: int) -> Iterator[Mutant]:
    op = model.main.operations[k]
    for pos, i in enumerate(op.inputs):
        o = model.main.operands[i]
        if o.lifetime != L.CONSTANT_COPY or not o.is_scalar_type:
            continue
        rules: set[str] = set()
        for value in PARAMETER_VALUES.get(o.type, ()):  # type: ignore[call-overload]
            mutant = write_scalar(model, i, value)
            found = None if mutant is None else rule_of(mutant)
            if mutant is not None and found is not None and found[0] not in rules:
                rules.add(found[0])
                yield Mutant("operation parameter value", f"input {pos} (operand {i}) = {value}", mutant)
        # A parameter NNAPI needs as a constant, given as a model input instead.
        as_input = set_operand(model, i, lifetime=L.SUBGRAPH_INPUT, location=DataLocation())
        as_input = with_main(as_input, input_indexes=(*as_input.main.input_indexes, i))
        yield Mutant(
            "operation parameter not constant", f"input {pos} (operand {i}) is a model input", as_input
        )


def has_spec(op: int) -> bool:
    return opprobe.has_signature(op)
