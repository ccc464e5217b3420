"""Valid IF and WHILE models and their invalid variants (condition types, branch and body signatures, references).

The models are small (float32 tensors, ADD/MUL/LESS inside), made operand by
operand so every mutation below touches exactly one field.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import replace

from mlts.hal.enums import OperandLifeTime as L
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as Op
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Model, Operand, Operation, Request, RequestArgument, Subgraph
from mlts.hal.validate import MAX_NESTING
from mlts.validate.mutations import Mutant, retyped

F32, B8 = T.TENSOR_FLOAT32, T.TENSOR_BOOL8
IN, OUT, TMP = L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.TEMPORARY_VARIABLE


def _t(type_: int, dims: tuple[int, ...], lifetime: L = TMP) -> Operand:
    return Operand(type_, dims, lifetime=lifetime)


def _ref(index: int) -> Operand:
    return Operand(T.SUBGRAPH, (), lifetime=L.SUBGRAPH, location=DataLocation(0, index, 0))


def _sub(operands: list[Operand], ops: list[tuple[int, tuple[int, ...], tuple[int, ...]]]) -> Subgraph:
    consumers = [0] * len(operands)
    for _, ins, _ in ops:
        for i in ins:
            consumers[i] += 1
    fixed = tuple(replace(o, number_of_consumers=consumers[i]) for i, o in enumerate(operands))
    inputs = tuple(i for i, o in enumerate(operands) if o.lifetime == IN)
    outputs = tuple(i for i, o in enumerate(operands) if o.lifetime == OUT)
    return Subgraph(fixed, tuple(Operation(k, ins, outs) for k, ins, outs in ops), inputs, outputs)


# The one shared constant: INT32 0 (no fused activation) at offset 0 of operandValues, then float32 1.0.
_VALUES = struct.pack("<if", 0, 1.0)
_NO_ACT = Operand(T.INT32, (), lifetime=L.CONSTANT_COPY, location=DataLocation(0, 0, 4))
_ONE = Operand(F32, (1,), lifetime=L.CONSTANT_COPY, location=DataLocation(0, 4, 4))


def _binary(op: int, dims: tuple[int, ...]) -> Subgraph:
    return _sub([_t(F32, dims, IN), _t(F32, dims, IN), _NO_ACT, _t(F32, dims, OUT)], [(op, (0, 1, 2), (3,))])


def if_model(dims: tuple[int, ...] = (2,)) -> Model:
    """IF(cond, then: a + b, else: a * b)."""
    main = _sub(
        [_t(B8, (1,), IN), _ref(0), _ref(1), _t(F32, dims, IN), _t(F32, dims, IN), _t(F32, dims, OUT)],
        [(Op.IF, (0, 1, 2, 3, 4), (5,))],
    )
    return Model(main, (_binary(Op.ADD, dims), _binary(Op.MUL, dims)), _VALUES)


def nested_if_model(depth: int) -> Model:
    """IF operations nested `depth` levels deep: each level's branches are the next level, the last
    one adds x to itself (BOOL8 [1] condition, float32 [1] x); the result is 2x."""
    cond, x = _t(B8, (1,), IN), _t(F32, (1,), IN)
    leaf = _sub([cond, x, _NO_ACT, _t(F32, (1,), OUT)], [(Op.ADD, (1, 1, 2), (3,))])

    def level(child: int) -> Subgraph:
        return _sub([cond, x, _ref(child), _ref(child), _t(F32, (1,), OUT)], [(Op.IF, (0, 2, 3, 0, 1), (4,))])

    referenced = [level(k + 1) for k in range(depth - 1)] + [leaf]
    return Model(level(0), tuple(referenced), _VALUES)


def while_model() -> Model:
    """while x < limit: x = x + 1 (float32 [1]); outputs x."""
    cond = _sub([_t(F32, (1,), IN), _t(F32, (1,), IN), _t(B8, (1,), OUT)], [(Op.LESS, (0, 1), (2,))])
    body = _sub(
        [_t(F32, (1,), IN), _t(F32, (1,), IN), _NO_ACT, _ONE, _t(F32, (1,), OUT)], [(Op.ADD, (0, 3, 2), (4,))]
    )
    main = _sub(
        [_ref(0), _ref(1), _t(F32, (1,), IN), _t(F32, (1,), IN), _t(F32, (1,), OUT)],
        [(Op.WHILE, (0, 1, 2, 3), (4,))],
    )
    return Model(main, (cond, body), _VALUES)


def doubling_while_model() -> Model:
    """while i < limit: x = CONCATENATION(x, x); i = i + 1 (float32; x of unknown length): the tensor
    doubles each iteration, so a driver must stop it at its memory budget (a memory bomb of 4 KiB)."""
    x, i, limit = _t(F32, (0,), IN), _t(F32, (1,), IN), _t(F32, (1,), IN)
    cond = _sub([x, i, limit, _t(B8, (1,), OUT)], [(Op.LESS, (1, 2), (3,))])
    # _NO_ACT (INT32 0) is CONCATENATION's axis as well as ADD's activation.
    body = _sub(
        [x, i, limit, _NO_ACT, _ONE, _t(F32, (0,), OUT), _t(F32, (1,), OUT)],
        [(Op.CONCATENATION, (0, 0, 3), (5,)), (Op.ADD, (1, 4, 3), (6,))],
    )
    main = _sub(
        [_ref(0), _ref(1), x, i, limit, _t(F32, (0,), OUT), _t(F32, (1,), OUT)],
        [(Op.WHILE, (0, 1, 2, 3, 4), (5, 6))],
    )
    return Model(main, (cond, body), _VALUES)


def doubling_request(elements: int, iterations: int, output_elements: int | None = None) -> Request:
    """A request for `doubling_while_model`: x of `elements` zeros doubled `iterations` times, into an
    output of `output_elements` floats (default: exactly the result's)."""
    out = elements << iterations if output_elements is None else output_elements
    x_bytes = 4 * elements
    inputs = SharedMemory.create(x_bytes + 8, "mlts-validate-in")
    struct.pack_into("<ff", inputs.buffer, x_bytes, 0.0, float(iterations))
    outputs = SharedMemory.create(4 * out + 4, "mlts-validate-out")
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, x_bytes), (elements,)),
            RequestArgument(False, DataLocation(0, x_bytes, 4)),
            RequestArgument(False, DataLocation(0, x_bytes + 4, 4)),
        ),
        (
            RequestArgument(False, DataLocation(1, 0, 4 * out)),
            RequestArgument(False, DataLocation(1, 4 * out, 4)),
        ),
        (inputs, outputs),
    )


def _set_ref(model: Model, index: int, sub: Subgraph) -> Model:
    referenced = list(model.referenced)
    referenced[index] = sub
    return replace(model, referenced=tuple(referenced))


def _operand(sub: Subgraph, i: int, operand: Operand) -> Subgraph:
    operands = list(sub.operands)
    operands[i] = operand
    return replace(sub, operands=tuple(operands))


def if_mutants(model: Model | None = None) -> Iterator[Mutant]:
    model = model or if_model()
    main = model.main
    op = main.operations[0]
    q8 = T.TENSOR_QUANT8_ASYMM
    yield Mutant(
        "IF condition",
        "condition is TENSOR_QUANT8_ASYMM",
        replace(model, main=_operand(main, 0, retyped(main.operands[0], q8))),
    )
    yield Mutant(
        "IF condition", "condition has 2 elements", replace(model, main=_operand(main, 0, _t(B8, (2,), IN)))
    )
    three = _sub(
        [_t(F32, (2,), IN), _t(F32, (2,), IN), _t(F32, (2,), IN), _NO_ACT, _t(F32, (2,), OUT)],
        [(Op.ADD, (0, 1, 3), (4,))],
    )
    yield Mutant("IF branch", "then branch takes 3 inputs for 2 branch inputs", _set_ref(model, 0, three))
    yield Mutant(
        "IF branch",
        "else branch gives TENSOR_INT32",
        _set_ref(model, 1, _operand(model.referenced[1], 3, _t(T.TENSOR_INT32, (2,), OUT))),
    )
    yield Mutant(
        "IF branch",
        "input 1 is a tensor, not a subgraph",
        replace(model, main=replace(main, operations=(replace(op, inputs=(0, 3, 2, 3, 4)),))),
    )
    yield Mutant(
        "subgraph reference",
        "then branch is referenced subgraph 2 (there are 2)",
        replace(model, main=_operand(main, 1, _ref(2))),
    )
    # The then branch becomes a copy of main: subgraph 0 references itself.
    yield Mutant("subgraph reference", "a subgraph that references itself", _set_ref(model, 0, main))
    yield Mutant(
        "IF nesting",
        f"IF nested {MAX_NESTING + 1} levels deep (at most {MAX_NESTING})",
        nested_if_model(MAX_NESTING + 1),
    )


def while_mutants(model: Model | None = None) -> Iterator[Mutant]:
    model = model or while_model()
    cond, body = model.referenced
    yield Mutant(
        "WHILE condition",
        "condition gives TENSOR_QUANT8_ASYMM",
        _set_ref(model, 0, _operand(cond, 2, retyped(cond.operands[2], T.TENSOR_QUANT8_ASYMM))),
    )
    yield Mutant(
        "WHILE condition",
        "condition takes one input",
        _set_ref(model, 0, _sub([_t(F32, (1,), IN), _t(B8, (1,), OUT)], [(Op.LESS, (0, 0), (1,))])),
    )
    yield Mutant(
        "WHILE body",
        "body gives TENSOR_INT32 for a float32 loop variable",
        _set_ref(model, 1, _operand(body, 4, _t(T.TENSOR_INT32, (1,), OUT))),
    )
    yield Mutant(
        "WHILE body",
        "body gives no outputs",
        _set_ref(model, 1, replace(body, output_indexes=())),
    )
    main = model.main
    grown = (*main.operands, _t(F32, (1,), OUT))
    yield Mutant(
        "WHILE outputs",
        "two outputs for one loop variable",
        replace(
            model,
            main=replace(
                main,
                operands=grown,
                operations=(replace(main.operations[0], outputs=(4, 5)),),
                output_indexes=(4, 5),
            ),
        ),
    )
