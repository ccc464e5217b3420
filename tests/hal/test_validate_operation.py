"""Per-operation validation: every table case passes, and each broken signature rule is refused naming op, operand and rule."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from mlts.hal._validate_operation import match_operation
from mlts.hal.enums import ErrorStatus, OperandLifeTime
from mlts.hal.errors import HalError
from mlts.hal.opprobe import probe_cases, probe_model, table_operations
from mlts.hal.types import DataLocation, Model, Operation
from mlts.hal.validate import validate_model
from tests.hal.mutationkit import (
    BROKEN,
    F16,
    F32,
    I32,
    Q8,
    QS8,
    Op,
    T,
    _operand_index,
    _set_operand,
    add_input,
    add_scalar,
    both,
    omit,
    per_channel_filter,
    set_in,
    value,
)

CASES = list(probe_cases())


def test_table_covers_every_operation_but_control_flow_and_oem() -> None:
    described = set(table_operations())
    assert described == set(Op) - {Op.IF, Op.WHILE, Op.OEM_OPERATION}
    assert len(described) == 100


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op.name}-{c.key.name}" for c in CASES])
def test_probe_of_every_operation_and_type_is_valid(case) -> None:
    model = probe_model(case.op, case.key)
    validate_model(model)
    match = match_operation(model, model.main, model.main.operations[0], "probe")
    assert match is not None and match.key == case.key and match.version >= case.version


# ---------------------------------------------------------------- mutations of probe models


# (operation, key type, mutation, fragments the message must hold)


@pytest.mark.parametrize(
    ("op", "key", "mutate", "fragments"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
def test_broken_rule_is_refused(op, key, mutate, fragments) -> None:
    model = mutate(probe_model(op, key))
    with pytest.raises(HalError) as info:
        validate_model(model)
    err = info.value
    assert err.status == ErrorStatus.INVALID_ARGUMENT
    assert f"operation 0 of main subgraph ({Op(op).name})" in err.message
    for fragment in fragments:
        assert fragment in err.message, f"{fragment!r} not in {err.message!r}"


# ---------------------------------------------------------------- valid variants beyond the probes


VALID = [
    # NNAPI allows negative right and bottom padding on TRANSPOSE_CONV_2D (they fix the output size).
    ("transpose-conv-negative-right", Op.TRANSPOSE_CONV_2D, F32, both(value(4, -1), value(6, -1))),
    ("conv-per-channel", Op.CONV_2D, Q8, both(per_channel_filter(), set_in(2, scale=0.0))),
    ("conv-per-channel-signed", Op.CONV_2D, QS8, per_channel_filter()),
    (
        "conv-unknown-dims",
        Op.CONV_2D,
        F32,
        both(set_in(0, dimensions=(0, 0, 0, 0)), set_in(-1, dimensions=())),
    ),
    ("add-broadcast", Op.ADD, F32, set_in(1, dimensions=(2,))),
    (
        "add-broadcast-output-unknown-dims",
        Op.ADD,
        F32,
        both(set_in(1, dimensions=(2,)), set_in(-1, dimensions=(0, 2, 0, 2))),
    ),
    ("add-int32", Op.ADD, I32, lambda m: m),
    ("softmax-no-axis", Op.SOFTMAX, F32, lambda m: m),
    ("transpose-no-perm", Op.TRANSPOSE, F32, omit(1)),
    ("lrn-negative-radius", Op.LOCAL_RESPONSE_NORMALIZATION, F32, value(1, -1)),
    ("squeeze-no-axes", Op.SQUEEZE, F32, omit(1)),
    ("lstm-cifg", Op.LSTM, F32, both(omit(1), omit(5), omit(12))),
    ("strided-slice-shrink-one", Op.STRIDED_SLICE, F32, value(6, 1)),
    (
        "strided-slice-negative-stride",
        Op.STRIDED_SLICE,
        F32,
        both(value(3, [-1, 1]), value(1, [1, 0]), value(2, [0, 2])),
    ),
    (
        "resize-half-pixel",
        Op.RESIZE_NEAREST_NEIGHBOR,
        QS8,
        both(add_scalar(T.BOOL, False), add_scalar(T.BOOL, True)),
    ),
    ("concat-axis-negative", Op.CONCATENATION, F32, value(1, -1)),
    ("gather-axis-negative", Op.GATHER, F32, value(1, -2)),
    (
        "param-not-constant",
        Op.CONV_2D,
        F32,
        set_in(7, lifetime=OperandLifeTime.SUBGRAPH_INPUT, location=DataLocation()),
    ),
]


def _inputs_fixed(m: Model) -> Model:
    """Make every SUBGRAPH_INPUT operand listed in the model inputs (a mutation may have created one)."""
    ins = tuple(i for i, o in enumerate(m.main.operands) if o.lifetime == OperandLifeTime.SUBGRAPH_INPUT)
    return replace(m, main=replace(m.main, input_indexes=ins))


@pytest.mark.parametrize(("op", "key", "mutate"), [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_variants_pass(op, key, mutate) -> None:
    validate_model(_inputs_fixed(mutate(probe_model(op, key))))


def test_hal_version_of_each_combination() -> None:
    def version(op, key, mutate=lambda m: m):
        m = mutate(probe_model(op, key))
        return match_operation(m, m.main, m.main.operations[0], "x").version.label

    assert version(Op.CONV_2D, F32) == "1.0"
    assert version(Op.CONV_2D, F16) == "1.2"
    assert version(Op.CONV_2D, QS8) == "1.3"
    assert version(Op.ADD, I32) == "1.3"
    assert version(Op.SUB, F32) == "1.1"
    assert version(Op.SOFTMAX, F32) == "1.0"
    assert version(Op.RESIZE_BILINEAR, F32) == "1.0"
    assert version(Op.RANK, F32) == "1.3"
    assert version(Op.CONV_2D, F32, add_input(T.BOOL)) == "1.2"  # the layout flag
    assert version(Op.EMBEDDING_LOOKUP, I32) == "1.2"
    assert version(Op.CONV_2D, Q8, per_channel_filter()) == "1.2"  # per-channel weights
    assert version(Op.BOX_WITH_NMS_LIMIT, QS8) == "1.3"


def test_oem_operation_passes_unchecked() -> None:
    m = probe_model(Op.ADD, F32)
    op = m.main.operations[0]
    m = replace(m, main=replace(m.main, operations=(Operation(Op.OEM_OPERATION, op.inputs[:1], op.outputs),)))
    m = replace(
        m,
        main=replace(
            m.main,
            operands=tuple(
                replace(o, number_of_consumers=0) if k in op.inputs[1:] else o
                for k, o in enumerate(m.main.operands)
            ),
        ),
    )
    validate_model(_inputs_fixed(m))


def test_constant_values_are_read_from_pools_too() -> None:
    """A parameter in a memory pool (CONSTANT_REFERENCE) is read and checked like a copied one."""
    from mlts.hal.memory import HostMemory

    m = probe_model(Op.CONV_2D, F32)
    i = _operand_index(m, 7)
    pool = HostMemory(bytes(8) + struct.pack("<i", 0))
    m = replace(m, pools=(*m.pools, pool))
    m = _set_operand(
        m, i, lifetime=OperandLifeTime.CONSTANT_REFERENCE, location=DataLocation(len(m.pools) - 1, 8, 4)
    )
    with pytest.raises(HalError, match="stride_width"):
        validate_model(m)
