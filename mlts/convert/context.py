"""Conversion state: ONNX names bound to constants or NN operands, and the NCHW/NHWC layout rules.

Every rank-4 tensor has an ONNX (NCHW) shape. Its NN operand holds it either
in ONNX order (`nhwc=False`) or transposed to NHWC (`nhwc=True`, the layout the
NNAPI kernels use). A tensor is converted between the two at most once; the
other form is cached.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace

import numpy as np
from onnx import NodeProto

from mlts.convert.errors import ConversionError
from mlts.convert.qflow import EXACT, out_quant, quant_of
from mlts.convert.quant import QConst, QParams
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType, OperationType

# NN dims of an NHWC operand are the ONNX dims taken in this order.
TO_NHWC = (0, 2, 3, 1)
# Position in an NHWC operand of each ONNX axis.
NHWC_AXIS = (0, 3, 1, 2)
FLOAT_TYPES = (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16)
# Graph inputs of at most this many values are configuration a refusal may suggest fixing (--input-value).
SMALL_INPUT = 16


def same_order(shape: Sequence[int]) -> bool:
    """NCHW and NHWC hold a rank-4 tensor's elements in the same order (C == 1 or H*W == 1)."""
    return len(shape) == 4 and (shape[1] == 1 or shape[2] * shape[3] == 1)


@dataclass(frozen=True, slots=True)
class Tensor:
    """A runtime value: NN operand `operand` holding the ONNX tensor of `shape`, NHWC if `nhwc`.

    `quant` is set when the operand is 8-bit quantized (the ONNX name may be
    the float value that a DequantizeLinear would give: same operand).
    """

    operand: int
    shape: tuple[int, ...]
    nhwc: bool = False
    quant: QParams | None = None
    # The operand type when not quantized: TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT32 or TENSOR_BOOL8.
    elem: OperandType = OperandType.TENSOR_FLOAT32

    @property
    def is_float(self) -> bool:
        return self.quant is None and self.elem in FLOAT_TYPES

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nn_shape(self) -> tuple[int, ...]:
        """The operand's dims: NHWC order when `nhwc`; a rank-0 ONNX value is held in a [1] operand."""
        return tuple(self.shape[i] for i in TO_NHWC) if self.nhwc else (self.shape or (1,))

    def nn_axis(self, axis: int) -> int:
        """The NN operand axis holding ONNX axis `axis` (already normalised)."""
        return NHWC_AXIS[axis] if self.nhwc else axis


def nn_dims(shape: Sequence[int], nhwc: bool) -> tuple[int, ...]:
    return tuple(shape[i] for i in TO_NHWC) if nhwc and len(shape) == 4 else (tuple(shape) or (1,))


def _inserted_axes(src: Sequence[int], dst: Sequence[int]) -> list[int] | None:
    """The axes (in increasing order, as positions in `dst`) at which `dst` adds unit axes to `src`, or None
    when `dst` is not `src` with unit axes inserted."""
    if len(dst) <= len(src):
        return None
    axes, i = [], 0
    for j, d in enumerate(dst):
        if i < len(src) and d == src[i]:
            i += 1
        elif d == 1:
            axes.append(j)
        else:
            return None
    return axes if i == len(src) else None


def node_label(node) -> str:
    """How an ONNX node is named where the converter's operations point back at it: its name, or its
    first output's when it has none (what onnxruntime names an unnamed node after is not stable)."""
    return node.name or (node.output[0] if node.output else node.op_type)


def where(node: NodeProto) -> str:
    """`Conv node 'conv_1'`, or `Conv node #3 (output 'y')` for a node without a name: how messages name a node."""
    if node.name:
        return f"{node.op_type} node '{node.name}'"
    index = _NODE_INDEX.get({}).get(_node_key(node))
    out = f"output '{node.output[0]}'" if node.output else "no outputs"
    return f"{node.op_type} node #{index} ({out})" if index is not None else f"{node.op_type} node ({out})"


# Position in the model as given of every node being converted (set by the converter, per thread),
# for where(); keyed by op type and first output, which the converter's own rewriting keeps.
_NODE_INDEX: ContextVar[dict[object, int]] = ContextVar("mlts_convert_node_index")


def _node_key(node: NodeProto) -> object:
    return (node.op_type, node.output[0]) if node.output and node.output[0] else id(node)


def index_nodes(nodes: Sequence[NodeProto]) -> Token:
    """Remember each node's position in its graph so messages can name nodes without a name; the token
    restores the previous index (a branch converted inside a graph has its own)."""
    return _NODE_INDEX.set({_node_key(n): i for i, n in enumerate(nodes)})


def restore_index(token: Token) -> None:
    _NODE_INDEX.reset(token)


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
        # The node making each value, and the graph inputs fed at run time (for refusals' suggestions).
        self.producers: dict[str, NodeProto] = {}
        self.graph_inputs: list[str] = []
        # The vendor extensions the target driver declares (names); see mlts.convert.ops.extension.
        self.extensions: frozenset[str] = frozenset()
        self.tensors: dict[str, Tensor] = {}
        # The other-layout copy of an operand, by (operand, ONNX shape, layout): aliases share it.
        self._other_layout: dict[tuple[int, tuple[int, ...], bool], Tensor] = {}
        self._const_operands: dict[tuple[str, bool, OperandType], int] = {}
        self.absorbed: set[int] = set()
        self.counts: Counter[str] = Counter()
        # Quantized constants: DequantizeLinear outputs of initializers, by ONNX name.
        self.qconsts: dict[str, QConst] = {}
        self.input_operands: set[int] = set()
        # Rank-0 graph inputs held as NNAPI scalar model inputs (every reader takes a scalar), by name.
        self.scalar_inputs: dict[str, int] = {}
        # The node being converted (named by messages raised below the handlers) and every emitted operation.
        self.node: NodeProto | None = None
        self.emitted: list[tuple[OperationType, tuple[int, ...], tuple[int, ...]]] = []
        self._quant_cache: dict[str, QParams | None] = {}
        # For an operand made by RESHAPE in reshaped(): the tensor at the start of its chain of reshapes.
        self._reshape_origin: dict[int, Tensor] = {}

    # ------------------------------------------------------------ lookups

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name)

    def input(self, node: NodeProto, index: int) -> str | None:
        """Name of input `index`, or None when absent or left empty (optional inputs)."""
        return node.input[index] if index < len(node.input) and node.input[index] else None

    def _named_input(self, node: NodeProto, index: int, what: str, required: bool) -> str | None:
        """Name of input `index`; ConversionError when it is missing but `required`."""
        name = self.input(node, index)
        if name is None and required:
            raise ConversionError(f"{where(node)} has no {what} (input {index})")
        return name

    def const_input(self, node: NodeProto, index: int, what: str, required: bool = True) -> np.ndarray | None:
        """A constant input; ConversionError if it is computed at run time (or missing when required)."""
        name = self._named_input(node, index, what, required)
        if name is None:
            return None
        if name in self.qconsts:
            raise ConversionError(
                f"{where(node)}: {what} '{name}' is quantized (DequantizeLinear of a constant) but the node "
                f"computes in float32 (its data input '{node.input[0]}' is not quantized); mixing is not supported"
            )
        if name not in self.consts:
            t = self.tensors.get(name)
            if t is not None and t.operand in self.input_operands:
                hint = (
                    f": fix its value with --input-value {name}=V (input_values)"
                    if math.prod(t.shape) <= SMALL_INPUT
                    else ""
                )
                raise ConversionError(
                    f"{where(node)}: {what} '{name}' is a graph input, fed at run time; the converter needs "
                    f"{what} as a constant fixed in the model (an initializer){hint}"
                )
            raise ConversionError(
                f"{where(node)}: {what} '{name}' is computed at run time; only constant {what} values are "
                f"supported{self.suggestion(name)}"
            )
        return self.consts[name]

    def qconst_input(self, node: NodeProto, index: int, what: str, required: bool = True) -> QConst | None:
        """A quantized constant input (DequantizeLinear of an initializer) of a quantized node."""
        name = self._named_input(node, index, what, required)
        if name is None:
            return None
        if name in self.qconsts:
            return self.qconsts[name]
        got = f"a {self.consts[name].dtype} constant" if name in self.consts else "computed at run time"
        raise ConversionError(
            f"{where(node)}: {what} '{name}' is {got}; a quantized {node.op_type} needs its {what} "
            f"from a DequantizeLinear of a constant"
        )

    def real_const_input(self, node: NodeProto, index: int, what: str) -> np.ndarray | None:
        """An optional constant parameter as real values (a quantized constant dequantized).

        For bounds and fill values read at conversion time, never for weights.
        """
        name = self.input(node, index)
        if name is not None and name in self.qconsts:
            return self.qconsts[name].real()
        return self.const_input(node, index, what, required=False)

    def quantized(self, name: str) -> bool:
        """`name` is a quantized constant or a runtime tensor held in an 8-bit quantized operand."""
        return name in self.qconsts or (name in self.tensors and self.tensors[name].quant is not None)

    def quant_of(self, name: str) -> QParams | None:
        """The QParams of the QuantizeLinear nodes that alone read float tensor `name`, or None."""
        if name not in self._quant_cache:
            self._quant_cache[name] = quant_of(self, name)
        return self._quant_cache[name]

    def tensor(self, node: NodeProto, index: int = 0) -> Tensor:
        """The runtime tensor of input `index` (constants are added as operands in ONNX order)."""
        name = self.input(node, index)
        if name is None:
            raise ConversionError(f"{where(node)} has no input {index}")
        if name in self.tensors:
            return self.tensors[name]
        if name in self.consts or name in self.qconsts:
            return self.in_layout(name, False)
        raise ConversionError(f"{where(node)}: input '{name}' is not produced by any converted node")

    def shape_of(self, name: str, node: NodeProto | None = None) -> tuple[int, ...]:
        """The static ONNX shape of `name` (from constants, converted tensors or shape inference)."""
        if name in self.consts:
            return tuple(self.consts[name].shape)
        if name in self.qconsts:
            return tuple(self.qconsts[name].values.shape)
        if name in self.tensors:
            return self.tensors[name].shape
        shape = self.shapes.get(name)
        if shape is None or any(d is None or d < 0 for d in shape):
            got = "nothing" if shape is None else str(["?" if d is None else d for d in shape])
            by = f" (output of {where(node)})" if node is not None else ""
            raise ConversionError(
                f"cannot determine the static shape of tensor '{name}'{by}: shape inference gave {got}"
                f"{self.suggestion(name)}"
            )
        return tuple(int(d) for d in shape)  # type: ignore[arg-type]

    def graph_inputs_of(self, name: str) -> list[str]:
        """The graph inputs (fed at run time) that value `name` is computed from, in graph order."""
        seen, stack, found = set(), [name], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in self.graph_inputs:
                found.add(n)
                continue
            node = self.producers.get(n)
            if node is not None:
                stack.extend(x for x in node.input if x)
        return [n for n in self.graph_inputs if n in found]

    def suggestion(self, name: str) -> str:
        """ "; it is computed from graph input 'sr': fixing its value (--input-value sr=V) ..." naming the small
        (configuration-sized) graph inputs `name` depends on, or "" when there are none."""
        small = []
        for source in self.graph_inputs_of(name):
            t = self.tensors.get(source)
            size = math.prod(t.shape) if t is not None else None
            if size is not None and size <= SMALL_INPUT or source in self.scalar_inputs:
                small.append(source)
        if not small:
            return ""
        listed = ", ".join(f"'{s}'" for s in small)
        return (
            f"; it is computed from graph input {listed}: fixing {'its' if len(small) == 1 else 'their'} "
            f"value (--input-value NAME=V, input_values) makes it a constant"
        )

    def unique(self, base: str) -> str:
        """A tensor name derived from `base` that no ONNX or converter tensor uses."""
        name, n = base, 0
        while name in self.tensors or name in self.consts or name in self.qconsts or name in self.shapes:
            n += 1
            name = f"{base}#{n}"
        return name

    # ------------------------------------------------------------ producers

    def const_operand(self, arr: np.ndarray, nhwc: bool = False, quant: QParams | None = None) -> int:
        """`arr` as a float32 (or int32, or 8-bit `quant`) constant tensor operand, transposed to NHWC if asked."""
        arr = np.asarray(arr)
        if nhwc and arr.ndim == 4:
            arr = arr.transpose(TO_NHWC)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.size == 0:
            raise ConversionError(
                f"a constant of shape {list(arr.shape)} is empty; NN operands need >= 1 element"
            )
        if quant is not None:
            return self.builder.add_constant(arr, quant.type, quant.scale, quant.zero_point)
        if np.issubdtype(arr.dtype, np.floating):
            if self.float_elem() == OperandType.TENSOR_FLOAT16:
                return self.builder.add_constant(arr.astype(np.float16), OperandType.TENSOR_FLOAT16)
            return self.builder.add_constant(arr.astype(np.float32), OperandType.TENSOR_FLOAT32)
        if arr.dtype == np.bool_:
            return self.builder.add_constant(arr, OperandType.TENSOR_BOOL8)
        if np.issubdtype(arr.dtype, np.integer):
            return self.builder.add_constant(arr.astype(np.int32), OperandType.TENSOR_INT32)
        raise ConversionError(
            f"constant of dtype {arr.dtype} is not supported; expected a float or integer tensor"
        )

    def i32(self, value: int) -> int:
        return self.builder.add_int32(value)

    def f32(self, value: float) -> int:
        """A float scalar parameter: FLOAT16 for an operation on float16 tensors, else FLOAT32."""
        if self.float_elem() == OperandType.TENSOR_FLOAT16:
            return self.builder.add_scalar(float(value), OperandType.FLOAT16)
        return self.builder.add_float32(value)

    def float_elem(self) -> OperandType:
        """TENSOR_FLOAT16 when the node being converted reads a float16 runtime tensor, else TENSOR_FLOAT32."""
        node = self.node
        if node is not None:
            for name in node.input:
                t = self.tensors.get(name) if name else None
                if t is not None and t.quant is None and t.elem == OperandType.TENSOR_FLOAT16:
                    return OperandType.TENSOR_FLOAT16
        return OperandType.TENSOR_FLOAT32

    def flag(self, value: bool) -> int:
        return self.builder.add_bool(value)

    def ints(self, values: Sequence[int] | Sequence[Sequence[int]]) -> int:
        """A TENSOR_INT32 constant (1-D from a flat list; nested lists keep their shape)."""
        return self.builder.add_int32_tensor(values)

    def new_tensor(
        self,
        name: str,
        shape: Sequence[int],
        nhwc: bool = False,
        quant: QParams | None = None,
        elem: OperandType | None = None,
    ) -> Tensor:
        """A fresh temporary operand for ONNX tensor `name` (`elem`, the node's float type, or 8-bit with `quant`)."""
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape):
            raise ConversionError(f"tensor '{name}' has shape {list(shape)}; empty tensors are not supported")
        t = self.temp(shape, nhwc, quant, elem)
        self.bind(name, t)
        return t

    def temp(
        self,
        shape: Sequence[int],
        nhwc: bool = False,
        quant: QParams | None = None,
        elem: OperandType | None = None,
    ) -> Tensor:
        """A fresh unnamed temporary (`elem`, by default the node's float type, or 8-bit with `quant`)."""
        nhwc = nhwc and len(shape) == 4
        shape = tuple(int(d) for d in shape)
        dims = nn_dims(shape, nhwc)
        if quant is None:
            elem = self.float_elem() if elem is None else elem
            operand = self.builder.add_operand(elem, dims)
            return Tensor(operand, shape, nhwc, None, elem)
        operand = self.builder.add_operand(quant.type, dims, quant.scale, quant.zero_point)
        return Tensor(operand, shape, nhwc, quant)

    def bind(self, name: str, tensor: Tensor) -> None:
        self.tensors[name] = tensor

    def alias(self, out: str, src: str) -> None:
        """`out` is the same value as `src` (Identity, Dropout, folded QuantizeLinear/DequantizeLinear)."""
        if src in self.consts:
            self.consts[out] = self.consts[src]
        elif src in self.qconsts:
            self.qconsts[out] = self.qconsts[src]
        else:
            self.tensors[out] = self.tensors[src]

    def emit(self, op: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        node = self.node
        self.builder.add_operation(op, inputs, outputs, None if node is None else node_label(node))
        self.emitted.append((op, tuple(inputs), tuple(outputs)))
        self.counts[f"op:{op.name}"] += 1

    # ------------------------------------------------------------ layout

    def in_layout(self, name: str, nhwc: bool) -> Tensor:
        """Tensor `name` with its rank-4 operand in the asked layout (other ranks are unchanged)."""
        if name in self.consts or name in self.qconsts:
            qc = self.qconsts.get(name)
            arr = self.consts[name] if qc is None else qc.values
            quant = None if qc is None else self.qconst_params(qc)
            nhwc = nhwc and arr.ndim == 4
            key = (name, nhwc, self.float_elem())
            if key not in self._const_operands:
                self._const_operands[key] = self.const_operand(arr, nhwc, quant)
            operand = self._const_operands[key]
            elem = OperandType(self.builder.type_of(operand)) if quant is None else OperandType.TENSOR_FLOAT32
            return Tensor(operand, tuple(arr.shape), nhwc, quant, elem)
        t = self.tensors[name]
        if t.rank != 4 or t.nhwc == nhwc:
            return t
        layout_key = (t.operand, t.shape, t.nhwc)
        cached = self._other_layout.get(layout_key)
        if cached is None:
            cached = self.relayout(t, nhwc)
            self._other_layout[layout_key] = cached
            # Both operands hold the same values: moving the copy back gives the original.
            self._other_layout.setdefault((cached.operand, cached.shape, cached.nhwc), t)
        return cached

    def qconst_params(self, qc: QConst) -> QParams:
        quant = qc.per_tensor()
        if quant is None:
            what = "per axis" if qc.axis is not None else f"as {qc.values.dtype}"
            raise ConversionError(
                f"{where(self.node) if self.node else 'a node'} reads constant '{qc.name}' quantized {what} "
                f"as a tensor; only uint8/int8 per-tensor constants can be"
            )
        return quant

    def relayout(self, t: Tensor, nhwc: bool) -> Tensor:
        """A copy of rank-4 `t` in the other layout: a RESHAPE when the orders agree, else a TRANSPOSE."""
        if t.quant is None and t.elem not in FLOAT_TYPES:
            raise ConversionError(
                f"{where(self.node) if self.node else 'a node'} needs a {t.elem.name} tensor in the other layout; "
                f"NNAPI 1.3 moves only float and quantized tensors (TRANSPOSE, RESHAPE)"
            )
        out = self.temp(t.shape, nhwc, t.quant, t.elem)
        if same_order(t.shape):
            self.emit(OperationType.RESHAPE, [t.operand, self.ints(out.nn_shape)], [out.operand])
        else:
            perm = TO_NHWC if nhwc else NHWC_AXIS
            self.emit(OperationType.TRANSPOSE, [t.operand, self.ints(perm)], [out.operand])
            self.counts["layout_transpose"] += 1
        return out

    def reshaped(self, name: str, shape: Sequence[int], out_name: str | None = None) -> Tensor:
        """Tensor `name` reshaped (in ONNX element order) to `shape`; rank-4 results are NHWC when free.

        A quantized tensor keeps its parameters; a QuantizeLinear on `out_name` must repeat them.
        """
        shape = tuple(int(d) for d in shape)
        src = self.tensors.get(name)
        if src is None:
            src = self.in_layout(name, False)
        elif src.nhwc and not same_order(src.shape):
            src = self.in_layout(name, False)
        nhwc = same_order(shape)
        if src.quant is None and src.elem not in FLOAT_TYPES:
            if src.nhwc:
                src = self.in_layout(name, False)
            return self._reshaped_typed(src, shape, out_name)
        quant = src.quant if out_name is None else out_quant(self, out_name, src.quant, EXACT)
        origin = self._reshape_origin.get(src.operand, src)
        for held in (src, origin):
            if held.nn_shape == nn_dims(shape, nhwc) and held.quant == quant:
                # The operand already holds the result (a reshape of a reshape back to where it
                # started costs nothing); a RESHAPE left without readers is pruned at the end.
                out = replace(held, shape=shape, nhwc=nhwc)
                if out_name is not None:
                    self.bind(out_name, out)
                return out
        elem = src.elem if quant is None else None
        out = (
            self.new_tensor(out_name, shape, nhwc, quant, elem)
            if out_name
            else self.temp(shape, nhwc, quant, elem)
        )
        self.emit(OperationType.RESHAPE, [src.operand, self.ints(out.nn_shape)], [out.operand])
        self._reshape_origin[out.operand] = origin
        return out

    def _reshaped_typed(self, src: Tensor, shape: tuple[int, ...], out_name: str | None) -> Tensor:
        """An int32 or bool tensor reshaped (NNAPI 1.3's RESHAPE takes neither), exactly.

        Unit axes added: EXPAND_DIMS. Otherwise int32 goes through float32 in two exact halves
        (hi = v div 65536, rounding down, and lo = v - 65536 hi in [0, 65535]: each a float32 integer),
        each RESHAPEd and cast back, then 65536 hi + lo; bool goes as SELECT(b, 1, 0) and NOT_EQUAL 0.
        """
        if src.shape == shape:
            if out_name is not None:
                self.bind(out_name, src)
            return src
        elem = src.elem
        if elem not in (OperandType.TENSOR_INT32, OperandType.TENSOR_BOOL8):
            raise ConversionError(
                f"{where(self.node) if self.node else 'a node'} reshapes a {elem.name} tensor; the converter "
                f"reshapes float, quantized, int32 and bool tensors"
            )

        def made(dims: Sequence[int], kind: OperandType, last: bool) -> Tensor:
            if last and out_name is not None:
                return self.new_tensor(out_name, dims, False, None, kind)
            return self.temp(dims, False, None, kind)

        inserted = _inserted_axes(src.shape, shape)
        if inserted is not None and elem == OperandType.TENSOR_INT32:
            cur = src
            for k, axis in enumerate(inserted):
                dims = list(cur.shape)
                dims.insert(axis, 1)
                out = made(dims, elem, k == len(inserted) - 1)
                self.emit(OperationType.EXPAND_DIMS, [cur.operand, self.i32(axis)], [out.operand])
                cur = out
            return cur
        f32 = OperandType.TENSOR_FLOAT32
        none = self.i32(0)

        def via_float(t: Tensor) -> Tensor:
            flt = self.temp(t.shape, False, None, f32)
            self.emit(OperationType.CAST, [t.operand], [flt.operand])
            moved = self.temp(shape, False, None, f32)
            self.emit(OperationType.RESHAPE, [flt.operand, self.ints(shape)], [moved.operand])
            return moved

        if elem == OperandType.TENSOR_BOOL8:
            ones = self.builder.add_constant(np.ones(src.shape, np.float32), f32)
            zeros = self.builder.add_constant(np.zeros(src.shape, np.float32), f32)
            flt = self.temp(src.shape, False, None, f32)
            self.emit(OperationType.SELECT, [src.operand, ones, zeros], [flt.operand])
            moved = self.temp(shape, False, None, f32)
            self.emit(OperationType.RESHAPE, [flt.operand, self.ints(shape)], [moved.operand])
            out = made(shape, elem, True)
            self.emit(
                OperationType.NOT_EQUAL,
                [moved.operand, self.const_operand(np.zeros(1, np.float32))],
                [out.operand],
            )
            return out
        base = self.builder.add_constant(np.array([65536], np.int32), elem)
        hi = self.temp(src.shape, False, None, elem)
        self.emit(OperationType.DIV, [src.operand, base, none], [hi.operand])
        hi_full = self.temp(src.shape, False, None, elem)
        self.emit(OperationType.MUL, [hi.operand, base, none], [hi_full.operand])
        lo = self.temp(src.shape, False, None, elem)
        self.emit(OperationType.SUB, [src.operand, hi_full.operand, none], [lo.operand])
        parts = []
        for part in (hi, lo):
            back = self.temp(shape, False, None, elem)
            self.emit(OperationType.CAST, [via_float(part).operand], [back.operand])
            parts.append(back)
        scaled = self.temp(shape, False, None, elem)
        self.emit(OperationType.MUL, [parts[0].operand, base, none], [scaled.operand])
        out = made(shape, elem, True)
        self.emit(OperationType.ADD, [scaled.operand, parts[1].operand, none], [out.operand])
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
