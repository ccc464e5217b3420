"""The state of converting one TFLite subgraph into one NN model, and the helpers every mapping uses.

Tensors become operands the way TFLite's NNAPI delegate adds them at feature level 4 (NNAPI 1.3):
FLOAT32/FLOAT16 as TENSOR_FLOAT32/16, INT32 as TENSOR_INT32 (with its scale), BOOL as
TENSOR_BOOL8, UINT8 as TENSOR_QUANT8_ASYMM, INT8 as TENSOR_QUANT8_ASYMM_SIGNED, or
TENSOR_QUANT8_SYMM_PER_CHANNEL when the file gives one scale per channel, and TENSOR_QUANT8_SYMM
for the int8 weights of a hybrid operator (float input, 8-bit weights, dequantized in the graph).
Scales and zero points are the file's, unchanged; a zero scale becomes 1 as the delegate does
(NNAPI refuses scale 0 on 8-bit tensors). TFLite's rank-0 tensors are one-element [1] operands.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import schema
from mlts.convert.tflite.model import Operator, Subgraph, Tensor, TfliteModel
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType
from mlts.hal.types import ExtraParams, SymmPerChannelQuantParams

T = OperandType

# Flavours of one tensor's operand (the delegate's tensor flags).
PLAIN, SYMM, PER_CHANNEL, FLOAT = "plain", "symm", "per-channel", "float"


class Refusal(ConversionError):
    """A mapping refused the current operator; the converter adds the operator and subgraph to the message."""


@dataclass
class Session:
    """What the conversion of all subgraphs of one model shares."""

    model: TfliteModel
    extensions: frozenset[str] = frozenset()
    counts: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    # Subgraphs being converted (IF/WHILE reference others): a cycle would never end.
    stack: list[int] = field(default_factory=list)


class Graph:
    """One TFLite subgraph being converted into one ModelBuilder."""

    def __init__(self, session: Session, sg: Subgraph) -> None:
        self.session = session
        self.model = session.model
        self.sg = sg
        self.builder = ModelBuilder()
        self.operands: dict[tuple[int, str], int] = {}
        # Tensors whose value the conversion knows (constants, densified or fp16 weights made float32).
        self.values: dict[int, np.ndarray] = {}
        self.op: Operator | None = None
        self.state_inputs: list[tuple[int, int]] = []  # (variable tensor, the model input holding it)
        self.state_outputs: list[tuple[int, int]] = []  # (variable tensor, operand holding its next value)

    # ------------------------------------------------------------------ naming and refusing

    def refuse(self, reason: str) -> Refusal:
        """A refusal of the current operator (raise it)."""
        return Refusal(reason)

    def where(self, op: Operator | None = None) -> str:
        op = op or self.op
        if op is None:
            return self.sg.label()
        name = op.code.name if op.code.custom is None else f"custom operator '{op.code.custom}'"
        return f"{name} (operator #{op.index} of {self.sg.label()})"

    def tensor(self, index: int) -> Tensor:
        return self.sg.tensors[index]

    def input(self, k: int) -> int:
        """The tensor index of the current operator's input k; refused when absent."""
        op = self.op
        assert op is not None
        if k >= len(op.inputs) or op.inputs[k] < 0:
            raise self.refuse(f"input {k} is missing")
        return op.inputs[k]

    def has_input(self, k: int) -> bool:
        op = self.op
        assert op is not None
        return k < len(op.inputs) and op.inputs[k] >= 0

    def output(self, k: int = 0) -> int:
        op = self.op
        assert op is not None
        if k >= len(op.outputs):
            raise self.refuse(f"output {k} is missing")
        return op.outputs[k]

    def option(self, name: str, default=None):
        op = self.op
        assert op is not None
        return op.options.get(name, default)

    # ------------------------------------------------------------------ values

    def value(self, index: int) -> np.ndarray | None:
        """The value of a constant tensor (densified and fp16-dequantized where the graph did), else None."""
        if index in self.values:
            return self.values[index]
        t = self.tensor(index)
        if t.sparsity is not None and self.model.buffers[t.buffer] is not None:
            from mlts.convert.tflite.sparsity import densify

            stored = self.model.stored(self.sg, index)
            assert stored is not None
            self.values[index] = densify(t, stored, self.where())
            return self.values[index]
        v = self.model.constant(self.sg, index)
        if v is not None and not t.is_variable:
            self.values[index] = v
            return v
        return None

    def const(self, k: int, what: str) -> np.ndarray:
        """The value of the current operator's input k, refused when it is computed at run time."""
        index = self.input(k)
        v = self.value(index)
        if v is None:
            raise self.refuse(
                f"its {what} (input {k}, {self.tensor(index).describe()}) is computed at run time; "
                "NNAPI takes it as a constant"
            )
        return v

    def ints(self, k: int, what: str) -> list[int]:
        """A constant INT32 (or INT64 that fits) input as Python ints."""
        v = self.const(k, what)
        if v.dtype.kind not in "iu":
            raise self.refuse(f"its {what} is {v.dtype}, not an integer tensor")
        if v.dtype.itemsize > 4 and v.size and (v.min() < -(2**31) or v.max() >= 2**31):
            raise self.refuse(f"its {what} holds values outside int32, which NNAPI cannot represent")
        return [int(x) for x in v.reshape(-1)]

    # ------------------------------------------------------------------ operands

    def shape(self, index: int) -> tuple[int, ...]:
        """The NN operand shape of a tensor: its shape, [1] for a scalar."""
        s = self.tensor(index).shape
        return s if s else (1,)

    def operand_type(self, t: Tensor, flavour: str = PLAIN) -> tuple[int, float, int, ExtraParams]:
        """(operand type, scale, zero point, extra params) of tensor `t` as the delegate adds it."""
        q = t.quant
        code = t.type
        if code == schema.FLOAT32 or (code == schema.FLOAT16 and flavour == FLOAT):
            return T.TENSOR_FLOAT32, 0.0, 0, None
        if code == schema.FLOAT16:
            return T.TENSOR_FLOAT16, 0.0, 0, None
        if code == schema.BOOL:
            return T.TENSOR_BOOL8, 0.0, 0, None
        if code == schema.INT32:
            return T.TENSOR_INT32, (q.scale if q else 0.0), (q.zero_point if q else 0), None
        if code in (schema.UINT8, schema.INT8):
            if q is not None and (q.per_channel or flavour == PER_CHANNEL) and code == schema.INT8:
                if any(z != 0 for z in q.zero_points):
                    raise self.refuse(
                        f"{t.describe()} is quantized per channel with non-zero zero points; NNAPI's "
                        "per-channel tensors are symmetric"
                    )
                return T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 0.0, 0, SymmPerChannelQuantParams(q.scales, q.axis)
            if q is not None and q.per_channel:
                raise self.refuse(
                    f"{t.describe()} is UINT8 quantized per channel, which NNAPI has no type for"
                )
            scale = (q.scale if q else 0.0) or 1.0
            zp = q.zero_point if q else 0
            if flavour == SYMM:
                if zp != 0:
                    raise self.refuse(f"{t.describe()} has zero point {zp}; hybrid weights must be symmetric")
                return T.TENSOR_QUANT8_SYMM, scale, 0, None
            if code == schema.UINT8:
                return T.TENSOR_QUANT8_ASYMM, scale, zp, None
            return T.TENSOR_QUANT8_ASYMM_SIGNED, scale, zp, None
        if code == schema.INT16:
            scale = q.scale if q else 0.0
            if q is not None and q.zero_point != 0:
                raise self.refuse(
                    f"{t.describe()} has zero point {q.zero_point}; NNAPI's 16-bit tensors are symmetric"
                )
            return T.TENSOR_QUANT16_SYMM, scale, 0, None
        raise self.refuse(f"{t.describe()} is {t.type_name}, which no NNAPI operand type holds")

    def operand(self, index: int, flavour: str = PLAIN) -> int:
        """The operand of tensor `index`: a constant made on first use, or the operand an operator wrote."""
        key = (index, flavour)
        if key in self.operands:
            return self.operands[key]
        if (index, PLAIN) in self.operands and flavour == PLAIN:
            return self.operands[(index, PLAIN)]
        t = self.tensor(index)
        v = self.value(index)
        if v is None:
            if (index, PLAIN) in self.operands:
                raise self.refuse(f"{t.describe()} is computed at run time; this use needs it constant")
            raise self.refuse(f"it reads {t.describe()} before any operator writes it")
        kind, scale, zp, extra = self.operand_type(t, flavour)
        data = np.asarray(v).reshape(self.shape(index))
        if kind == T.TENSOR_QUANT8_SYMM and data.dtype == np.uint8:
            data = data.view(np.int8)  # legacy hybrid models store int8 weights as UINT8
        elif kind == T.TENSOR_FLOAT32 and data.dtype != np.float32:
            data = data.astype(np.float32)  # fp16 weights: exact
        operand = self.builder.add_constant(data, kind, scale, zp, extra)
        self.operands[key] = operand
        return operand

    def new_operand(self, index: int, flavour: str = PLAIN) -> int:
        """A new temporary for tensor `index`, which the current operator writes."""
        t = self.tensor(index)
        kind, scale, zp, extra = self.operand_type(t, flavour)
        operand = self.builder.add_operand(kind, self.shape(index), scale, zp, extra)
        self.operands[(index, flavour)] = operand
        return operand

    def temp(self, kind: int, shape: Sequence[int], scale: float = 0.0, zero_point: int = 0) -> int:
        """A temporary the mapping adds between operations (not a tensor of the file)."""
        return self.builder.add_operand(kind, tuple(shape), scale, zero_point)

    def int32(self, v: int) -> int:
        return self.builder.add_int32(int(v))

    def float32(self, v: float) -> int:
        return self.builder.add_float32(float(v))

    def bool(self, v: bool) -> int:
        return self.builder.add_bool(bool(v))

    def int32_vector(self, values: Iterable[int]) -> int:
        return self.builder.add_int32_tensor([int(v) for v in values])

    def omitted(self, kind: int = T.TENSOR_FLOAT32) -> int:
        return self.builder.add_omitted(kind)

    def emit(self, op_type: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        label = self.where() if self.op is not None else None
        self.builder.add_operation(op_type, inputs, outputs, origin=label)
        self.session.counts[f"op:{op_type.name}"] += 1
