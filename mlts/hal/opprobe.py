"""One-operation probe models built from the signature table: one per operation and key operand type.

`probe_model(op, key)` is a minimal valid model (by the validator) in which
operation `op` takes the key type `key` (e.g. CONV_2D with a
TENSOR_QUANT8_ASYMM input): tensors from the table's examples, as model
inputs or constants, parameters as constants, optional inputs the example
leaves out as NO_VALUE. Asking a driver's getSupportedOperations about each
probe gives its coverage per operation and type.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from mlts.hal._opspec import BIAS, PC, WEIGHTS, HalVersion, In, OpSpec, Out
from mlts.hal._opspecs import SPECS
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import DTYPE_NAME, SCALAR_TYPES, OperandType, OperationType
from mlts.hal.types import Model, SymmPerChannelQuantParams

__all__ = [
    "ProbeCase",
    "operation_types",
    "probe_cases",
    "probe_model",
    "probe_suite",
    "table_operations",
    "takes_per_channel",
]

T = OperandType
# (scale, zero point) of quantised example operands when the table fixes none.
_DEFAULT_QUANT = {
    T.TENSOR_QUANT8_ASYMM: (0.5, 128),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (0.5, 0),
    T.TENSOR_QUANT8_SYMM: (0.5, 0),
    T.TENSOR_QUANT16_ASYMM: (0.125, 0),
    T.TENSOR_QUANT16_SYMM: (0.125, 0),
}


@dataclass(frozen=True, slots=True)
class ProbeCase:
    """One row of the coverage table: an operation, its key type and the HAL version that combination needs."""

    op: OperationType
    key: OperandType
    version: HalVersion


def has_signature(op: int) -> bool:
    """Whether the signature table describes operation code `op`."""
    return int(op) in SPECS


def table_operations() -> list[OperationType]:
    """Every operation the signature table describes, by code."""
    return sorted(OperationType(c) for c in SPECS)


def operation_types(op: int) -> dict[OperandType, HalVersion]:
    """The key types of `op` with the HAL version that introduced each."""
    return {T(t): HalVersion(v) for t, v in SPECS[int(op)].types.items()}


def probe_cases() -> Iterator[ProbeCase]:
    """(operation, key type, HAL version) for every operation of the table and every key type it takes."""
    for op in table_operations():
        for key, version in operation_types(op).items():
            yield ProbeCase(op, key, version)


def _pick(allowed: frozenset, key: int, override: int | None) -> int:
    if override is not None:
        return override
    if key in allowed:
        return key
    return min(allowed)


def _quant(t: int, fixed: tuple[float, int] | None) -> tuple[float, int]:
    if t == T.TENSOR_INT32 and fixed is not None:
        return fixed  # a bias whose scale NNAPI ties to other operands' scales
    if t not in _DEFAULT_QUANT:
        return 0.0, 0
    if fixed is None:
        return _DEFAULT_QUANT[T(t)]
    scale, zp = fixed
    return scale, zp - 128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else zp


def takes_per_channel(op: int, key: int) -> bool:
    """Whether `op` with key type `key` may take TENSOR_QUANT8_SYMM_PER_CHANNEL weights."""
    spec = SPECS[int(op)]
    return any(slot.types is WEIGHTS and PC in slot.types(key) for slot in spec.forms[0].inputs)


def probe_model(op: int, key: int, per_channel: bool = False) -> Model:
    """A minimal valid one-operation model of `op` whose key operand has type `key`.

    `per_channel` gives the weights TENSOR_QUANT8_SYMM_PER_CHANNEL (where `takes_per_channel`).
    """
    b = ModelBuilder()
    b.mark_outputs(_add_probe(b, op, key, per_channel))
    return b.build()


def probe_suite(cases: Sequence[tuple[int, int, bool]]) -> Model:
    """One model holding the probe of every (operation, key type, per_channel) case: operation k is case k.

    The operations share no operands, so a driver's getSupportedOperations answers for each
    case on its own, in one call.
    """
    if not cases:
        raise ValueError("probe_suite needs at least one case")
    b = ModelBuilder()
    outputs: list[int] = []
    for op, key, per_channel in cases:
        outputs += _add_probe(b, op, key, per_channel)
    b.mark_outputs(outputs)
    return b.build()


def _add_probe(b: ModelBuilder, op: int, key: int, per_channel: bool) -> list[int]:
    """Add the probe operation of (`op`, `key`) and its operands to `b`; returns its output operands."""
    spec = SPECS[int(op)]
    if key not in spec.types:
        raise ValueError(f"{OperationType(op).name} does not take key type {T(key).name}")
    form = spec.forms[0]
    n = spec.probe_count or (len(form.inputs) if form.repeat is not None else min(form.input_counts()))
    scales: list[float] = []
    inputs = []
    for pos in range(n):
        slot = form.inputs[pos]
        t = _pick(slot.types(key), key, spec.probe_types.get(pos, {}).get(key))
        if per_channel and slot.types is WEIGHTS:
            t = PC
        inputs.append(_add_input(b, slot, t, scales, spec.weights_channel_dim))
    n_out = spec.probe_out_count or (2 if form.repeat_out else min(form.output_counts()))
    outputs = []
    for k in range(n_out):
        out = form.outputs[0 if form.repeat_out else k]
        t = _pick(out.types(key), key, spec.probe_types.get(-1 - k, {}).get(key))
        outputs.append(_add_output(b, out, t))
    b.add_operation(spec.op, inputs, outputs)
    return outputs


def _add_input(b: ModelBuilder, slot: In, t: int, scales: list[float], channel_dim: int) -> int:
    ex = slot.ex
    if slot.optional and ex is None:
        scales.append(0.0)
        return b.add_omitted(t, (), *_quant(t, slot.quant))
    if t in SCALAR_TYPES:
        scales.append(0.0)
        return b.add_scalar(ex, t)
    scale, zp = _quant(t, slot.quant)
    if slot.types is BIAS and t == T.TENSOR_INT32 and len(scales) >= 2:
        # Per-channel weights: each channel's bias scale is derived, the operand's is 0.
        scale = 0.0 if b.type_of(b.operand_count - 1) == PC else scales[0] * scales[1]
    scales.append(scale)
    if isinstance(ex, tuple) and t != PC:
        return b.add_input(t, ex, scale, zp)
    # Per-channel tensors carry extra params, which only constants can be given here.
    value = np.ones(ex, dtype=np.int8) if isinstance(ex, tuple) else np.asarray(ex.value)
    arr = value.astype(DTYPE_NAME[T(t)])
    if t == PC:
        extra = SymmPerChannelQuantParams(tuple([0.5] * arr.shape[channel_dim]), channel_dim)
        return b.add_constant(arr, t, extra_params=extra)
    return b.add_constant(arr, t, scale, zp)


def _add_output(b: ModelBuilder, slot: Out, t: int) -> int:
    scale, zp = _quant(t, slot.quant)
    return b.add_operand(t, slot.ex, scale, zp)


def check_spec(spec: OpSpec) -> None:
    """Raise if the table entry cannot yield a probe for each of its key types (used by the tests)."""
    for key in spec.types:
        probe_model(spec.op, key)
