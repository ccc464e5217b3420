"""Fold everything an ONNX graph computes from what is known at conversion, before it is converted.

Once the input shapes (and fixed input values) are set, exported graphs still compute their
reshape targets, pad widths, resize sizes and branch conditions at run time: Shape -> Gather ->
Unsqueeze -> Concat -> Reshape, Size -> Equal -> If, ConstantOfShape, Range, Expand, ... Their
values are fixed once the shapes are. This pass repeats, until nothing changes:

1. ONNX shape inference with data propagation (onnx.shape_inference, `data_prop=True`), so every
   tensor whose shape follows from the known ones gets it;
2. in graph order: Shape and Size of a tensor of static shape become constants; a node whose
   inputs (and the outer values its subgraphs read) are all constants is evaluated by
   onnx.reference (ONNX's own reference implementation, in the op's semantics: int64 shapes,
   negative indices, Slice's clamping, ...); an If whose condition is a constant is replaced by
   the nodes of the branch it takes, which then fold in turn.

Folded values become initializers; nodes nobody reads any more are dropped. What is left computes
from run-time data only. (docs/onnx-converter.md says why this, and not onnxsim, onnxslim or
onnxoptimizer.)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, helper, numpy_helper

from mlts.convert.context import where
from mlts.convert.errors import ConversionError
from mlts.convert.fold import NONDETERMINISTIC, fold_node, reads, subgraphs

# Folded values larger than this many elements stay computed (a constant is held in the model).
MAX_FOLDED_ELEMENTS = 1 << 26
# Rounds of inference and folding; each round folds every chain it can, so few are ever needed.
MAX_ROUNDS = 64


def _top_names(graph: GraphProto) -> set[str]:
    """Every value name `graph` itself defines or reads (not those local to its subgraphs)."""
    names = (
        {i.name for i in graph.input} | {i.name for i in graph.initializer} | {o.name for o in graph.output}
    )
    for n in graph.node:
        names.update(x for x in n.input if x)
        names.update(x for x in n.output if x)
    return names


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    g = model.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            continue
        dims = tt.shape.dim
        if all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
            shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def _rename(graph: GraphProto, names: dict[str, str]) -> None:
    """Rename every use and definition of `names` in `graph` and its nested graphs (in place)."""
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x in names:
                n.input[i] = names[x]
        for i, x in enumerate(n.output):
            if x in names:
                n.output[i] = names[x]
        for g in subgraphs(n):
            _rename(g, names)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.name in names:
            vi.name = names[vi.name]
    for init in graph.initializer:
        if init.name in names:
            init.name = names[init.name]


class _Folder:
    """One graph's constants and the rewriting of its node list."""

    def __init__(self, model: onnx.ModelProto, opset: int, keep: Iterable[str]) -> None:
        self.model = model
        self.graph = model.graph
        self.opset = opset
        self.consts: dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in self.graph.initializer
        }
        self.keep = set(keep)  # names that must stay values of the graph (its outputs)
        self.used_names = _top_names(self.graph)
        self.folded = 0
        self.inlined = 0

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.used_names:
            k += 1
            name = f"{base}#{k}"
        self.used_names.add(name)
        return name

    def run_round(self, shapes: dict[str, tuple[int, ...]]) -> bool:
        """One pass over the nodes in order; True when anything was folded or inlined."""
        changed = False
        pending = list(reversed(self.graph.node))  # a stack: the next node last
        out: list[NodeProto] = []
        while pending:
            node = pending.pop()
            if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input[0] in self.consts:
                pending.extend(reversed(self._inline_if(node)))
                changed = True
                continue
            values = self._fold(node, shapes)
            if values is None:
                out.append(node)
                continue
            self.consts.update(values)
            self.folded += 1
            changed = True
        if changed:
            del self.graph.node[:]
            self.graph.node.extend(out)
        return changed

    def _fold(self, node: NodeProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray] | None:
        """The node's output values when they are known now, else None."""
        if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC:
            return None
        if node.op_type in ("Shape", "Size") and node.input and node.input[0] in shapes:
            return {node.output[0]: _shape_value(node, shapes[node.input[0]])}
        if node.op_type == "DequantizeLinear":
            return None  # a quantized constant stays quantized (see ops/qdq.py)
        read = reads(node)
        if not all(n in self.consts for n in read):
            return None
        if node.op_type == "Constant" and not node.input:
            value = _constant_value(node)
            if value is not None:
                return value
        values = fold_node(node, self.consts, self.opset, extra=[n for n in read if n not in node.input])
        if any(v.size > MAX_FOLDED_ELEMENTS or v.dtype.kind not in "biufc" for v in values.values()):
            return None
        return values

    def _inline_if(self, node: NodeProto) -> list[NodeProto]:
        """The nodes of the branch a constant-condition If takes, writing the If's outputs."""
        cond = np.asarray(self.consts[node.input[0]])
        if cond.size != 1:
            raise ConversionError(
                f"{where(node)}: the condition '{node.input[0]}' has {cond.size} values; If needs exactly one"
            )
        name = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
        branch = next((a.g for a in node.attribute if a.name == name), None)
        if branch is None:
            raise ConversionError(f"{where(node)}: attribute '{name}' (a graph) is missing")
        body = GraphProto()
        body.CopyFrom(branch)
        if len(body.output) != len(node.output):
            raise ConversionError(
                f"{where(node)}: branch '{name}' has {len(body.output)} outputs; the If has {len(node.output)}"
            )
        # Names the branch defines: renamed when the outer graph (or another inlined branch) uses them.
        defined = [i.name for i in body.initializer] + [o for n in body.node for o in n.output if o]
        produced = {o for n in body.node for o in n.output if o}
        outputs = [o.name for o in body.output]
        names: dict[str, str] = {}
        for k, (inner, outer) in enumerate(zip(outputs, node.output, strict=True)):
            if inner in produced and inner not in names and outer and outputs.index(inner) == k:
                names[inner] = outer
        for d in defined:
            if d not in names:
                names[d] = self.fresh(d) if d in self.used_names else d
                self.used_names.add(names[d])
        _rename(body, names)
        for init in body.initializer:
            self.consts[init.name] = numpy_helper.to_array(init)
        nodes = list(body.node)
        for inner, outer in zip(outputs, node.output, strict=True):
            src = names.get(inner, inner)
            if outer and src != outer:
                nodes.append(
                    helper.make_node("Identity", [src], [outer], name=self.fresh(f"{outer}/from_branch"))
                )
        self.inlined += 1
        return nodes

    def finish(self) -> None:
        """Write the constants the remaining nodes (and outputs) read as initializers; drop dead nodes."""
        g = self.graph
        needed = set(self.keep)
        live = []
        for node in reversed(g.node):
            if any(o in needed for o in node.output if o):
                live.append(node)
                needed.update(reads(node))
        live.reverse()
        del g.node[:]
        g.node.extend(live)
        inputs = {i.name for i in g.input}
        kept = [i for i in g.initializer if i.name in needed or i.name in inputs]
        have = {i.name for i in kept}
        del g.initializer[:]
        g.initializer.extend(kept)
        for name in sorted(needed - have):
            if name in self.consts and name not in inputs:
                g.initializer.append(numpy_helper.from_array(np.asarray(self.consts[name]), name))


def _shape_value(node: NodeProto, dims: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.asarray(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    rank = len(dims)
    start = int(a.get("start", 0))
    end = int(a.get("end", rank))
    # Opset 15: negative start/end count from the back; both clamp to [0, rank].
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.asarray(dims[start:end], dtype=np.int64)


def _constant_value(node: NodeProto) -> dict[str, np.ndarray] | None:
    a = node.attribute[0] if len(node.attribute) == 1 else None
    if a is None or a.name != "value" or a.type != AttributeProto.TENSOR or a.t.data_location:
        return None  # value_float, value_ints, sparse_value, external data: onnx.reference evaluates those
    return {node.output[0]: numpy_helper.to_array(a.t)}


def simplify(model: onnx.ModelProto, opset: int, infer) -> list[str]:  # type: ignore[no-untyped-def]
    """Fold `model` in place (see the module doc); `infer` is the shape inference to run. Returns notes."""
    folder = _Folder(model, opset, [o.name for o in model.graph.output])
    for _ in range(MAX_ROUNDS):
        inferred = infer(model)
        if not folder.run_round(_static_shapes(inferred)):
            break
        folder.finish()
    folder.finish()
    notes = []
    if folder.folded:
        notes.append(f"folded {folder.folded} nodes computed from constants and static shapes")
    if folder.inlined:
        notes.append(f"inlined {folder.inlined} If nodes whose condition is known at conversion")
    return notes
