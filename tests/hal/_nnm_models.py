"""Hand-built models for the codec, .nnm file and formatter tests."""

from __future__ import annotations

import numpy as np

from mlts.hal.enums import OperandLifeTime as L
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as Op
from mlts.hal.memory import HostMemory
from mlts.hal.types import (
    DataLocation,
    ExtensionData,
    ExtensionNameAndPrefix,
    Model,
    Operand,
    Operation,
    Subgraph,
    SymmPerChannelQuantParams,
)

EXT_PREFIX = 3
EXT_OPERAND = (EXT_PREFIX << 16) | 5
EXT_OPERATION = (EXT_PREFIX << 16) | 9


def rich_model() -> Model:
    """Every feature the file must carry: copy and reference constants in two pools,
    per-channel quant params, an IF with a referenced subgraph, extension codes and data."""
    bias = np.arange(4, dtype=np.float32)  # 16 bytes: CONSTANT_COPY
    act = np.int32(0).tobytes()
    operand_values = bias.tobytes() + act
    w0 = np.linspace(-1, 1, 256, dtype=np.float32)  # 1024 bytes in pool 0
    w1 = (np.arange(300) % 127).astype(np.int8)  # 300 bytes in pool 1 at offset 64
    pool0 = HostMemory(w0.tobytes())
    pool1 = HostMemory(bytes(64) + w1.tobytes())
    main_operands = (
        Operand(T.TENSOR_FLOAT32, (1, 4), 2, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.TENSOR_FLOAT32, (4,), 1, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 0, 16)),
        Operand(T.INT32, (), 2, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 16, 4)),
        Operand(
            T.TENSOR_FLOAT32, (64, 4), 1, lifetime=L.CONSTANT_REFERENCE, location=DataLocation(0, 0, 1024)
        ),
        Operand(
            T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
            (3, 100),
            1,
            lifetime=L.CONSTANT_REFERENCE,
            location=DataLocation(1, 64, 300),
            extra_params=SymmPerChannelQuantParams((0.5, 0.25, 1e-3), 0),
        ),
        Operand(T.TENSOR_FLOAT32, (1, 0), 1),  # temporary with an unknown dimension
        Operand(T.TENSOR_QUANT8_ASYMM, (1, 4), 1, scale=0.0078125, zero_point=128),
        Operand(EXT_OPERAND, (2, 2), 1, extra_params=ExtensionData(b"\x00\x01opaque\xff")),
        Operand(T.TENSOR_FLOAT32, (), 0, lifetime=L.NO_VALUE),
        Operand(T.BOOL, (), 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0)),
        Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 1, 0)),
        Operand(T.TENSOR_FLOAT32, (1, 4), 0, lifetime=L.SUBGRAPH_OUTPUT),
    )
    main = Subgraph(
        main_operands,
        (
            Operation(Op.ADD, (0, 1, 2), (5,)),
            Operation(Op.QUANTIZE, (5,), (6,)),
            Operation(EXT_OPERATION, (6, 3, 4, 8), (7,)),
            Operation(Op.IF, (9, 10, 11, 7), (12,)),
        ),
        (0, 9),
        (12,),
    )
    then_branch = Subgraph(
        (
            Operand(T.TENSOR_FLOAT32, (1, 4), 1, lifetime=L.SUBGRAPH_INPUT),
            Operand(T.TENSOR_FLOAT32, (1, 4), 0, lifetime=L.SUBGRAPH_OUTPUT),
        ),
        (Operation(Op.RELU, (0,), (1,)),),
        (0,),
        (1,),
    )
    else_branch = Subgraph(
        (
            Operand(T.TENSOR_FLOAT32, (1, 4), 1, lifetime=L.SUBGRAPH_INPUT),
            Operand(T.TENSOR_FLOAT32, (1, 4), 0, lifetime=L.SUBGRAPH_OUTPUT),
        ),
        (Operation(Op.TANH, (0,), (1,)),),
        (0,),
        (1,),
    )
    return Model(
        main=main,
        referenced=(then_branch, else_branch),
        operand_values=operand_values,
        pools=(pool0, pool1),
        relax_computation_float32_to_float16=True,
        extension_name_to_prefix=(ExtensionNameAndPrefix('com.example."quoted"_ext', EXT_PREFIX),),
    )


def assert_models_equal(a: Model, b: Model) -> None:
    """Equal records and equal constant bytes (pools compare by content, not identity)."""
    assert a.main == b.main
    assert a.referenced == b.referenced
    assert bytes(a.operand_values) == bytes(b.operand_values)
    assert a.relax_computation_float32_to_float16 == b.relax_computation_float32_to_float16
    assert a.extension_name_to_prefix == b.extension_name_to_prefix
    assert [p.size for p in a.pools] == [p.size for p in b.pools]
    for pa, pb in zip(a.pools, b.pools, strict=True):
        assert bytes(pa.buffer) == bytes(pb.buffer)
