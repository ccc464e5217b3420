"""Shared builders for the validation tests: a valid model and request, and one-field mutations of them."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace

import pytest

from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.types import (
    DataLocation,
    ExtensionNameAndPrefix,
    Model,
    Operand,
    Operation,
    Request,
    RequestArgument,
    Subgraph,
    SymmPerChannelQuantParams,
)

T = OperandType
Op = OperationType
TEMP, IN, OUT, COPY, REF, NOVAL, SUB = range(7)  # OperandLifeTime codes
EXT = "com.example.my_ext"


def opnd(type_, dims=(), lifetime=TEMP, loc=(0, 0, 0), consumers=0, **kw) -> Operand:
    return Operand(type_, tuple(dims), consumers, lifetime=lifetime, location=DataLocation(*loc), **kw)


def make_model() -> Model:
    """ADD(input, constant) then CONV_2D whose filter is a CONSTANT_REFERENCE in a host pool."""
    values = (
        struct.pack("<2f", 0.5, -1.0)
        + struct.pack("<i", 0)
        + struct.pack("<3f", 1, 2, 3)
        + struct.pack("<2i", 1, 1)
    )
    operands = (
        opnd(T.TENSOR_FLOAT32, (1, 4, 4, 2), IN, consumers=1),  # 0 input
        opnd(T.TENSOR_FLOAT32, (1, 1, 1, 2), COPY, (0, 0, 8), 1),  # 1 addend
        opnd(T.INT32, (), COPY, (0, 8, 4), 2),  # 2 activation NONE, read by ADD and CONV
        opnd(T.TENSOR_FLOAT32, (1, 4, 4, 2), TEMP, consumers=1),  # 3 sum
        opnd(T.TENSOR_FLOAT32, (3, 3, 3, 2), REF, (0, 0, 216), 1),  # 4 filter
        opnd(T.TENSOR_FLOAT32, (3,), COPY, (0, 12, 12), 1),  # 5 bias
        opnd(T.INT32, (), COPY, (0, 24, 4), 1),  # 6 padding SAME
        opnd(T.INT32, (), COPY, (0, 28, 4), 2),  # 7 stride, used for width and height
        opnd(T.TENSOR_FLOAT32, (1, 4, 4, 3), OUT),  # 8 output
    )
    ops = (Operation(Op.ADD, (0, 1, 2), (3,)), Operation(Op.CONV_2D, (3, 4, 5, 6, 7, 7, 2), (8,)))
    main = Subgraph(operands, ops, (0,), (8,))
    return Model(main, operand_values=values, pools=(HostMemory(bytes(256)),))


M = make_model
MAIN_OP = "of main subgraph"


def _unary(
    op: int = Op.RELU, in_type: int = T.TENSOR_FLOAT32, out_type: int = T.TENSOR_FLOAT32, dims=(2,)
) -> Subgraph:
    ops = (opnd(in_type, dims, IN, consumers=1), opnd(out_type, dims, OUT))
    return Subgraph(ops, (Operation(op, (0,), (1,)),), (0,), (1,))


def make_if_model() -> Model:
    """IF(cond, then=referenced 0, else=referenced 1, x): both branches are RELU."""
    operands = (
        opnd(T.TENSOR_BOOL8, (1,), IN, consumers=1),
        opnd(T.SUBGRAPH, (), SUB, (0, 0, 0), 1),
        opnd(T.SUBGRAPH, (), SUB, (0, 1, 0), 1),
        opnd(T.TENSOR_FLOAT32, (2,), IN, consumers=1),
        opnd(T.TENSOR_FLOAT32, (2,), OUT),
    )
    main = Subgraph(operands, (Operation(Op.IF, (0, 1, 2, 3), (4,)),), (0, 3), (4,))
    return Model(main, referenced=(_unary(), _unary()))


def make_while_model() -> Model:
    """WHILE(cond=referenced 0, body=referenced 1, x): cond is x < x (LESS, one value), body is RELU."""
    cond_ops = (opnd(T.TENSOR_FLOAT32, (1,), IN, consumers=2), opnd(T.TENSOR_BOOL8, (1,), OUT))
    cond = Subgraph(cond_ops, (Operation(Op.LESS, (0, 0), (1,)),), (0,), (1,))
    operands = (
        opnd(T.SUBGRAPH, (), SUB, (0, 0, 0), 1),
        opnd(T.SUBGRAPH, (), SUB, (0, 1, 0), 1),
        opnd(T.TENSOR_FLOAT32, (1,), IN, consumers=1),
        opnd(T.TENSOR_FLOAT32, (1,), OUT),
    )
    main = Subgraph(operands, (Operation(Op.WHILE, (0, 1, 2), (3,)),), (2,), (3,))
    return Model(main, referenced=(cond, _unary(dims=(1,))))


# ---------------------------------------------------------------- mutation helpers


def set_operand(model: Model, index: int, sub: int = -1, **changes) -> Model:
    """`model` with operand `index` of subgraph `sub` (-1 = main) changed."""
    graph = model.main if sub < 0 else model.referenced[sub]
    if "location" in changes and isinstance(changes["location"], tuple):
        changes["location"] = DataLocation(*changes["location"])
    operands = list(graph.operands)
    operands[index] = replace(operands[index], **changes)
    return set_graph(model, sub, operands=tuple(operands))


def set_graph(model: Model, sub: int = -1, **changes) -> Model:
    if sub < 0:
        return replace(model, main=replace(model.main, **changes))
    referenced = list(model.referenced)
    referenced[sub] = replace(referenced[sub], **changes)
    return replace(model, referenced=tuple(referenced))


def set_op(model: Model, index: int, sub: int = -1, **changes) -> Model:
    graph = model.main if sub < 0 else model.referenced[sub]
    ops = list(graph.operations)
    ops[index] = replace(ops[index], **changes)
    return set_graph(model, sub, operations=tuple(ops))


def add_operand(model: Model, operand: Operand, sub: int = -1) -> Model:
    graph = model.main if sub < 0 else model.referenced[sub]
    return set_graph(model, sub, operands=(*graph.operands, operand))


def with_ext(model: Model, *entries: tuple[str, int]) -> Model:
    return replace(model, extension_name_to_prefix=tuple(ExtensionNameAndPrefix(n, p) for n, p in entries))


def per_channel(model: Model, **params) -> Model:
    """The filter (operand 4) as a per-channel quantised constant; `params` override its extra params."""
    extra = {"scales": (0.5, 0.25, 0.125), "channel_dim": 0, **params}
    return set_operand(
        model,
        4,
        type=T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
        location=(0, 0, 54),
        extra_params=SymmPerChannelQuantParams(**extra),
    )


def oem(model: Model) -> Model:
    """`model` with ADD and CONV_2D made OEM_OPERATIONs, so operand rules can be tried without signature rules."""
    return set_op(set_op(model, 0, type=Op.OEM_OPERATION), 1, type=Op.OEM_OPERATION)


def expect_invalid(call: Callable[[], object], *fragments: str) -> HalError:
    with pytest.raises(HalError) as info:
        call()
    err = info.value
    assert err.status == ErrorStatus.INVALID_ARGUMENT
    for fragment in fragments:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"
    return err


# ---------------------------------------------------------------- requests


def make_request(**changes) -> Request:
    """Valid for make_model(): input 0 is 128 bytes in pool 0, output 0 is 192 bytes in pool 1."""
    request = Request(
        inputs=(RequestArgument(location=DataLocation(0, 0, 128)),),
        outputs=(RequestArgument(location=DataLocation(1, 0, 192)),),
        pools=(HostMemory(bytearray(128)), HostMemory(bytearray(256))),
    )
    return replace(request, **changes)


def arg(pool=0, offset=0, length=128, dims=(), no_value=False) -> RequestArgument:
    return RequestArgument(no_value, DataLocation(pool, offset, length), tuple(dims))


def model_with_dims(input_dims=(1, 4, 4, 2), output_dims=(1, 4, 4, 3)) -> Model:
    return set_operand(set_operand(make_model(), 0, dimensions=input_dims), 8, dimensions=output_dims)
