"""Input shapes a user gives for a TFLite model's dynamic dimensions, and the shapes that follow from them.

A TFLite file stores every tensor's shape for the size it was exported with, and, for the dimensions
that may change, a `shape_signature` with -1 there (LiteRT's resize_tensor_input(strict=True)
accepts a new size only in those). `resize_inputs` checks the shapes given for the converted
subgraph's inputs against their signatures (a fixed dimension keeps its size), then walks the
operators in order and recomputes every tensor shape that depends on a changed one, with the rules
TFLite's kernels use to size their outputs. An operator whose outputs cannot follow (a RESHAPE to a
constant shape that no longer holds the values, a recurrent operator whose state keeps the file's
batch, control flow) is refused in one line naming it and why. The result is the model with those
shapes in place of the file's: the converter then maps it as it maps any file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mlts.convert.errors import ConversionError
from mlts.convert.tflite import schema
from mlts.convert.tflite.model import Operator, Subgraph, TfliteModel

Shape = tuple[int, ...]
#: The largest tensor (bytes) a new shape may give: NN operand sizes are 32-bit.
MAX_TENSOR_BYTES = (1 << 31) - 1


class _Cannot(Exception):
    """An operator whose output shapes cannot follow the new input shapes (the message says why)."""


def resize_inputs(
    model: TfliteModel, sg_index: int, inputs: Sequence[tuple[str, int]], shapes: Mapping[str, Sequence[int]]
) -> tuple[TfliteModel, dict[int, Shape]]:
    """(the model with subgraph `sg_index` resized, {input tensor: its new shape} for those that changed).

    `inputs` are the converted inputs as (name, tensor index); `shapes` maps some of those names to
    whole shapes. ConversionError for a name no input has, a rank or a fixed dimension that differs, or
    an operator that cannot follow.
    """
    sg = model.subgraphs[sg_index]
    by_name = {name: index for name, index in inputs}
    new: dict[int, Shape] = {}
    for name, dims in shapes.items():
        if name not in by_name:
            listed = ", ".join(repr(n) for n, _ in inputs) or "none"
            raise ConversionError(
                f"{model.label}: --input-shape {name}: the model has no input '{name}' (its inputs: {listed})"
            )
        index = by_name[name]
        t = sg.tensors[index]
        dims = tuple(int(d) for d in dims)
        signature = t.shape_signature if t.shape_signature is not None else t.shape
        if len(dims) != len(signature):
            raise ConversionError(
                f"{model.label}: --input-shape {name}: input '{name}' has {len(signature)} dimensions "
                f"{list(signature)}, not {len(dims)} ({list(dims)})"
            )
        for k, (want, got) in enumerate(zip(signature, dims, strict=True)):
            if got < 1:
                raise ConversionError(
                    f"{model.label}: --input-shape {name}: dimension {k} is {got}; it must be >= 1"
                )
            if want != -1 and want != got:
                why = (
                    "its shape signature"
                    if t.shape_signature is not None
                    else "the file (no dynamic dimensions)"
                )
                raise ConversionError(
                    f"{model.label}: --input-shape {name}: input '{name}' has dimension {k} fixed to {want} by "
                    f"{why} {list(signature)}, not {got}"
                )
        _check_size(model, f"--input-shape {name}", dims, t.type)
        if dims != t.shape:
            new[index] = dims
    if not new:
        return model, {}
    resized = _propagate(model, sg, new)
    subgraphs = tuple(resized if s.index == sg_index else s for s in model.subgraphs)
    return dataclasses.replace(model, subgraphs=subgraphs), new


def _check_size(model: TfliteModel, what: str, shape: Shape, type_code: int) -> None:
    dtype = schema.dtype_of(type_code)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype is not None and count * dtype.itemsize > MAX_TENSOR_BYTES:
        raise ConversionError(
            f"{model.label}: {what}: shape {list(shape)} makes a tensor larger than 2 GiB, which NNAPI cannot hold"
        )


def _propagate(model: TfliteModel, sg: Subgraph, new: dict[int, Shape]) -> Subgraph:
    shapes = {t.index: t.shape for t in sg.tensors}
    shapes.update(new)
    changed = set(new)
    for op in sg.operators:
        if not any(i in changed for i in op.inputs if i >= 0):
            continue
        name = op.code.name if op.code.custom is None else f"custom operator {op.code.custom!r}"
        where = f"{name} (operator #{op.index} of {sg.label()})"
        rule = _RULES.get(op.code.name) if op.code.custom is None else None
        try:
            if rule is None:
                raise _Cannot("the importer has no rule for its output shapes under new input shapes")
            outputs = rule(_Ctx(model, sg, op, shapes))
        except _Cannot as e:
            raise ConversionError(
                f"{model.label}: {where}: cannot follow the new input shapes: {e}"
            ) from None
        except (IndexError, ValueError, TypeError, ZeroDivisionError) as e:
            raise ConversionError(
                f"{model.label}: {where}: cannot follow the new input shapes ({type(e).__name__}: {e})"
            ) from None
        for index, shape in zip(op.outputs, outputs, strict=True):
            shape = tuple(int(d) for d in shape)
            if any(d < 0 for d in shape):
                raise ConversionError(
                    f"{model.label}: {where}: the new input shapes give it output shape {list(shape)}"
                )
            _check_size(model, where, shape, sg.tensors[index].type)
            if shape != shapes[index]:
                shapes[index] = shape
                changed.add(index)
    tensors = tuple(
        dataclasses.replace(t, shape=shapes[t.index]) if shapes[t.index] != t.shape else t for t in sg.tensors
    )
    return dataclasses.replace(sg, tensors=tensors)


class _Ctx:
    """What a shape rule reads: input shapes, constant inputs, options."""

    def __init__(self, model: TfliteModel, sg: Subgraph, op: Operator, shapes: dict[int, Shape]) -> None:
        self.model, self.sg, self.op, self.shapes = model, sg, op, shapes

    def shape(self, k: int) -> Shape:
        index = self.op.inputs[k]
        if index < 0:
            raise _Cannot(f"its input {k} is missing")
        return self.shapes[index]

    def has(self, k: int) -> bool:
        return k < len(self.op.inputs) and self.op.inputs[k] >= 0

    def out_shape(self, k: int = 0) -> Shape:
        """The file's shape of output k (for what the new inputs leave unchanged)."""
        return self.sg.tensors[self.op.outputs[k]].shape

    def ints(self, k: int, what: str) -> list[int]:
        index = self.op.inputs[k]
        value = self.model.constant(self.sg, index) if index >= 0 else None
        if value is None:
            raise _Cannot(f"its {what} (input {k}) is computed at run time")
        return [int(v) for v in np.asarray(value).reshape(-1)]

    def option(self, name: str, default=None):
        return self.op.options.get(name, default)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise _Cannot(f"axis {axis} is outside a rank-{rank} tensor")
    return axis % rank


def _broadcast(*shapes: Shape) -> Shape:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise _Cannot(f"its input shapes {[list(s) for s in shapes]} do not broadcast") from None


def _same(c: _Ctx) -> list[Shape]:
    return [c.shape(0)] * len(c.op.outputs)


def _binary(c: _Ctx) -> list[Shape]:
    return [_broadcast(c.shape(0), c.shape(1))]


def _select(c: _Ctx) -> list[Shape]:
    return [_broadcast(c.shape(0), c.shape(1), c.shape(2))]


def _window(size: int, filt: int, stride: int, dilation: int, padding: int) -> int:
    """TFLite's ComputeOutSize: SAME ceil(size / stride), VALID ceil((size - dilated filter + 1) / stride)."""
    effective = (filt - 1) * dilation + 1
    out = (size + stride - 1) // stride if padding == 0 else (size + stride - effective) // stride
    if out < 1:
        raise _Cannot(f"a {size}-wide input leaves no output for a {effective}-wide window (VALID padding)")
    return out


def _spatial(c: _Ctx, fh: int, fw: int, channels: int) -> list[Shape]:
    x = c.shape(0)
    if len(x) != 4:
        raise _Cannot(f"its input {list(x)} is not rank 4")
    pad = int(c.option("padding", 0) or 0)
    sh, sw = int(c.option("stride_h", 1)), int(c.option("stride_w", 1))
    dh, dw = int(c.option("dilation_h_factor", 1) or 1), int(c.option("dilation_w_factor", 1) or 1)
    return [(x[0], _window(x[1], fh, sh, dh, pad), _window(x[2], fw, sw, dw, pad), channels)]


def _conv(c: _Ctx) -> list[Shape]:
    w = c.shape(1)
    return _spatial(c, w[1], w[2], w[0])


def _depthwise(c: _Ctx) -> list[Shape]:
    w = c.shape(1)
    return _spatial(c, w[1], w[2], w[3])


def _pool(c: _Ctx) -> list[Shape]:
    return _spatial(c, int(c.option("filter_height", 1)), int(c.option("filter_width", 1)), c.shape(0)[3])


def _transpose_conv(c: _Ctx) -> list[Shape]:
    out = tuple(c.ints(0, "output shape"))
    x, w = c.shape(2), c.shape(1)
    pad = int(c.option("padding", 0) or 0)
    strides = (int(c.option("stride_h", 1)), int(c.option("stride_w", 1)))
    for k, (size, stride, filt) in enumerate(zip(x[1:3], strides, w[1:3], strict=True)):
        if _window(out[1 + k], filt, stride, 1, pad) != size or out[0] != x[0]:
            raise _Cannot(
                f"its constant output shape {list(out)} does not fit the new input {list(x)} (TFLite's output shape "
                "is that constant)"
            )
    return [out]


def _fully_connected(c: _Ctx) -> list[Shape]:
    x, w = c.shape(0), c.shape(1)
    units, depth = w
    size = int(np.prod(x, dtype=np.int64))
    if depth == 0 or size % depth:
        raise _Cannot(f"its input {list(x)} does not flatten to rows of {depth}")
    if c.option("keep_num_dims", False):
        return [(*x[:-1], units)]
    return [(size // depth, units)]


def _reshape(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    shape = c.ints(1, "shape") if c.has(1) else [int(v) for v in c.option("new_shape", ()) or ()]
    size = int(np.prod(x, dtype=np.int64))
    if shape.count(-1) > 1:
        raise _Cannot(f"its shape {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise _Cannot(f"its shape {shape} cannot hold the input's {size} values")
        shape = [size // known if d == -1 else d for d in shape]
    elif int(np.prod(shape, dtype=np.int64)) != size:
        raise _Cannot(
            f"its constant shape {shape} holds {int(np.prod(shape, dtype=np.int64))} values, not the new input's {size}"
        )
    return [tuple(shape)]


def _squeeze(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    dims = {_axis(int(d), len(x)) for d in c.option("squeeze_dims", ()) or ()}
    if dims and any(x[d] != 1 for d in dims):
        raise _Cannot(f"it squeezes dimensions {sorted(dims)} of {list(x)}, which are no longer 1")
    return [tuple(d for k, d in enumerate(x) if (k not in dims if dims else d != 1))]


def _expand_dims(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    axis = c.ints(1, "axis")[0]
    axis = _axis(axis, len(x) + 1)
    return [(*x[:axis], 1, *x[axis:])]


def _transpose(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    return [tuple(x[p] for p in c.ints(1, "permutation"))]


def _concatenation(c: _Ctx) -> list[Shape]:
    shapes = [c.shapes[i] for i in c.op.inputs if i >= 0]
    axis = _axis(int(c.option("axis", 0)), len(shapes[0]))
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(s[k] != shapes[0][k] for k in range(len(s)) if k != axis):
            raise _Cannot(f"its inputs {[list(s) for s in shapes]} no longer agree off axis {axis}")
    return [(*shapes[0][:axis], sum(s[axis] for s in shapes), *shapes[0][axis + 1 :])]


def _pack(c: _Ctx) -> list[Shape]:
    shapes = [c.shapes[i] for i in c.op.inputs if i >= 0]
    if any(s != shapes[0] for s in shapes):
        raise _Cannot(f"its inputs {[list(s) for s in shapes]} differ in shape")
    axis = _axis(int(c.option("axis", 0)), len(shapes[0]) + 1)
    return [(*shapes[0][:axis], len(shapes), *shapes[0][axis:])]


def _unpack(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    axis = _axis(int(c.option("axis", 0)), len(x))
    return [(*x[:axis], *x[axis + 1 :])] * len(c.op.outputs)


def _split(c: _Ctx) -> list[Shape]:
    x = c.shape(1)
    axis = _axis(c.ints(0, "axis")[0], len(x))
    count = len(c.op.outputs)
    if x[axis] % count:
        raise _Cannot(f"its axis of {x[axis]} does not split into {count} equal parts")
    return [(*x[:axis], x[axis] // count, *x[axis + 1 :])] * count


def _split_v(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    sizes = c.ints(1, "size_splits")
    axis = _axis(c.ints(2, "axis")[0], len(x))
    known = sum(s for s in sizes if s != -1)
    sizes = [x[axis] - known if s == -1 else s for s in sizes]
    if sum(sizes) != x[axis] or any(s < 0 for s in sizes):
        raise _Cannot(f"its constant split sizes {sizes} no longer add up to the axis's {x[axis]}")
    return [(*x[:axis], s, *x[axis + 1 :]) for s in sizes]


def _slice(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    begin, size = c.ints(1, "begin"), c.ints(2, "size")
    out = []
    for k, (b, s) in enumerate(zip(begin, size, strict=True)):
        s = x[k] - b if s == -1 else s
        if b < 0 or s < 0 or b + s > x[k]:
            raise _Cannot(f"its constant begin {begin} and size {size} fall outside the new input {list(x)}")
        out.append(s)
    return [tuple(out)]


def _strided_slice(c: _Ctx) -> list[Shape]:
    """TFLite's strided_slice_logic: StartForAxis / StopForAxis with the begin, end and shrink masks."""
    x = c.shape(0)
    begin, end, strides = c.ints(1, "begin"), c.ints(2, "end"), c.ints(3, "strides")
    bm, em, sm = (int(c.option(k, 0) or 0) for k in ("begin_mask", "end_mask", "shrink_axis_mask"))
    if int(c.option("ellipsis_mask", 0) or 0) or int(c.option("new_axis_mask", 0) or 0):
        raise _Cannot("ellipsis and new-axis masks are not followed")
    out = []
    for k, size in enumerate(x):
        if k >= len(begin):
            out.append(size)
            continue
        stride = strides[k]
        if stride == 0:
            raise _Cannot("a stride is 0")
        lo, hi = (0, size) if stride > 0 else (-1, size - 1)
        if bm >> k & 1:
            start = 0 if stride > 0 else size - 1
        else:
            start = begin[k] + size if begin[k] < 0 else begin[k]
            start = min(max(start, lo), hi)
        if sm >> k & 1:
            continue
        if em >> k & 1:
            stop = size if stride > 0 else -1
        else:
            stop = end[k] + size if end[k] < 0 else end[k]
            stop = min(max(stop, lo), hi)
        out.append(max(0, -(-(stop - start) // stride)))
    return [tuple(out)]


def _tile(c: _Ctx) -> list[Shape]:
    return [tuple(d * m for d, m in zip(c.shape(0), c.ints(1, "multipliers"), strict=True))]


def _pad(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    pads = np.asarray(c.ints(1, "paddings")).reshape(len(x), 2)
    return [tuple(int(d + p[0] + p[1]) for d, p in zip(x, pads, strict=True))]


def _space_to_batch(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    block = c.ints(1, "block shape")
    pads = np.asarray(c.ints(2, "paddings")).reshape(len(block), 2)
    spatial = []
    for d, b, p in zip(x[1 : 1 + len(block)], block, pads, strict=True):
        padded = d + int(p[0]) + int(p[1])
        if padded % b:
            raise _Cannot(f"its padded size {padded} is not a multiple of its block {b}")
        spatial.append(padded // b)
    return [(x[0] * int(np.prod(block)), *spatial, *x[1 + len(block) :])]


def _batch_to_space(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    block = c.ints(1, "block shape")
    crops = np.asarray(c.ints(2, "crops")).reshape(len(block), 2)
    total = int(np.prod(block))
    if x[0] % total:
        raise _Cannot(f"its batch {x[0]} is not a multiple of the block's {total}")
    spatial = [
        d * b - int(p[0]) - int(p[1]) for d, b, p in zip(x[1 : 1 + len(block)], block, crops, strict=True)
    ]
    return [(x[0] // total, *spatial, *x[1 + len(block) :])]


def _space_to_depth(c: _Ctx) -> list[Shape]:
    n, h, w, ch = c.shape(0)
    b = int(c.option("block_size", 1))
    if h % b or w % b:
        raise _Cannot(f"its {h}x{w} input is not a multiple of its block {b}")
    return [(n, h // b, w // b, ch * b * b)]


def _depth_to_space(c: _Ctx) -> list[Shape]:
    n, h, w, ch = c.shape(0)
    b = int(c.option("block_size", 1))
    if ch % (b * b):
        raise _Cannot(f"its {ch} channels are not a multiple of {b * b}")
    return [(n, h * b, w * b, ch // (b * b))]


def _resize(c: _Ctx) -> list[Shape]:
    n, _, _, ch = c.shape(0)
    h, w = c.ints(1, "size")
    return [(n, h, w, ch)]


def _reduce(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    axes = {_axis(a, len(x)) for a in c.ints(1, "axes")}
    if c.option("keep_dims", False):
        return [tuple(1 if k in axes else d for k, d in enumerate(x))]
    return [tuple(d for k, d in enumerate(x) if k not in axes)]


def _arg(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    axis = _axis(c.ints(1, "axis")[0], len(x))
    return [(*x[:axis], *x[axis + 1 :])]


def _topk(c: _Ctx) -> list[Shape]:
    x = c.shape(0)
    k = c.ints(1, "k")[0]
    if k > x[-1]:
        raise _Cannot(f"its k {k} is more than the last dimension's {x[-1]}")
    return [(*x[:-1], k)] * 2


def _gather(c: _Ctx) -> list[Shape]:
    x, positions = c.shape(0), c.shape(1)
    axis = _axis(int(c.option("axis", 0)), len(x))
    return [(*x[:axis], *positions, *x[axis + 1 :])]


def _lookup(c: _Ctx) -> list[Shape]:
    lookups, values = c.shape(0), c.shape(1)
    return [(lookups[0], *values[1:])]


def _hashtable(c: _Ctx) -> list[Shape]:
    lookups, values = c.shape(0), c.shape(2)
    return [(lookups[0], *values[1:]), (lookups[0],)]


def _constant_outputs(c: _Ctx) -> list[Shape]:
    """FILL, LSH_PROJECTION, DENSIFY: output shapes set by constants or weights, not by the inputs' sizes."""
    return [c.out_shape(k) for k in range(len(c.op.outputs))]


def _recurrent(
    sequence: bool, state_inputs: Sequence[int], time_major: bool = False
) -> Callable[[_Ctx], list[Shape]]:
    """A recurrent operator: its outputs take the input's batch (and time steps); the state tensors are
    variables with the file's shape, so a new batch is refused (TFLite's kernels refuse it too)."""

    def rule(c: _Ctx) -> list[Shape]:
        x = c.shape(0)
        file_x = c.sg.tensors[c.op.inputs[0]].shape
        if len(x) != len(file_x) or x[-1] != file_x[-1]:
            raise _Cannot(f"its input features changed from {list(file_x)} to {list(x)}")
        lead = 2 if sequence else 1
        batch = x[1] if sequence and c.option("time_major", time_major) else x[0]
        for k in state_inputs:
            if c.has(k) and c.shape(k)[0] != batch:
                raise _Cannot(
                    f"its state (input {k}, {list(c.shape(k))}) keeps the file's batch {c.shape(k)[0]}, not {batch}"
                )
        return [(*x[:lead], *c.out_shape(k)[lead:]) for k in range(len(c.op.outputs))]

    return rule


def _basic_lstm(c: _Ctx) -> list[Shape]:
    x, h, state = c.shape(0), c.shape(1), c.shape(4)
    if not (x[0] == h[0] == state[0]):
        raise _Cannot(
            f"its input {list(x)}, previous activation {list(h)} and state {list(state)} differ in batch"
        )
    units, depth = h[1], x[1]
    outs: list[Shape] = [(x[0], units), (x[0], units), (x[0], depth + units), (x[0], 4 * units)]
    return outs[: len(c.op.outputs)]


def _lstm(c: _Ctx) -> list[Shape]:
    if len(c.op.inputs) == 5:
        return _basic_lstm(c)
    return _recurrent(False, (18, 19))(c)


def _control_flow(c: _Ctx) -> list[Shape]:
    raise _Cannot("new shapes are not carried into control-flow subgraphs")


_RULES: dict[str, Callable[[_Ctx], list[Shape]]] = {
    **dict.fromkeys(
        (
            "ABS", "CAST", "COS", "DEQUANTIZE", "ELU", "EXP", "FLOOR", "GELU", "HARD_SWISH", "L2_NORMALIZATION",
            "LEAKY_RELU", "LOCAL_RESPONSE_NORMALIZATION", "LOG", "LOGICAL_NOT", "LOGISTIC", "LOG_SOFTMAX", "NEG",
            "QUANTIZE", "RELU", "RELU6", "RELU_N1_TO_1", "RSQRT", "SIN", "SOFTMAX", "SQRT", "TANH",
        ),
        _same,
    ),
    **dict.fromkeys(
        (
            "ADD", "DIV", "EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_OR",
            "MAXIMUM", "MINIMUM", "MUL", "NOT_EQUAL", "POW", "PRELU", "SQUARED_DIFFERENCE", "SUB",
        ),
        _binary,
    ),
    "SELECT": _select,
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _depthwise,
    "AVERAGE_POOL_2D": _pool,
    "MAX_POOL_2D": _pool,
    "L2_POOL_2D": _pool,
    "TRANSPOSE_CONV": _transpose_conv,
    "FULLY_CONNECTED": _fully_connected,
    "RESHAPE": _reshape,
    "SQUEEZE": _squeeze,
    "EXPAND_DIMS": _expand_dims,
    "TRANSPOSE": _transpose,
    "CONCATENATION": _concatenation,
    "PACK": _pack,
    "UNPACK": _unpack,
    "SPLIT": _split,
    "SPLIT_V": _split_v,
    "SLICE": _slice,
    "STRIDED_SLICE": _strided_slice,
    "TILE": _tile,
    "PAD": _pad,
    "PADV2": _pad,
    "SPACE_TO_BATCH_ND": _space_to_batch,
    "BATCH_TO_SPACE_ND": _batch_to_space,
    "SPACE_TO_DEPTH": _space_to_depth,
    "DEPTH_TO_SPACE": _depth_to_space,
    "RESIZE_BILINEAR": _resize,
    "RESIZE_NEAREST_NEIGHBOR": _resize,
    **dict.fromkeys(("MEAN", "SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY"), _reduce),
    "ARG_MAX": _arg,
    "ARG_MIN": _arg,
    "TOPK_V2": _topk,
    "GATHER": _gather,
    "EMBEDDING_LOOKUP": _lookup,
    "HASHTABLE_LOOKUP": _hashtable,
    **dict.fromkeys(("FILL", "LSH_PROJECTION", "DENSIFY"), _constant_outputs),
    "RNN": _recurrent(False, (4,)),
    "SVDF": _recurrent(False, (4,)),
    "LSTM": _lstm,
    "UNIDIRECTIONAL_SEQUENCE_RNN": _recurrent(True, (4,)),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _recurrent(True, (18, 19)),
    "BIDIRECTIONAL_SEQUENCE_LSTM": _recurrent(True, (35, 36, 37, 38), time_major=True),
    "IF": _control_flow,
    "WHILE": _control_flow,
}  # fmt: skip
