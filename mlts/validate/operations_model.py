"""Operation cases as editable operand lists: taken apart from the probe models, rebuilt with ModelBuilder.

A case starts from the signature table's one-operation probe model
(`mlts.hal.opprobe`), which is valid by construction for every operation and
key type. `take_apart` turns it into `Slot`s (type, dimensions, quantisation,
kind and value of every operation input and output) so a case can change
them — random weights, the NCHW layout, outputs of unknown shape, relaxed
float32 — and `assemble` builds the Model again through ModelBuilder.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import DTYPE_NAME, SCALAR_TYPES, OperandLifeTime, OperandType
from mlts.hal.types import Model, Operand

L = OperandLifeTime

#: Input position of the BOOL layout flag (true: NCHW) of the operations whose layout the suite varies.
LAYOUT_INPUT = {
    "CONV_2D": 10,
    "DEPTHWISE_CONV_2D": 11,
    "GROUPED_CONV_2D": 11,
    "TRANSPOSE_CONV_2D": 10,
    "AVERAGE_POOL_2D": 10,
    "MAX_POOL_2D": 10,
    "L2_POOL_2D": 10,
    "DEPTH_TO_SPACE": 2,
    "SPACE_TO_DEPTH": 2,
    "BATCH_TO_SPACE_ND": 2,
    "SPACE_TO_BATCH_ND": 3,
    "RESIZE_BILINEAR": 3,
    "RESIZE_NEAREST_NEIGHBOR": 3,
    "INSTANCE_NORMALIZATION": 4,
}


@dataclass(frozen=True)
class Slot:
    """One operand of the case's operation: "input" (a model input), "const", "omit" or "output"."""

    kind: str
    type: int
    dims: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    value: Any = None  # constants: a NumPy array (or a 0-d array for scalars)
    extra: Any = None  # per-channel quantisation parameters

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(DTYPE_NAME[OperandType(self.type)])


@dataclass(frozen=True)
class OpModel:
    """An operation with its input and output slots, and whether float32 may be relaxed to float16."""

    op: int
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    relax: bool = False

    def with_input(self, pos: int, slot: Slot) -> OpModel:
        items = list(self.inputs)
        if pos == len(items):
            items.append(slot)
        else:
            items[pos] = slot
        return replace(self, inputs=tuple(items))

    def with_output(self, pos: int, slot: Slot) -> OpModel:
        items = list(self.outputs)
        items[pos] = slot
        return replace(self, outputs=tuple(items))


def _constant(model: Model, operand: Operand) -> np.ndarray:
    dtype = np.dtype(DTYPE_NAME[OperandType(operand.type)])
    loc = operand.location
    if operand.lifetime == L.CONSTANT_COPY:
        raw = model.operand_values[loc.offset : loc.offset + loc.length]
    else:
        raw = bytes(model.pools[loc.pool_index].buffer[loc.offset : loc.offset + loc.length])
    return np.frombuffer(raw, dtype).reshape(operand.dimensions).copy()


def _slot(model: Model, operand: Operand, output: bool) -> Slot:
    if output:
        kind, value = "output", None
    elif operand.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
        kind, value = "const", _constant(model, operand)
    elif operand.lifetime == L.NO_VALUE:
        kind, value = "omit", None
    else:
        kind, value = "input", None
    return Slot(
        kind,
        int(operand.type),
        tuple(operand.dimensions),
        float(operand.scale),
        int(operand.zero_point),
        value,
        operand.extra_params,
    )


def take_apart(model: Model) -> OpModel:
    """The slots of a one-operation model (a probe model)."""
    sub = model.main
    if len(sub.operations) != 1:
        raise ValueError(f"expected a one-operation model, got {len(sub.operations)} operations")
    op = sub.operations[0]
    ins = tuple(_slot(model, sub.operands[i], False) for i in op.inputs)
    outs = tuple(_slot(model, sub.operands[i], True) for i in op.outputs)
    return OpModel(op.type, ins, outs, model.relax_computation_float32_to_float16)


def assemble(case: OpModel, unknown_outputs: bool = False) -> Model:
    """The Model of `case`; `unknown_outputs` declares every tensor output with unknown (0) dimensions."""
    b = ModelBuilder()
    ins = []
    for s in case.inputs:
        if s.kind == "input":
            ins.append(b.add_input(s.type, s.dims, s.scale, s.zero_point))
        elif s.kind == "omit":
            ins.append(b.add_omitted(s.type, (), s.scale, s.zero_point, s.extra))
        elif s.type in SCALAR_TYPES:
            ins.append(b.add_scalar(np.asarray(s.value).item(), s.type))
        else:
            ins.append(b.add_constant(s.value, s.type, s.scale, s.zero_point, extra_params=s.extra))
    outs = []
    for s in case.outputs:
        dims = s.dims
        if unknown_outputs and s.type not in SCALAR_TYPES:
            dims = (0,) * len(dims)
        outs.append(b.add_operand(s.type, dims, s.scale, s.zero_point))
    b.add_operation(case.op, ins, outs)
    b.mark_outputs(outs)
    return b.build(relax=case.relax)


def nchw_dims(dims: tuple[int, ...]) -> tuple[int, ...]:
    n, h, w, c = dims
    return (n, c, h, w)


def to_nchw(case: OpModel, name: str) -> OpModel | None:
    """`case` with its layout flag set to NCHW (input 0 and output 0 transposed), or None if it has none."""
    pos = LAYOUT_INPUT.get(name)
    if pos is None or len(case.inputs) < pos or len(case.inputs[0].dims) != 4:
        return None
    flag = Slot("const", int(OperandType.BOOL), (), value=np.asarray(True))
    if pos < len(case.inputs) and case.inputs[pos].type != OperandType.BOOL:
        return None
    out = case.with_input(pos, flag)
    out = out.with_input(0, replace(case.inputs[0], dims=nchw_dims(case.inputs[0].dims)))
    if len(case.outputs[0].dims) == 4:
        out = out.with_output(0, replace(case.outputs[0], dims=nchw_dims(case.outputs[0].dims)))
    return out
