"""The model under construction: tensors with value intervals, random choices, operand and operation emission."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mlts.crash.random_graph.spec import (
    DIVISOR_MIN,
    DIVISOR_RANGE,
    EXTRA_OUTPUTS,
    FRESH_INPUT,
    INPUT_BOUND,
    LEAF_BIAS,
    MAX_ELEMENTS,
    MIN_SCALE,
    PICK_TRIES,
    QUANT_SCALE_RANGE,
    U8,
    VALUE_LIMIT,
    Act,
    GraphSpec,
    f32_value,
)
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import OperandType
from mlts.hal.types import Model

# ------------------------------------------------------------------ tensors and the graph under construction


@dataclass(eq=False, slots=True)
class Value:
    """A value operations can read: its operand, shape, value interval and quantization."""

    index: int
    dims: tuple[int, ...]
    lo: float
    hi: float
    quant: tuple[float, int] | None = None  # (scale, zero point) of a TENSOR_QUANT8_ASYMM tensor
    leaf: bool = False  # an operation result nothing reads yet

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def bound(self) -> float:
        return max(-self.lo, self.hi)


def quant_range(quant: tuple[float, int]) -> tuple[float, float]:
    scale, zp = quant
    return scale * (U8[0] - zp), scale * (U8[1] - zp)


def quant_for(lo: float, hi: float, least: float = MIN_SCALE) -> tuple[float, int]:
    """A uint8 quantization covering [lo, hi] and 0, with a scale of at least `least`."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = f32_value(max((hi - lo) / 255.0, least))
    return scale, min(max(round(-lo / scale), 0), 255)


def clip_interval(code: int, lo: float, hi: float) -> tuple[float, float]:
    """The interval after fused activation `code`."""
    bounds = {Act.NONE: (-math.inf, math.inf), Act.RELU: (0.0, math.inf), Act.RELU1: (-1.0, 1.0)}
    a, b = bounds.get(Act(code), (0.0, 6.0))
    return min(max(lo, a), b), min(max(hi, a), b)


class GraphState:
    """The model being generated: the builder, the tensors so far, the two random streams."""

    def __init__(self, seed: int, spec: GraphSpec) -> None:
        self.spec = spec
        self.rand = random.Random(seed)  # structure and parameters
        self.values = np.random.default_rng(seed)  # constant tensors
        self.builder = ModelBuilder()
        self.tensors: dict[bool, list[Value]] = {False: [], True: []}  # keyed by "is quant8"
        self.leaves: dict[bool, list[Value]] = {False: [], True: []}
        self.rank_cap = 6  # the highest rank the operation being generated takes (NNAPI's limit)

    # -------------------------------------------------------------- random choices

    def chance(self, p: float) -> bool:
        return self.rand.random() < p

    def rank(self, lowest: int = 1, highest: int | None = None) -> int:
        top = min(self.spec.max_rank, self.rank_cap)
        top = top if highest is None else min(highest, top)
        return self.rand.randint(lowest, top)

    def dim(self, room: int = MAX_ELEMENTS) -> int:
        """A dimension in the spec's range, below `room` where the range allows."""
        return self.rand.randint(self.spec.min_dim, max(self.spec.min_dim, min(self.spec.max_dim, room)))

    def shape(self, rank: int) -> tuple[int, ...]:
        """Random dimensions whose product stays near MAX_ELEMENTS."""
        dims, room = [], MAX_ELEMENTS
        for _ in range(rank):
            d = self.dim(room)
            dims.append(d)
            room = max(room // d, 1)
        self.rand.shuffle(dims)
        return tuple(dims)

    # -------------------------------------------------------------- operands

    def new_input(self, dims: tuple[int, ...], quant: bool) -> Value:
        if quant:
            q = (f32_value(self.rand.uniform(*QUANT_SCALE_RANGE)), self.rand.randint(*U8))
            index = self.builder.add_input(OperandType.TENSOR_QUANT8_ASYMM, dims, *q)
            return Value(index, dims, *quant_range(q), q)
        index = self.builder.add_input(OperandType.TENSOR_FLOAT32, dims)
        return Value(index, dims, -INPUT_BOUND, INPUT_BOUND)

    def const_tensor(self, dims: tuple[int, ...], quant: bool) -> Value:
        """A constant tensor operand: uniform float32 values in [-1, 1], or random bytes."""
        if quant:
            q = (f32_value(self.rand.uniform(*QUANT_SCALE_RANGE)), self.rand.randint(*U8))
            data = self.values.integers(0, 256, size=dims, dtype=np.uint8)
            index = self.builder.add_constant(data, OperandType.TENSOR_QUANT8_ASYMM, *q)
            return Value(index, dims, *quant_range(q), q)
        data = self.values.uniform(-1.0, 1.0, size=dims).astype(np.float32)
        index = self.builder.add_constant(data, OperandType.TENSOR_FLOAT32)
        return Value(index, dims, float(data.min()), float(data.max()))

    def divisor(self, dims: tuple[int, ...]) -> Value:
        """A constant tensor of values in +-DIVISOR_RANGE."""
        magnitude = self.values.uniform(*DIVISOR_RANGE, size=dims)
        sign = np.where(self.values.random(size=dims) < 0.5, -1.0, 1.0)
        data = (magnitude * sign).astype(np.float32)
        index = self.builder.add_constant(data, OperandType.TENSOR_FLOAT32)
        return Value(index, dims, float(data.min()), float(data.max()))

    # The parameter constants, named short as the generators use them everywhere.

    def i32(self, value: int) -> int:
        return self.builder.add_int32(value)

    def f32(self, value: float) -> int:
        return self.builder.add_float32(value)

    def flag(self, value: bool) -> int:
        return self.builder.add_bool(value)

    def ints(self, values: Sequence[int] | Sequence[Sequence[int]]) -> int:
        return self.builder.add_int32_tensor(values)

    # -------------------------------------------------------------- choosing what an operation reads

    def pick(self, quant: bool, accept: Callable[[Value], bool]) -> Value | None:
        """An earlier result of the kind (quant8 or float32) that `accept` takes, or None after a few tries."""
        pools = (
            (self.leaves[quant], self.tensors[quant]) if self.chance(LEAF_BIAS) else (self.tensors[quant],)
        )
        for pool in pools:
            if not pool:
                continue
            for _ in range(PICK_TRIES):
                t = self.rand.choice(pool)
                if t.size <= MAX_ELEMENTS and len(t.dims) <= self.rank_cap and accept(t):
                    return t
        return None

    def source(
        self,
        quant: bool,
        accept: Callable[[Value], bool] = lambda t: True,
        make: Callable[[], tuple[int, ...]] | None = None,
    ) -> Value:
        """The main input of an operation: an earlier result `accept` takes, else a new model input of shape `make()`.

        `make` must give a shape whose new input (values in [-INPUT_BOUND, INPUT_BOUND]) `accept` would take.
        """
        if not self.chance(FRESH_INPUT):
            t = self.pick(quant, accept)
            if t is not None:
                return t
        return self.new_input(make() if make is not None else self.shape(self.rank()), quant)

    def broadcast_dims(self, dims: tuple[int, ...]) -> tuple[int, ...]:
        """`dims`, or some trailing dimensions of it with a few set to 1."""
        if self.chance(0.5):
            return dims
        kept = dims[len(dims) - self.rand.randint(1, len(dims)) :]
        return tuple(1 if self.chance(0.35) else d for d in kept)

    def partner(self, a: Value, quant: bool, divisor: bool = False) -> Value:
        """The second operand of a binary operation: an earlier result, a constant or a new input broadcasting with `a`."""
        roll = self.rand.random()

        def fits(t: Value) -> bool:
            if divisor and not (t.lo >= DIVISOR_MIN or t.hi <= -DIVISOR_MIN):
                return False
            out = broadcast(a.dims, t.dims)
            return out is not None and math.prod(out) <= MAX_ELEMENTS

        if roll < 0.5:
            t = self.pick(quant, fits)
            if t is not None:
                return t
        dims = self.broadcast_dims(a.dims)
        if divisor:
            return self.divisor(dims)
        if roll < 0.8:
            return self.const_tensor(dims, quant)
        return self.new_input(dims, quant)

    def activation(self, lo: float, hi: float) -> tuple[int, float, float]:
        """A fused activation code and the interval after it; a clamping one when [lo, hi] leaves VALUE_LIMIT."""
        if max(-lo, hi) > VALUE_LIMIT:
            code = self.rand.choice((Act.RELU1, Act.RELU6))
        else:
            code = self.rand.choices(tuple(Act), weights=(55, 15, 15, 15))[0]
        return int(code), *clip_interval(code, lo, hi)

    # -------------------------------------------------------------- emitting operations

    def emit(
        self,
        op: int,
        args: Sequence[Value | int],
        dims: Sequence[int],
        lo: float,
        hi: float,
        quant: tuple[float, int] | None = None,
    ) -> Value:
        """Add operation `op` reading `args` (tensors or operand indexes) and writing a new tensor."""
        dims = tuple(int(d) for d in dims)
        if quant is None:
            index = self.builder.add_operand(OperandType.TENSOR_FLOAT32, dims)
        else:
            quant = (f32_value(quant[0]), int(quant[1]))
            index = self.builder.add_operand(OperandType.TENSOR_QUANT8_ASYMM, dims, *quant)
            lo, hi = quant_range(quant)
        self.builder.add_operation(op, [a.index if isinstance(a, Value) else a for a in args], [index])
        for a in args:
            if isinstance(a, Value) and a.leaf:
                a.leaf = False
                self.leaves[a.quant is not None].remove(a)
        out = Value(index, dims, float(lo), float(hi), quant, leaf=True)
        self.tensors[quant is not None].append(out)
        self.leaves[quant is not None].append(out)
        return out

    def build(self) -> Model:
        """Every unread result becomes a model output, plus a few results later operations also read."""
        outputs = {t.index for kind in (False, True) for t in self.leaves[kind]}
        read = [t for kind in (False, True) for t in self.tensors[kind] if not t.leaf]
        for t in read[:: max(len(read) // EXTRA_OUTPUTS, 1)][:EXTRA_OUTPUTS]:
            if self.chance(0.5):
                outputs.add(t.index)
        self.builder.mark_outputs(sorted(outputs))
        return self.builder.build()


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None
