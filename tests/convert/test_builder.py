"""ModelBuilder (mlts/hal/builder.py): constants placement, lifetimes, consumers, errors."""

from __future__ import annotations

import numpy as np
import pytest

from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandLifeTime, OperandType, OperationType


def _add_model(b: ModelBuilder, const) -> tuple[int, int, int]:
    x = b.add_input(OperandType.TENSOR_FLOAT32, (2, 3))
    k = b.add_constant(const)
    y = b.add_operand(OperandType.TENSOR_FLOAT32, (2, 3))
    b.add_operation(OperationType.ADD, [x, k, b.add_scalar(0, OperandType.INT32)], [y])
    b.mark_outputs(y)
    return x, k, y


def test_small_constants_copied_large_ones_in_one_aligned_pool() -> None:
    b = ModelBuilder()
    small = b.add_constant(np.arange(32, dtype=np.float32))  # exactly 128 bytes
    big1 = b.add_constant(np.arange(33, dtype=np.float32))
    big2 = b.add_constant(np.ones(50, dtype=np.float32))
    x, k, y = _add_model(b, np.ones((2, 3), np.float32))
    model = b.build()
    ops = model.main.operands
    assert ops[small].lifetime == OperandLifeTime.CONSTANT_COPY
    assert ops[big1].lifetime == ops[big2].lifetime == OperandLifeTime.CONSTANT_REFERENCE
    assert len(model.pools) == 1
    assert ops[big1].location.offset % 64 == 0 and ops[big2].location.offset % 64 == 0
    loc = ops[big2].location
    pool = bytes(model.pools[0].buffer)
    np.testing.assert_array_equal(
        np.frombuffer(pool[loc.offset : loc.offset + loc.length], np.float32), np.ones(50)
    )
    loc = ops[small].location
    np.testing.assert_array_equal(
        np.frombuffer(model.operand_values[loc.offset : loc.offset + loc.length], np.float32), np.arange(32)
    )


def test_identical_constants_share_bytes_and_types_are_inferred() -> None:
    b = ModelBuilder()
    a = b.add_constant(np.zeros(64, np.float32))
    c = b.add_constant(np.zeros(64, np.float32))
    s1, s2 = b.add_scalar(3, OperandType.INT32), b.add_scalar(3, OperandType.INT32)
    f, flag = b.add_constant(1.5), b.add_constant(True)
    t = b.add_constant(np.array([1, 2], dtype=np.int64))
    _add_model(b, np.ones((2, 3), np.float32))
    ops = b.build().main.operands
    assert ops[a].location == ops[c].location and ops[s1].location == ops[s2].location
    assert (ops[f].type, ops[flag].type, ops[t].type) == (
        OperandType.FLOAT32,
        OperandType.BOOL,
        OperandType.TENSOR_INT32,
    )
    assert ops[s1].dimensions == () and ops[t].dimensions == (2,)


def test_consumers_lifetimes_omitted_and_relax() -> None:
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, (4,))
    act = b.add_scalar(0, OperandType.INT32)
    y = b.add_operand(OperandType.TENSOR_FLOAT32, (4,))
    b.add_operation(OperationType.ADD, [x, x, act], [y])
    z = b.add_operand(OperandType.TENSOR_FLOAT32, (4,))
    b.add_operation(OperationType.MUL, [y, x, act], [z])
    omitted = b.add_omitted(OperandType.TENSOR_FLOAT32)
    b.mark_outputs(y, [z])
    model = b.build(relax=True)
    ops = model.main.operands
    assert [ops[i].number_of_consumers for i in (x, act, y, z, omitted)] == [3, 2, 1, 0, 0]
    assert ops[x].lifetime == OperandLifeTime.SUBGRAPH_INPUT
    assert ops[y].lifetime == ops[z].lifetime == OperandLifeTime.SUBGRAPH_OUTPUT
    assert ops[omitted].lifetime == OperandLifeTime.NO_VALUE
    assert model.main.output_indexes == (y, z) and model.relax_computation_float32_to_float16


def test_ill_formed_models_rejected() -> None:
    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, (4,))
    y = b.add_operand(OperandType.TENSOR_FLOAT32, (4,))
    z = b.add_operand(OperandType.TENSOR_FLOAT32, (4,))
    b.add_operation(OperationType.RELU, [y], [z])  # reads y before anything writes it
    b.add_operation(OperationType.RELU, [x], [y])
    b.mark_outputs(z)
    with pytest.raises(ValueError, match="reads operand 1 before"):
        b.build()
    with pytest.raises(ValueError, match="only temporaries"):
        b.mark_outputs(x)
    with pytest.raises(ValueError, match="scalar type"):
        b.add_constant(np.ones(2, np.float32), OperandType.FLOAT32)
    with pytest.raises(ValueError, match="dimensions"):
        b.add_operand(OperandType.INT32, (1,))
    with pytest.raises(ValueError, match="does not exist"):
        b.add_operation(OperationType.RELU, [99], [z])


def test_prune_drops_dead_operations_and_unused_operands_and_compacts_constants() -> None:
    from driver.executor import run_model
    from mlts.hal.validate import validate_model

    b = ModelBuilder()
    x = b.add_input(OperandType.TENSOR_FLOAT32, (2, 3))
    unused_input = b.add_input(OperandType.TENSOR_FLOAT32, (1,))
    dead_weights = b.add_constant(np.full((64,), 7.0, np.float32))  # pool bytes nothing will read
    dead = b.add_operand(OperandType.TENSOR_FLOAT32, (64,))
    b.add_operation(OperationType.RELU, [dead_weights], [dead])
    dead2 = b.add_operand(OperandType.TENSOR_FLOAT32, (64,))
    b.add_operation(OperationType.RELU, [dead], [dead2])  # dead only because nothing reads dead2
    k = b.add_constant(np.full((2, 3), 0.5, np.float32))
    y = b.add_operand(OperandType.TENSOR_FLOAT32, (2, 3))
    b.add_operation(OperationType.ADD, [x, k, b.add_scalar(0, OperandType.INT32)], [y])
    b.mark_outputs(y)
    assert b.prune() == 2
    assert b.prune() == 0
    model = b.build()
    validate_model(model)
    sub = model.main
    assert [OperationType(op.type) for op in sub.operations] == [OperationType.ADD]
    assert (
        len(sub.operands) == 5 and len(sub.input_indexes) == 2
    )  # unused inputs stay: they are the interface
    assert sub.input_indexes == (x, unused_input) and sub.output_indexes == (3,)  # k, y, then the scalar
    assert model.pools == ()  # the 256 bytes of dead weights are gone
    (out,) = run_model(model, [np.ones((2, 3), np.float32), np.zeros(1, np.float32)])
    np.testing.assert_array_equal(out, np.full((2, 3), 1.5))


def test_parameter_constants_have_their_nnapi_types_and_values() -> None:
    b = ModelBuilder()
    i, f, flag = b.add_int32(7), b.add_float32(0.5), b.add_bool(True)
    one, flat, nested = (
        b.add_int32_tensor(3),
        b.add_int32_tensor([1, 2]),
        b.add_int32_tensor([[0, 0], [1, 2]]),
    )
    _add_model(b, np.ones((2, 3), np.float32))
    model = b.build()
    ops = model.main.operands
    assert [OperandType(ops[k].type) for k in (i, f, flag, one, flat, nested)] == [
        OperandType.INT32,
        OperandType.FLOAT32,
        OperandType.BOOL,
        *[OperandType.TENSOR_INT32] * 3,
    ]
    assert [ops[k].dimensions for k in (one, flat, nested)] == [(1,), (2,), (2, 2)]
    values = [
        bytes(model.operand_values[ops[k].location.offset :][: ops[k].location.length]) for k in (i, f, flag)
    ]
    assert values == [np.int32(7).tobytes(), np.float32(0.5).tobytes(), b"\x01"]
