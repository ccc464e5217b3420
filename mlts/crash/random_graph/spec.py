"""What random graphs to make (GraphSpec), the generator's limits, and the table of operation generators."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mlts.hal.enums import FusedActivationFunc, OperationType, name_of_code

if TYPE_CHECKING:
    from mlts.crash.random_graph.state import GraphState

Op = OperationType
Act = FusedActivationFunc

INPUT_BOUND = 1.0  # model inputs: float32 values in [-1, 1]
VALUE_LIMIT = 64.0  # no float tensor of the graph exceeds this magnitude
EXP_INPUT_LIMIT = 4.0  # EXP reads only tensors whose values stay below this (exp(4) < 55)
DIVISOR_MIN = 0.25  # DIV divides only by values at least this far from zero
DIVISOR_RANGE = (0.5, 2.0)  # magnitudes of constant divisors
MAX_ELEMENTS = 2048  # operations read tensors of at most this many elements and keep their results near it
FC_MAX_INPUT_SIZE = 256  # FULLY_CONNECTED flattens at most this many values per row
MAX_KERNEL = 3  # filter and pooling windows are at most 3 x 3 (before dilation)
QUANT_SCALE_RANGE = (0.004, 0.03)  # scale of quant8 model inputs and constants
MIN_SCALE = 1e-4
BIAS_LIMIT = 2**30  # quantized biases stay well inside int32
FRESH_INPUT = 0.04  # chance that an operation reads a new model input although earlier tensors exist
LEAF_BIAS = 0.85  # chance that an operation prefers tensors nothing reads yet (deeper graphs, fewer outputs)
PICK_TRIES = 6
EXTRA_OUTPUTS = 3  # at most this many results that later operations also read become model outputs too
PROBE_SEED = 0
PROBE_MAX_DIM = 6
U8 = (0, 255)


def f32_value(x: float | np.floating) -> float:
    """`x` rounded to float32 (how a model stores scales and scalar parameters)."""
    return float(np.float32(x))


# ------------------------------------------------------------------ the spec


@dataclass(frozen=True, slots=True)
class GraphSpec:
    """What random graphs to make: operation count, dimension range, maximum rank, operation types.

    `op_types` None means every type the generator knows that the rank allows (QUANTIZE and
    DEQUANTIZE only when `quant` > 0). `quant` is the chance that an operation with a quantized
    form is generated as TENSOR_QUANT8_ASYMM (0: float32 graphs only, 1: quantized wherever possible).
    """

    ops: int
    min_dim: int = 1
    max_dim: int = 16
    max_rank: int = 4
    op_types: frozenset[int] | None = None
    quant: float = 0.25

    def __post_init__(self) -> None:
        if self.ops < 1:
            raise ValueError(f"a random graph needs at least 1 operation, got ops={self.ops}")
        if not 1 <= self.min_dim <= self.max_dim:
            raise ValueError(f"dimension range [{self.min_dim}, {self.max_dim}] must satisfy 1 <= min <= max")
        if not 1 <= self.max_rank <= 6:
            raise ValueError(f"max_rank {self.max_rank} must be in [1, 6]")
        if not 0.0 <= self.quant <= 1.0:
            raise ValueError(f"quant share {self.quant} must be in [0, 1]")
        if self.op_types is not None:
            types = frozenset(int(t) for t in self.op_types)
            object.__setattr__(self, "op_types", types)
            check_types(types, self.max_rank)

    def resolved_op_types(self) -> frozenset[int]:
        """The operation types this spec draws from."""
        if self.op_types is not None:
            return self.op_types
        return frozenset(
            code
            for code, kind in KINDS.items()
            if kind.min_rank <= self.max_rank and (self.quant > 0 or not kind.crosses_domains)
        )

    def to_json(self) -> str:
        """The spec as one line of JSON (operation types by name), e.g. for a dump's metadata."""
        types = None if self.op_types is None else sorted(Op(t).name for t in self.op_types)
        doc = {
            "ops": self.ops,
            "min_dim": self.min_dim,
            "max_dim": self.max_dim,
            "max_rank": self.max_rank,
            "op_types": types,
            "quant": self.quant,
        }
        return json.dumps(doc, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> GraphSpec:
        """The spec `to_json` wrote."""
        doc = json.loads(text)
        types = doc.get("op_types")
        return GraphSpec(
            ops=int(doc["ops"]),
            min_dim=int(doc["min_dim"]),
            max_dim=int(doc["max_dim"]),
            max_rank=int(doc["max_rank"]),
            op_types=None if types is None else frozenset(int(OperationType[name]) for name in types),
            quant=float(doc["quant"]),
        )


def check_types(types: frozenset[int], max_rank: int) -> None:
    if not types:
        raise ValueError("op_types is empty; give None for every known type or at least one type")
    unknown = sorted(t for t in types if t not in KINDS)
    if unknown:
        names = [name_of_code(Op, t) for t in unknown]
        known = ", ".join(sorted(Op(t).name for t in KINDS))
        raise ValueError(f"the generator cannot make {', '.join(names)}; it knows {known}")
    too_deep = sorted(Op(t).name for t in types if KINDS[t].min_rank > max_rank)
    if too_deep:
        raise ValueError(f"{', '.join(too_deep)} need(s) tensors of a higher rank than max_rank {max_rank}")


# ------------------------------------------------------------------ operation generators


@dataclass(frozen=True, slots=True)
class Kind:
    """How to generate one operation type: `make(graph, quantized)`, whether a quant8 form exists."""

    make: Callable[[GraphState, bool], None]
    quant: bool = False
    min_rank: int = 1
    max_rank: int = 4  # the highest rank NNAPI allows the operation's tensors
    crosses_domains: bool = False  # QUANTIZE / DEQUANTIZE: one float32 and one quant8 side


KINDS: dict[int, Kind] = {}


def generates(
    op: OperationType, quant: bool = False, min_rank: int = 1, crosses: bool = False, max_rank: int = 4
) -> Callable:
    def deco(fn: Callable[[GraphState, bool], None]) -> Callable[[GraphState, bool], None]:
        KINDS[int(op)] = Kind(fn, quant, min_rank, max_rank, crosses)
        return fn

    return deco
