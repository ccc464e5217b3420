"""Float64 references of the element-wise, comparison, reduction and tensor-movement operations.

Written from NNAPI's operation definitions (NeuralNetworks.h), independently of the
driver's kernels. A reference takes the operation's inputs — tensors dequantised to
float64 (integer and boolean tensors as they are), scalars as Python values, omitted
inputs as None — and the output slots, and returns the outputs in NHWC order:
float64 values for float and quantised outputs (the caller quantises), integers and
booleans as such. `REFERENCES` maps operation names to them; the convolution-like
ones are in `operations_refs_nn`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Ref = Callable[[list[Any], "Ctx"], list[np.ndarray]]
REFERENCES: dict[str, Ref] = {}

ACTIVATION_BOUNDS = {0: (-np.inf, np.inf), 1: (0.0, np.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


@dataclass(frozen=True)
class Ctx:
    """What a reference knows besides the inputs: the operation's name and its output slots."""

    name: str
    outs: Sequence[Any]


def ref(*names: str) -> Callable[[Ref], Ref]:
    def register(fn: Ref) -> Ref:
        for name in names:
            REFERENCES[name] = fn
        return fn

    return register


def fuse(y: np.ndarray, code: int) -> np.ndarray:
    """NNAPI's fused activation (NONE, RELU, RELU1, RELU6)."""
    return np.clip(y, *ACTIVATION_BOUNDS[int(code)])


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


# ---------------------------------------------------------------- element-wise binary


@ref("ADD", "SUB", "MUL", "DIV")
def _arith(a: list[Any], c: Ctx) -> list[np.ndarray]:
    x, y, act = a[0], a[1], a[2]
    return [_ARITH[c.name](x, y, act)]


def _int_or_float(fn_int: Callable, fn_float: Callable) -> Callable:
    def run(x: np.ndarray, y: np.ndarray, act: int) -> np.ndarray:
        if _is_int(x):
            r = fn_int(x.astype(np.int64), y.astype(np.int64))
            r = ((r + 2**31) % 2**32 - 2**31).astype(np.int64)  # int32 wraps round
            lo, hi = ACTIVATION_BOUNDS[int(act)]
            return np.clip(r, max(lo, -(2**31)), min(hi, 2**31 - 1)).astype(np.int64)
        return fuse(fn_float(x, y), act)

    return run


_ARITH = {
    "ADD": _int_or_float(np.add, np.add),
    "SUB": _int_or_float(np.subtract, np.subtract),
    "MUL": _int_or_float(np.multiply, np.multiply),
    "DIV": _int_or_float(np.floor_divide, np.divide),
}


@ref("MAXIMUM")
def _maximum(a, c):
    return [np.maximum(a[0], a[1])]


@ref("MINIMUM")
def _minimum(a, c):
    return [np.minimum(a[0], a[1])]


@ref("POW")
def _pow(a, c):
    return [np.power(a[0], a[1])]


@ref("PRELU")
def _prelu(a, c):
    x, alpha = a[0], a[1]
    return [np.where(x >= 0, x, x * alpha)]


_COMPARE = {
    "EQUAL": np.equal,
    "NOT_EQUAL": np.not_equal,
    "GREATER": np.greater,
    "GREATER_EQUAL": np.greater_equal,
    "LESS": np.less,
    "LESS_EQUAL": np.less_equal,
}


@ref(*_COMPARE)
def _compare(a, c):
    return [_COMPARE[c.name](a[0], a[1])]


@ref("LOGICAL_AND")
def _and(a, c):
    return [np.logical_and(a[0], a[1])]


@ref("LOGICAL_OR")
def _or(a, c):
    return [np.logical_or(a[0], a[1])]


@ref("LOGICAL_NOT")
def _not(a, c):
    return [np.logical_not(a[0])]


# ---------------------------------------------------------------- element-wise unary

_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ABS": np.abs,
    "EXP": np.exp,
    "LOG": np.log,
    "SQRT": np.sqrt,
    "RSQRT": lambda x: 1.0 / np.sqrt(x),
    "SIN": np.sin,
    "NEG": np.negative,
    "FLOOR": np.floor,
    "RELU": lambda x: np.maximum(x, 0.0),
    "RELU1": lambda x: np.clip(x, -1.0, 1.0),
    "RELU6": lambda x: np.clip(x, 0.0, 6.0),
    "LOGISTIC": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "TANH": np.tanh,
    "HARD_SWISH": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
}


@ref(*_UNARY)
def _unary(a, c):
    x = a[0]
    name = c.name
    if _is_int(x) and name in ("ABS", "NEG"):
        r = np.abs(x.astype(np.int64)) if name == "ABS" else -x.astype(np.int64)
        return [(r + 2**31) % 2**32 - 2**31]
    return [_UNARY[name](x)]


@ref("ELU")
def _elu(a, c):
    x, alpha = a[0], float(a[1])
    return [np.where(x > 0, x, alpha * (np.exp(x) - 1.0))]


@ref("CAST", "DEQUANTIZE", "QUANTIZE")
def _identity(a, c):
    # Values are already dequantised; the caller converts (and quantises) them to the output's type.
    return [np.asarray(a[0])]


# ---------------------------------------------------------------- reductions


def _axes(raw: Any, rank: int) -> tuple[int, ...]:
    return tuple(sorted({int(v) % rank for v in np.asarray(raw).ravel()}))


_REDUCE = {
    "REDUCE_SUM": np.sum,
    "REDUCE_PROD": np.prod,
    "REDUCE_MAX": np.max,
    "REDUCE_MIN": np.min,
    "REDUCE_ANY": np.any,
    "REDUCE_ALL": np.all,
    "MEAN": np.mean,
}


@ref(*_REDUCE)
def _reduce(a, c):
    x = a[0]
    return [_REDUCE[c.name](x, axis=_axes(a[1], x.ndim), keepdims=bool(a[2]))]


@ref("ARGMAX")
def _argmax(a, c):
    return [np.argmax(a[0], axis=int(a[1]) % a[0].ndim)]


@ref("ARGMIN")
def _argmin(a, c):
    return [np.argmin(a[0], axis=int(a[1]) % a[0].ndim)]


# ---------------------------------------------------------------- softmax and normalisation


def _axis_arg(a: list[Any], pos: int, default: int = -1) -> int:
    return int(a[pos]) if len(a) > pos and a[pos] is not None else default


@ref("SOFTMAX")
def _softmax(a, c):
    x, beta = a[0], float(a[1])
    axis = _axis_arg(a, 2)
    z = beta * (x - x.max(axis=axis, keepdims=True))
    e = np.exp(z)
    return [e / e.sum(axis=axis, keepdims=True)]


@ref("LOG_SOFTMAX")
def _log_softmax(a, c):
    x, beta, axis = a[0], float(a[1]), int(a[2])
    z = beta * x
    z = z - z.max(axis=axis, keepdims=True)
    return [z - np.log(np.exp(z).sum(axis=axis, keepdims=True))]


@ref("L2_NORMALIZATION")
def _l2norm(a, c):
    x = a[0]
    axis = _axis_arg(a, 1)
    norm = np.sqrt((x * x).sum(axis=axis, keepdims=True))
    return [x / np.maximum(norm, 1e-6)]


@ref("LOCAL_RESPONSE_NORMALIZATION")
def _lrn(a, c):
    x, radius, bias, alpha, beta = a[0], int(a[1]), float(a[2]), float(a[3]), float(a[4])
    axis = _axis_arg(a, 5) % x.ndim
    moved = np.moveaxis(x, axis, -1)
    sq = moved * moved
    depth = moved.shape[-1]
    total = np.zeros_like(moved)
    for c in range(depth):
        lo, hi = max(0, c - radius), min(depth, c + radius + 1)
        total[..., c] = sq[..., lo:hi].sum(axis=-1)
    return [np.moveaxis(moved / np.power(bias + alpha * total, beta), -1, axis)]


@ref("INSTANCE_NORMALIZATION")
def _instance_norm(a, c):
    x, gamma, beta, eps = a[0], float(a[1]), float(a[2]), float(a[3])
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    return [gamma * (x - mean) / np.sqrt(var + eps) + beta]


# ---------------------------------------------------------------- tensor movement


@ref("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(a, c):
    # The data order is kept; the output shape is the one NNAPI defines, declared by the case.
    return [np.asarray(a[0]).reshape(c.outs[0].dims)]


@ref("TRANSPOSE")
def _transpose(a, c):
    perm = None if a[1] is None else [int(v) for v in np.asarray(a[1]).ravel()]
    return [np.transpose(a[0], perm)]


@ref("CONCATENATION")
def _concat(a, c):
    return [np.concatenate(a[:-1], axis=int(a[-1]))]


@ref("SPLIT")
def _split(a, c):
    return list(np.split(a[0], int(a[2]), axis=int(a[1])))


def _pads(raw: Any) -> list[tuple[int, int]]:
    return [(int(p[0]), int(p[1])) for p in np.asarray(raw).reshape(-1, 2)]


@ref("PAD")
def _pad(a, c):
    return [np.pad(a[0], _pads(a[1]), constant_values=0)]


@ref("PAD_V2")
def _pad_v2(a, c):
    value = float(a[2])
    out = c.outs[0]
    if out.scale > 0:  # a quantised tensor's pad value is given as a stored (quantised) value
        value = (value - out.zero_point) * out.scale
    return [np.pad(a[0], _pads(a[1]), constant_values=value)]


@ref("SLICE")
def _slice(a, c):
    x = a[0]
    begin = [int(v) for v in np.asarray(a[1]).ravel()]
    size = [int(v) for v in np.asarray(a[2]).ravel()]
    index = tuple(
        slice(b, x.shape[d] if s == -1 else b + s) for d, (b, s) in enumerate(zip(begin, size, strict=True))
    )
    return [x[index]]


@ref("STRIDED_SLICE")
def _strided_slice(a, c):
    x = a[0]
    begin, end, strides = (np.asarray(v).ravel().tolist() for v in a[1:4])
    begin_mask, end_mask, shrink = int(a[4]), int(a[5]), int(a[6])
    index: list[Any] = []
    for d in range(x.ndim):
        b = None if begin_mask >> d & 1 else int(begin[d])
        e = None if end_mask >> d & 1 else int(end[d])
        if shrink >> d & 1:
            index.append(int(begin[d]))
        else:
            index.append(slice(b, e, int(strides[d])))
    return [x[tuple(index)]]


@ref("TILE")
def _tile(a, c):
    return [np.tile(a[0], [int(v) for v in np.asarray(a[1]).ravel()])]


@ref("GATHER")
def _gather(a, c):
    return [np.take(a[0], np.asarray(a[2], dtype=np.int64), axis=int(a[1]))]


@ref("SELECT")
def _select(a, c):
    return [np.where(a[0], a[1], a[2])]


@ref("RANK")
def _rank(a, c):
    return [np.asarray(np.asarray(a[0]).ndim)]


@ref("FILL")
def _fill(a, c):
    return [np.full([int(v) for v in np.asarray(a[0]).ravel()], a[1])]


@ref("EMBEDDING_LOOKUP")
def _embedding(a, c):
    return [np.asarray(a[1])[np.asarray(a[0], dtype=np.int64)]]


@ref("HASHTABLE_LOOKUP")
def _hashtable(a, c):
    lookups, keys, values = np.asarray(a[0]), np.asarray(a[1]), np.asarray(a[2])
    # A missing key's row is zero bytes: for a quantised output that is the stored value 0.
    miss = -c.outs[0].zero_point * c.outs[0].scale if c.outs[0].scale > 0 else 0.0
    out = np.full((len(lookups), *values.shape[1:]), miss)
    hits = np.zeros(len(lookups), dtype=np.int64)
    for i, k in enumerate(lookups):
        where = np.nonzero(keys == k)[0]
        if where.size:
            out[i] = values[where[0]]
            hits[i] = 1
    return [out, hits]


@ref("TOPK_V2")
def _topk(a, c):
    x, k = a[0], int(a[1])
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return [np.take_along_axis(x, order, axis=-1), order]


@ref("SPACE_TO_DEPTH")
def _space_to_depth(a, c):
    x, bs = a[0], int(a[1])
    n, h, w, c = x.shape
    y = x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(n, h // bs, w // bs, bs * bs * c)]


@ref("DEPTH_TO_SPACE")
def _depth_to_space(a, c):
    x, bs = a[0], int(a[1])
    n, h, w, c = x.shape
    y = x.reshape(n, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5)
    return [y.reshape(n, h * bs, w * bs, c // (bs * bs))]


@ref("SPACE_TO_BATCH_ND")
def _space_to_batch(a, c):
    x = a[0]
    bh, bw = (int(v) for v in np.asarray(a[1]).ravel())
    pads = _pads(a[2])
    x = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    n, h, w, c = x.shape
    y = x.reshape(n, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    return [y.reshape(n * bh * bw, h // bh, w // bw, c)]


@ref("BATCH_TO_SPACE_ND")
def _batch_to_space(a, c):
    x = a[0]
    bh, bw = (int(v) for v in np.asarray(a[1]).ravel())
    n, h, w, c = x.shape
    y = x.reshape(bh, bw, n // (bh * bw), h, w, c).transpose(2, 3, 0, 4, 1, 5)
    return [y.reshape(n // (bh * bw), h * bh, w * bw, c)]


@ref("CHANNEL_SHUFFLE")
def _channel_shuffle(a, c):
    x, groups = a[0], int(a[1])
    axis = int(a[2]) % x.ndim
    moved = np.moveaxis(x, axis, -1)
    c = moved.shape[-1]
    shuffled = moved.reshape(*moved.shape[:-1], groups, c // groups).swapaxes(-1, -2)
    return [np.moveaxis(shuffled.reshape(moved.shape), -1, axis)]
