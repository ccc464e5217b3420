"""Rank-5 tensors held without their unit axes: NNAPI operations take rank <= 4.

Exported attention and channel-shuffle blocks pass through rank-5 tensors that have a unit axis,
e.g. Reshape [1, S, 3, H, D] -> Transpose [3, 1, H, S, D] -> Slice/Squeeze (q, k, v). Dropping unit
axes never changes the order of the elements, so such a tensor V can be computed as V' (V without
its unit axes, rank <= 4) by rewriting the nodes around it, in the ONNX graph before conversion:

- Reshape, Squeeze, Unsqueeze, Flatten: a Reshape to the target (itself held without unit axes);
- Transpose: the permutation restricted to the kept axes (unit axes go to unit axes);
- Slice, Gather, Split: the same selection on the kept axes, and a Reshape when the result gains
  unit axes of its own (a slice of one element);
- unary element-wise ops and binary ones with a one-element constant: unchanged, on V'.

A tensor is held this way only when every node that makes or reads it can be rewritten (and it is
not a graph output); anything else keeps its rank and is refused by the converter, naming the node.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import NodeProto, helper, numpy_helper

MAX_RANK = 4

_RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})
_UNARY = frozenset(
    {
        "Relu",
        "Sigmoid",
        "Tanh",
        "Exp",
        "Neg",
        "Abs",
        "Sqrt",
        "Identity",
        "Cast",
        "Erf",
        "Log",
        "Floor",
        "Ceil",
    }
)
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})


def _static(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes = {}
    g = model.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            dims = tt.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    for init in g.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], held: set[str]) -> None:
        self.model = model
        self.shapes = shapes
        self.held = held  # rank-5+ names computed without their unit axes
        self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.used = {i.name for i in model.graph.input} | set(self.consts)
        for n in model.graph.node:
            self.used.update(n.input)
            self.used.update(n.output)
        self.nodes: list[NodeProto] = []
        self.new_inits: list[onnx.TensorProto] = []

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}#{k}"
        self.used.add(name)
        return name

    def rep(self, name: str) -> str:
        return name + "/squeezed" if name in self.held else name

    def rep_shape(self, name: str) -> tuple[int, ...]:
        shape = self.shapes[name]
        return tuple(d for d in shape if d != 1) if name in self.held else shape

    def kept(self, name: str) -> list[int]:
        """Axes of `name` its operand holds."""
        shape = self.shapes[name]
        return [i for i, d in enumerate(shape) if d != 1] if name in self.held else list(range(len(shape)))

    def const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.new_inits.append(numpy_helper.from_array(value, name))
        self.consts[name] = value
        return name

    def add(self, op: str, inputs: Sequence[str], outputs: Sequence[str], **kw) -> None:  # type: ignore[no-untyped-def]
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), **kw))

    def reshape(self, src: str, dst: str, shape: Sequence[int], label: str) -> None:
        shape_name = self.const(f"{label}/shape", np.asarray(list(shape), np.int64))
        self.add("Reshape", [src, shape_name], [dst], name=self.fresh(label))

    def finish_output(self, natural: str, natural_shape: Sequence[int], out: str, label: str) -> None:
        """`natural` (the rewritten op's result) as output `out` in its held form."""
        want = self.rep_shape(out)
        if tuple(natural_shape) == want:
            self.nodes[-1].output[list(self.nodes[-1].output).index(natural)] = self.rep(out)
            return
        self.reshape(natural, self.rep(out), want, label + "/unit_axes")

    # ------------------------------------------------------------ per op

    def rewrite(self, node: NodeProto) -> bool:
        """Emit `node` rewritten on held tensors; False when it cannot be (the caller keeps it)."""
        op = node.op_type
        label = node.name or node.output[0]
        if op in _RESHAPES:
            self.reshape(
                self.rep(node.input[0]), self.rep(node.output[0]), self.rep_shape(node.output[0]), label
            )
            return True
        if op in _UNARY or op in _BINARY:
            ins = [self.rep(n) for n in node.input]
            out_shape = self.shapes[node.output[0]]
            for n in node.input:
                held_same = n in self.held and self.shapes[n] == out_shape
                if op in _BINARY and not held_same and not (n in self.consts and self.consts[n].size == 1):
                    return False
            new = helper.make_node(op, ins, [self.rep(node.output[0])], name=label)
            new.attribute.extend(node.attribute)
            self.nodes.append(new)
            return True
        if op == "Transpose":
            return self._transpose(node, label)
        if op == "Slice":
            return self._slice(node, label)
        if op == "Gather":
            return self._gather(node, label)
        if op == "Split":
            return self._split(node, label)
        return False

    def _transpose(self, node: NodeProto, label: str) -> bool:
        x = node.input[0]
        rank = len(self.shapes[x])
        perm = [a.ints for a in node.attribute if a.name == "perm"]
        order = list(perm[0]) if perm else list(range(rank - 1, -1, -1))
        kept = self.kept(x)
        pos = {a: i for i, a in enumerate(kept)}
        new_perm = [pos[a] for a in order if a in pos]
        natural = self.fresh(label + "/out")
        self.add("Transpose", [self.rep(x)], [natural], perm=new_perm, name=self.fresh(label))
        shape = [self.shapes[x][a] for a in order if a in pos]
        self.finish_output(natural, shape, node.output[0], label)
        return True

    def _axis_map(self, x: str) -> dict[int, int]:
        return {a: i for i, a in enumerate(self.kept(x))}

    def _slice(self, node: NodeProto, label: str) -> bool:
        x = node.input[0]
        shape = self.shapes[x]
        rank = len(shape)
        ins = list(node.input) + [""] * (5 - len(node.input))
        if len(node.input) < 3 or any(n and n not in self.consts for n in ins[1:5]):
            return False  # opset < 10 (attributes) or run-time bounds
        starts, ends = (self.consts[n].reshape(-1).astype(np.int64) for n in ins[1:3])
        axes = self.consts[ins[3]].reshape(-1).astype(np.int64) if ins[3] else np.arange(len(starts))
        steps = self.consts[ins[4]].reshape(-1).astype(np.int64) if ins[4] else np.ones(len(starts), np.int64)
        where = self._axis_map(x)
        keep: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        for s, e, raw, st in zip(starts.tolist(), ends.tolist(), axes.tolist(), steps.tolist(), strict=True):
            a = int(raw) + rank if raw < 0 else int(raw)
            if a not in where:
                if len(range(*slice(int(s), int(e), int(st)).indices(1))) != 1:
                    return False
                continue
            for lst, v in zip(keep, (s, e, where[a], st), strict=True):
                lst.append(int(v))
        if not keep[0]:
            natural = self.rep(x)
        else:
            names = [
                self.const(f"{label}/{k}", np.asarray(v, np.int64))
                for k, v in zip(("starts", "ends", "axes", "steps"), keep, strict=True)
            ]
            natural = self.fresh(label + "/out")
            self.add("Slice", [self.rep(x), *names], [natural], name=self.fresh(label))
        out_shape = self.shapes[node.output[0]]
        natural_shape = [out_shape[a] for a in self.kept(x)]
        if not keep[0]:
            self.reshape(natural, self.rep(node.output[0]), self.rep_shape(node.output[0]), label)
            return True
        self.finish_output(natural, natural_shape, node.output[0], label)
        return True

    def _gather(self, node: NodeProto, label: str) -> bool:
        x, idx = node.input[0], node.input[1]
        if idx in self.held:
            return False
        rank = len(self.shapes[x])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        axis = axis + rank if axis < 0 else axis
        where = self._axis_map(x)
        if axis not in where:
            return False
        natural = self.fresh(label + "/out")
        self.add("Gather", [self.rep(x), idx], [natural], axis=where[axis], name=self.fresh(label))
        held_shape = [self.shapes[x][a] for a in self.kept(x)]
        i = where[axis]
        natural_shape = held_shape[:i] + list(self.shapes[idx]) + held_shape[i + 1 :]
        self.finish_output(natural, natural_shape, node.output[0], label)
        return True

    def _split(self, node: NodeProto, label: str) -> bool:
        x = node.input[0]
        rank = len(self.shapes[x])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        axis = axis + rank if axis < 0 else axis
        where = self._axis_map(x)
        if axis not in where or any(o and o not in self.shapes for o in node.output):
            return False
        naturals = [self.fresh(label + f"/out{k}") for k in range(len(node.output))]
        new = helper.make_node("Split", [self.rep(x), *node.input[1:]], naturals, name=self.fresh(label))
        new.attribute.extend(a for a in node.attribute if a.name != "axis")
        new.attribute.append(helper.make_attribute("axis", where[axis]))
        self.nodes.append(new)
        held = self.kept(x)
        for natural, out in zip(naturals, node.output, strict=True):
            if not out:
                continue
            natural_shape = [self.shapes[out][a] for a in held]
            want = self.rep_shape(out)
            if tuple(natural_shape) == want:
                new.output[list(new.output).index(natural)] = self.rep(out)
            else:
                self.reshape(natural, self.rep(out), want, label + "/unit_axes")
        return True


def _candidates(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> set[str]:
    """Rank > 4 values that can be held without their unit axes (see the module doc)."""
    g = model.graph
    outputs = {o.name for o in g.output}
    producers = {o: n for n in g.node for o in n.output if o}
    readers: dict[str, list[NodeProto]] = {}
    for n in g.node:
        for x in n.input:
            readers.setdefault(x, []).append(n)
    ok_ops = _RESHAPES | _UNARY | _BINARY | {"Transpose", "Slice", "Gather", "Split"}
    found = set()
    for name, shape in shapes.items():
        if len(shape) <= MAX_RANK or sum(d != 1 for d in shape) > MAX_RANK or 0 in shape:
            continue
        if name in outputs or name not in producers or producers[name].op_type not in ok_ops:
            continue
        if all(r.op_type in ok_ops and r.domain in ("", "ai.onnx") for r in readers.get(name, [])):
            found.add(name)
    return found


def hold_without_unit_axes(model: onnx.ModelProto, inferred: onnx.ModelProto) -> list[str]:
    """Rewrite `model` in place so that rank-5+ values with unit axes are held without them; notes."""
    shapes = _static(inferred)
    held = _candidates(model, shapes)
    if not held:
        return []
    w = _Rewriter(model, shapes, held)
    rewritten = 0
    for node in model.graph.node:
        touches = any(x in held for x in [*node.input, *node.output])
        if touches and all(x in shapes for x in [*node.input, *node.output] if x) and w.rewrite(node):
            rewritten += 1
            continue
        # Kept as it is: it reads and writes the full-rank values (and is refused later, by name).
        for x in dict.fromkeys(node.input):
            if x in held:
                w.reshape(w.rep(x), x, shapes[x], x + "/full_rank")
        w.nodes.append(node)
        for x in node.output:
            if x in held:
                w.reshape(x, w.rep(x), w.rep_shape(x), x + "/held")
    del model.graph.node[:]
    model.graph.node.extend(w.nodes)
    model.graph.initializer.extend(w.new_inits)
    ranks = sorted({len(shapes[n]) for n in held})
    return [
        f"held {len(held)} rank-{'/'.join(map(str, ranks))} tensors without their unit axes "
        f"(rewrote {rewritten} nodes; NNAPI operations take rank <= {MAX_RANK})"
    ]
