"""Hand-built HAL models for the runtime tests."""

from __future__ import annotations

import struct

from mlts.hal.enums import OperandLifeTime as L
from mlts.hal.enums import OperandType as T
from mlts.hal.enums import OperationType as O
from mlts.hal.types import DataLocation, Model, Operand, Operation, Subgraph


def add_model(
    dims: tuple[int, ...] = (2, 3),
    out_dims: tuple[int, ...] | None = None,
    dims_b: tuple[int, ...] | None = None,
    type: int = T.TENSOR_FLOAT32,
) -> Model:
    """out = a + b (no activation); `out_dims` may hold zeros (unknown), `dims_b` broadcasts."""
    out_dims = dims if out_dims is None else out_dims
    operands = (
        Operand(type, dims, 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(type, dims if dims_b is None else dims_b, 1, lifetime=L.SUBGRAPH_INPUT),
        Operand(T.INT32, (), 1, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 0, 4)),
        Operand(type, out_dims, 0, lifetime=L.SUBGRAPH_OUTPUT),
    )
    main = Subgraph(operands, (Operation(O.ADD, (0, 1, 2), (3,)),), (0, 1), (3,))
    return Model(main, operand_values=struct.pack("<i", 0))
