"""Conversion state: ONNX names bound to constants or NN operands, and the NCHW/NHWC layout rules.

Every rank-4 tensor has an ONNX (NCHW) shape. Its NN operand holds it either
in ONNX order (`nhwc=False`) or transposed to NHWC (`nhwc=True`, the layout the
NNAPI kernels use). A tensor is converted between the two at most once; the
other form is cached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto

from mlts.convert.errors import ConversionError
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType

# NN dims of an NHWC operand are the ONNX dims taken in this order.
TO_NHWC = (0, 2, 3, 1)
# Position in an NHWC operand of each ONNX axis.
NHWC_AXIS = (0, 3, 1, 2)


def same_order(shape: Sequence[int]) -> bool:
    """NCHW and NHWC hold a rank-4 tensor's elements in the same order (C == 1 or H*W == 1)."""
    return len(shape) == 4 and (shape[1] == 1 or shape[2] * shape[3] == 1)


@dataclass(frozen=True, slots=True)
class Tensor:
    """A runtime value: NN operand `operand` holding the ONNX tensor of `shape`, NHWC if `nhwc`."""

    operand: int
    shape: tuple[int, ...]
    nhwc: bool = False

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nn_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[i] for i in TO_NHWC) if self.nhwc else self.shape

    def nn_axis(self, axis: int) -> int:
        """The NN operand axis holding ONNX axis `axis` (already normalised)."""
        return NHWC_AXIS[axis] if self.nhwc else axis


def nn_dims(shape: Sequence[int], nhwc: bool) -> tuple[int, ...]:
    return tuple(shape[i] for i in TO_NHWC) if nhwc and len(shape) == 4 else tuple(shape)


def where(node: NodeProto) -> str:
    """`Conv node 'conv_1'`: how messages name a node."""
    return f"{node.op_type} node '{node.name or node.output[0]}'"


class Context:
    """What the op handlers read and write while one graph is converted."""

    def __init__(
        self,
        builder: ModelBuilder,
        opset: int,
        shapes: dict[str, tuple[int | None, ...]],
        consumers: dict[str, list[NodeProto]],
        graph_outputs: set[str],
    ) -> None:
        self.builder = builder
        self.opset = opset
        self.shapes = shapes
        self.consumers = consumers
        self.graph_outputs = graph_outputs
        self.consts: dict[str, np.ndarray] = {}
        self.tensors: dict[str, Tensor] = {}
        self._other_layout: dict[str, Tensor] = {}
        self._const_operands: dict[tuple[str, bool], int] = {}
        self.absorbed: set[int] = set()
        self.counts: Counter[str] = Counter()

    # ------------------------------------------------------------ lookups

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name)

    def input(self, node: NodeProto, index: int) -> str | None:
        """Name of input `index`, or None when absent or left empty (optional inputs)."""
        return node.input[index] if index < len(node.input) and node.input[index] else None

    def const_input(self, node: NodeProto, index: int, what: str, required: bool = True) -> np.ndarray | None:
        """A constant input; ConversionError if it is computed at run time (or missing when required)."""
        name = self.input(node, index)
        if name is None:
            if required:
                raise ConversionError(f"{where(node)} has no {what} (input {index})")
            return None
        if name not in self.consts:
            raise ConversionError(
                f"{where(node)}: {what} '{name}' is computed at run time; only constant {what} values are supported"
            )
        return self.consts[name]

    def tensor(self, node: NodeProto, index: int = 0) -> Tensor:
        """The runtime tensor of input `index` (constants are added as operands in ONNX order)."""
        name = self.input(node, index)
        if name is None:
            raise ConversionError(f"{where(node)} has no input {index}")
        if name in self.tensors:
            return self.tensors[name]
        if name in self.consts:
            return self.in_layout(name, False)
        raise ConversionError(f"{where(node)}: input '{name}' is not produced by any converted node")

    def shape_of(self, name: str, node: NodeProto | None = None) -> tuple[int, ...]:
        """The static ONNX shape of `name` (from constants, converted tensors or shape inference)."""
        if name in self.consts:
            return tuple(self.consts[name].shape)
        if name in self.tensors:
            return self.tensors[name].shape
        shape = self.shapes.get(name)
        if shape is None or any(d is None or d < 0 for d in shape):
            got = "nothing" if shape is None else str(["?" if d is None else d for d in shape])
            by = f" (output of {where(node)})" if node is not None else ""
            raise ConversionError(
                f"cannot determine the static shape of tensor '{name}'{by}: shape inference gave {got}"
            )
        return tuple(int(d) for d in shape)  # type: ignore[arg-type]

    def unique(self, base: str) -> str:
        """A tensor name derived from `base` that no ONNX or converter tensor uses."""
        name, n = base, 0
        while name in self.tensors or name in self.consts or name in self.shapes:
            n += 1
            name = f"{base}#{n}"
        return name

    # ------------------------------------------------------------ producers

    def const_operand(self, arr: np.ndarray, nhwc: bool = False) -> int:
        """`arr` as a float32 (or int32) constant tensor operand, transposed to NHWC if asked."""
        arr = np.asarray(arr)
        if nhwc and arr.ndim == 4:
            arr = arr.transpose(TO_NHWC)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if np.issubdtype(arr.dtype, np.floating):
            return self.builder.add_constant(arr.astype(np.float32), OperandType.TENSOR_FLOAT32)
        if np.issubdtype(arr.dtype, np.integer):
            return self.builder.add_constant(arr.astype(np.int32), OperandType.TENSOR_INT32)
        raise ConversionError(
            f"constant of dtype {arr.dtype} is not supported; expected a float or integer tensor"
        )

    def i32(self, value: int) -> int:
        return self.builder.add_scalar(int(value), OperandType.INT32)

    def f32(self, value: float) -> int:
        return self.builder.add_scalar(float(value), OperandType.FLOAT32)

    def flag(self, value: bool) -> int:
        return self.builder.add_scalar(bool(value), OperandType.BOOL)

    def ints(self, values: Sequence[int]) -> int:
        """A TENSOR_INT32 constant (1-D from a flat list; nested lists keep their shape)."""
        arr = np.asarray(values, dtype=np.int32)
        return self.builder.add_constant(arr.reshape(1) if arr.ndim == 0 else arr, OperandType.TENSOR_INT32)

    def new_tensor(self, name: str, shape: Sequence[int], nhwc: bool = False) -> Tensor:
        """A fresh temporary operand for ONNX tensor `name`, bound to it."""
        shape = tuple(int(d) for d in shape)
        if not shape:
            raise ConversionError(f"tensor '{name}' is a rank-0 runtime value; NN tensors need rank >= 1")
        if any(d <= 0 for d in shape):
            raise ConversionError(f"tensor '{name}' has shape {list(shape)}; empty tensors are not supported")
        nhwc = nhwc and len(shape) == 4
        t = Tensor(self.builder.add_operand(OperandType.TENSOR_FLOAT32, nn_dims(shape, nhwc)), shape, nhwc)
        self.bind(name, t)
        return t

    def temp(self, shape: Sequence[int], nhwc: bool = False) -> Tensor:
        """A fresh unnamed temporary."""
        nhwc = nhwc and len(shape) == 4
        shape = tuple(int(d) for d in shape)
        return Tensor(self.builder.add_operand(OperandType.TENSOR_FLOAT32, nn_dims(shape, nhwc)), shape, nhwc)

    def bind(self, name: str, tensor: Tensor) -> None:
        self.tensors[name] = tensor

    def alias(self, out: str, src: str) -> None:
        """`out` is the same value as `src` (Identity, Dropout)."""
        if src in self.consts:
            self.consts[out] = self.consts[src]
        else:
            self.tensors[out] = self.tensors[src]
            if src in self._other_layout:
                self._other_layout[out] = self._other_layout[src]

    def emit(self, op: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.builder.add_operation(op, inputs, outputs)
        self.counts[f"op:{op.name}"] += 1

    # ------------------------------------------------------------ layout

    def in_layout(self, name: str, nhwc: bool) -> Tensor:
        """Tensor `name` with its rank-4 operand in the asked layout (other ranks are unchanged)."""
        if name in self.consts:
            arr = self.consts[name]
            nhwc = nhwc and arr.ndim == 4
            key = (name, nhwc)
            if key not in self._const_operands:
                self._const_operands[key] = self.const_operand(arr, nhwc)
            return Tensor(self._const_operands[key], tuple(arr.shape), nhwc)
        t = self.tensors[name]
        if t.rank != 4 or t.nhwc == nhwc:
            return t
        cached = self._other_layout.get(name)
        if cached is None:
            cached = self.relayout(t, nhwc)
            self._other_layout[name] = cached
        return cached

    def relayout(self, t: Tensor, nhwc: bool) -> Tensor:
        """A copy of rank-4 `t` in the other layout: a RESHAPE when the orders agree, else a TRANSPOSE."""
        out = self.temp(t.shape, nhwc)
        if same_order(t.shape):
            self.emit(OperationType.RESHAPE, [t.operand, self.ints(out.nn_shape)], [out.operand])
        else:
            perm = TO_NHWC if nhwc else NHWC_AXIS
            self.emit(OperationType.TRANSPOSE, [t.operand, self.ints(perm)], [out.operand])
            self.counts["layout_transpose"] += 1
        return out

    def reshaped(self, name: str, shape: Sequence[int], out_name: str | None = None) -> Tensor:
        """Tensor `name` reshaped (in ONNX element order) to `shape`; rank-4 results are NHWC when free."""
        shape = tuple(int(d) for d in shape)
        src = self.tensors.get(name)
        if src is None:
            src = self.in_layout(name, False)
        elif src.nhwc and not same_order(src.shape):
            src = self.in_layout(name, False)
        nhwc = same_order(shape)
        if out_name is not None and src.nn_shape == nn_dims(shape, nhwc):
            # Same NN dims: the operand already holds the result, no copy needed.
            out = Tensor(src.operand, shape, nhwc)
            self.bind(out_name, out)
            return out
        out = self.new_tensor(out_name, shape, nhwc) if out_name else self.temp(shape, nhwc)
        self.emit(OperationType.RESHAPE, [src.operand, self.ints(out.nn_shape)], [out.operand])
        return out

    # ------------------------------------------------------------ fusion

    def sole_consumer(self, name: str, op_types: set[str]) -> NodeProto | None:
        """The node reading `name` when it is its only reader, of one of `op_types`, and `name` is no graph output."""
        if name in self.graph_outputs:
            return None
        readers = self.consumers.get(name, [])
        if len(readers) != 1 or readers[0].op_type not in op_types or id(readers[0]) in self.absorbed:
            return None
        node = readers[0]
        if node.domain not in ("", "ai.onnx") or list(node.input).count(name) != 1:
            return None
        return node

    def absorb(self, node: NodeProto, what: str) -> None:
        """Mark `node` as folded into the node being converted; it will be skipped."""
        self.absorbed.add(id(node))
        self.counts[what] += 1

    def is_absorbed(self, node: NodeProto) -> bool:
        return id(node) in self.absorbed
