"""Seeded inputs of an operation case, dequantisation for the references, and NNAPI's CTS tolerances.

Tolerances (NNAPI's test generator): pass when |actual − expected| ≤ atol + rtol·|expected|;
float32 atol 1e-5, rtol 5·2⁻²³; float16 and relaxed float32 atol = rtol = 5·2⁻¹⁰;
quantised outputs 1 unit of their scale; integer and boolean outputs exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mlts.hal.enums import SCALAR_TYPES, OperandType
from mlts.hal.types import SymmPerChannelQuantParams
from mlts.validate.operations_model import OpModel, Slot

T = OperandType
FP32 = (1e-5, 5 * 2.0**-23)
FP16 = (5 * 2.0**-10, 5 * 2.0**-10)
QUANT_TYPES = frozenset(
    {
        T.TENSOR_QUANT8_ASYMM,
        T.TENSOR_QUANT8_ASYMM_SIGNED,
        T.TENSOR_QUANT8_SYMM,
        T.TENSOR_QUANT16_ASYMM,
        T.TENSOR_QUANT16_SYMM,
        T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    }
)
FLOAT_TYPES = frozenset({T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.FLOAT32, T.FLOAT16})
#: Operations whose float inputs must be positive (their domain), and ones kept away from 0.
POSITIVE = frozenset({"LOG", "SQRT", "RSQRT", "POW"})
#: Operations whose constant float/quantised tensors are weights worth randomising.
WEIGHTED = frozenset(
    {
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "GROUPED_CONV_2D",
        "TRANSPOSE_CONV_2D",
        "FULLY_CONNECTED",
        "RNN",
        "UNIDIRECTIONAL_SEQUENCE_RNN",
        "BIDIRECTIONAL_SEQUENCE_RNN",
        "LSTM",
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        "BIDIRECTIONAL_SEQUENCE_LSTM",
    }
)
#: Input positions that are indices into another input (operation -> {position: indexed position}).
INDEX_INPUTS = {"EMBEDDING_LOOKUP": {0: 1}, "GATHER": {2: 0}}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    unit: str = ""

    def describe(self) -> str:
        return f"atol {self.atol:g}{' ' + self.unit if self.unit else ''}, rtol {self.rtol:g}"


def tolerance(slot: Slot, relaxed: bool) -> Tolerance:
    """NNAPI's CTS tolerance of an output of `slot`'s type."""
    t = slot.type
    if t in (T.TENSOR_FLOAT32, T.FLOAT32):
        return Tolerance(*(FP16 if relaxed else FP32))
    if t in (T.TENSOR_FLOAT16, T.FLOAT16):
        return Tolerance(*FP16)
    if t in QUANT_TYPES:
        return Tolerance(1.0, 0.0, "unit")
    return Tolerance(0.0, 0.0)


def _random_values(rng: np.random.Generator, slot: Slot, positive: bool) -> np.ndarray:
    dims, dtype = slot.dims, slot.dtype
    if slot.type in FLOAT_TYPES:
        lo, hi = (0.1, 2.0) if positive else (-1.0, 1.0)
        return rng.uniform(lo, hi, size=dims).astype(dtype)
    if slot.type == T.TENSOR_BOOL8:
        return rng.integers(0, 2, size=dims).astype(np.bool_)
    if slot.type == T.TENSOR_INT32:
        return rng.integers(-6, 7, size=dims).astype(np.int32)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, size=dims).astype(dtype)


def make_inputs(case: OpModel, name: str, seed: int) -> list[np.ndarray]:
    """Values of the case's model inputs, in input order, drawn from `seed`."""
    rng = np.random.default_rng(seed)
    values: dict[int, np.ndarray] = {}
    for pos, slot in enumerate(case.inputs):
        if slot.kind == "input":
            values[pos] = _random_values(rng, slot, name in POSITIVE and pos == 0)
    for pos, of in INDEX_INPUTS.get(name, {}).items():
        if pos in values:
            axis = _gather_axis(case) if name == "GATHER" else 0
            size = case.inputs[of].dims[axis]
            values[pos] = rng.integers(0, size, size=case.inputs[pos].dims).astype(np.int32)
    if name == "DIV":
        for pos in (1,):
            v = values.get(pos)
            if v is not None and v.dtype.kind in "iu":
                values[pos] = np.where(v == 0, 1, v).astype(v.dtype)
            elif v is not None:
                values[pos] = np.where(np.abs(v) < 0.1, 0.5, v).astype(v.dtype)
    if name == "HASHTABLE_LOOKUP" and 0 in values:
        values[0] = rng.integers(0, 5, size=case.inputs[0].dims).astype(np.int32)  # some keys miss
    return [values[pos] for pos in sorted(values)]


def _gather_axis(case: OpModel) -> int:
    return int(np.asarray(case.inputs[1].value).item()) % len(case.inputs[0].dims)


def randomise_weights(case: OpModel, name: str, seed: int) -> OpModel:
    """`case` with its weight and bias constants drawn from `seed` (convolutions, FC, RNN)."""
    if name not in WEIGHTED:
        return case
    rng = np.random.default_rng(seed + 7919)
    out = case
    for pos, slot in enumerate(case.inputs):
        if slot.kind != "const" or slot.type in SCALAR_TYPES:
            continue
        if slot.type in FLOAT_TYPES:
            value = rng.uniform(-1.0, 1.0, size=slot.dims).astype(slot.dtype)
        elif slot.type == T.TENSOR_INT32 and pos == 2:
            value = rng.integers(-20, 21, size=slot.dims).astype(np.int32)  # a quantised bias
        elif slot.type in QUANT_TYPES:
            info = np.iinfo(slot.dtype)
            value = rng.integers(max(info.min, -127), int(info.max) + 1, size=slot.dims).astype(slot.dtype)
        else:
            continue
        out = out.with_input(pos, replace(slot, value=value))
    return out


def dequantize(slot: Slot, value: Any) -> Any:
    """What the reference computes with: float64 for float and quantised tensors, else the value as is."""
    if value is None:
        return None
    if slot.type in SCALAR_TYPES:
        return np.asarray(value).item()
    arr = np.asarray(value)
    if slot.type in FLOAT_TYPES:
        return arr.astype(np.float64)
    if isinstance(slot.extra, SymmPerChannelQuantParams):
        scales = np.asarray(slot.extra.scales, dtype=np.float64)
        shape = [1] * arr.ndim
        shape[slot.extra.channel_dim] = -1
        return arr.astype(np.float64) * scales.reshape(shape)
    if slot.type in QUANT_TYPES:
        return (arr.astype(np.float64) - slot.zero_point) * slot.scale
    if slot.type == T.TENSOR_INT32 and slot.scale > 0:
        return arr.astype(np.float64) * slot.scale  # a quantised bias
    return arr


def bias_scales(case: OpModel) -> OpModel:
    """A per-channel case's INT32 bias gets its per-channel scales (input scale · weight scale) for dequantising."""
    w = case.inputs[1] if len(case.inputs) > 2 else None
    if (
        w is None
        or not isinstance(w.extra, SymmPerChannelQuantParams)
        or case.inputs[2].type != T.TENSOR_INT32
    ):
        return case
    scales = tuple(case.inputs[0].scale * s for s in w.extra.scales)
    return case.with_input(2, replace(case.inputs[2], extra=SymmPerChannelQuantParams(scales, 0)))


def expected_stored(slot: Slot, value: np.ndarray) -> np.ndarray:
    """A reference output as the output operand stores it (quantised, rounded) in float64."""
    arr = np.asarray(value)
    if slot.type in QUANT_TYPES:
        info = np.iinfo(slot.dtype)
        q = np.floor(arr.astype(np.float64) / slot.scale + 0.5) + slot.zero_point
        return np.clip(q, info.min, info.max)
    if slot.type in (T.TENSOR_FLOAT16, T.FLOAT16):
        return arr.astype(np.float64)
    if slot.type == T.TENSOR_BOOL8:
        return arr.astype(bool).astype(np.float64)
    if slot.type in (T.TENSOR_INT32, T.INT32) and arr.dtype.kind == "f":
        return np.trunc(arr)
    return arr.astype(np.float64)


def compare(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> str | None:
    """None when `actual` matches `expected` within `tol`, else a one-line reason."""
    exp = np.asarray(expected, dtype=np.float64)
    if tuple(actual.shape) != tuple(exp.shape):
        return f"shape {list(actual.shape)}, expected {list(exp.shape)}"
    act = actual.astype(np.float64)
    err = np.abs(act - exp)
    bad = ~(err <= tol.atol + tol.rtol * np.abs(exp))
    bad &= ~(np.isnan(exp) & np.isnan(act))
    bad &= ~(np.isinf(exp) & (act == exp))
    if not bad.any():
        return None
    k = int(np.flatnonzero(bad)[0])
    return (
        f"{int(bad.sum())} of {bad.size} values out of tolerance ({tol.describe()}); "
        f"first at flat index {k}: got {act.ravel()[k]:.7g}, expected {exp.ravel()[k]:.7g}"
    )
