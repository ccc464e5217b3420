"""Signed and unsigned 8-bit results that agree: the operations suite's `signed-vs-unsigned` cases.

HAL 1.3 adds TENSOR_QUANT8_ASYMM_SIGNED: a value q of a signed operand with
zero point z means what q + 128 means with zero point z + 128 in
TENSOR_QUANT8_ASYMM. So for every operation a driver claims in both types
(getSupportedOperations), the same case with every unsigned quant8 operand
(inputs, constants, outputs) moved to the signed type, zero point and values
shifted down by 128, must give the unsigned results shifted down by 128. NNAPI's
own signed tests are generated from the unsigned ones this way.

A case passes when every quant8 output agrees within one unit after the shift
(the CTS tolerance of quantized results, which allows a driver's two kernels to
round a tie differently) and every other output (float, int, bool) agrees as the
CTS compares that type. PAD_V2's pad value is given in the input's quantized
units, so it shifts too. CAST, HASHTABLE_LOOKUP, LSH_PROJECTION and
QUANTIZED_16BIT_LSTM are left out, as NNAPI leaves them out of the signed
variants (their results depend on the raw stored values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from mlts.hal.enums import OperandType, OperationType
from mlts.validate.core import CaseResult, SuiteOptions, Target, run_case
from mlts.validate.operations_data import compare, tolerance
from mlts.validate.operations_exec import PreparedCase
from mlts.validate.operations_model import OpModel, Slot, assemble

U8 = OperandType.TENSOR_QUANT8_ASYMM
S8 = OperandType.TENSOR_QUANT8_ASYMM_SIGNED
CHECK = "signed-vs-unsigned"
#: Operations NNAPI gives no signed variant of the same meaning.
LEFT_OUT = frozenset(
    {
        OperationType.CAST,
        OperationType.HASHTABLE_LOOKUP,
        OperationType.LSH_PROJECTION,
        OperationType.QUANTIZED_16BIT_LSTM,
    }
)
#: Scalar inputs given in the quantized units of the operation's input (shifted with it).
QUANTIZED_SCALARS = {OperationType.PAD_V2: 2}


def _signed_values(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values).astype(np.int16) - 128).astype(np.int8)


def _signed_slot(slot: Slot) -> Slot:
    if slot.type != U8:
        return slot
    value = None if slot.value is None else _signed_values(slot.value)
    return replace(slot, type=int(S8), zero_point=slot.zero_point - 128, value=value)


def to_signed(case: OpModel, inputs: list[np.ndarray]) -> tuple[OpModel, list[np.ndarray]]:
    """The case with its unsigned quant8 operands signed (zero points and values 128 down), and its inputs."""
    slots = [_signed_slot(s) for s in case.inputs]
    scalar = QUANTIZED_SCALARS.get(OperationType(case.op))
    if scalar is not None and slots[scalar].value is not None and case.inputs[0].type == U8:
        slots[scalar] = replace(slots[scalar], value=np.asarray(slots[scalar].value) - 128)
    model_inputs = iter(inputs)
    signed_inputs = []
    for slot in case.inputs:
        if slot.kind != "input":
            continue
        value = next(model_inputs)
        signed_inputs.append(_signed_values(value) if slot.type == U8 else value)
    outputs = tuple(_signed_slot(s) for s in case.outputs)
    return replace(case, inputs=tuple(slots), outputs=outputs), signed_inputs


def disagreement(case: OpModel, unsigned: list[np.ndarray], signed: list[np.ndarray]) -> str | None:
    """Why the signed outputs do not agree with the unsigned ones, or None."""
    if len(unsigned) != len(signed):
        return f"{len(unsigned)} unsigned outputs, {len(signed)} signed"
    worst = 0
    for k, (slot, u, s) in enumerate(zip(case.outputs, unsigned, signed, strict=True)):
        if u.shape != s.shape:
            return f"output {k}: shape {list(s.shape)} signed, {list(u.shape)} unsigned"
        if slot.type == U8:
            diff = np.abs(u.astype(np.int32) - (s.astype(np.int32) + 128))
            far = int(diff.max()) if diff.size else 0
            worst = max(worst, far)
            if far > 1:
                at = np.unravel_index(int(np.argmax(diff)), diff.shape)
                return (
                    f"output {k}: signed + 128 differs from unsigned by {far} units at {list(map(int, at))} "
                    f"(signed {int(s[at])}, unsigned {int(u[at])}); at most 1 is allowed"
                )
            continue
        problem = compare(s.astype(np.float64), u.astype(np.float64), tolerance(slot, relaxed=False))
        if problem:
            return f"output {k}: signed and unsigned runs differ: {problem}"
    return None


def _run(target: Target, case: OpModel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    prepared = PreparedCase(target.device(), assemble(case))
    try:
        return prepared.run("sync", inputs)[0]
    finally:
        prepared.close()


def run_pairs(
    target: Target,
    pairs: list[tuple[Any, Any]],
    options: SuiteOptions,
    emit: Callable[[CaseResult], None],
    suite: str,
    case_name: Callable[[Any, str], str],
) -> None:
    """One case per (unsigned variant, signed combination) a driver claims both of: each runs on the sync
    path twice, once per type. `case_name(combo, check)` names it."""
    for variant, signed_combo in pairs:
        name = case_name(signed_combo, CHECK)
        if not options.wants(name):
            continue

        def body(variant: Any = variant) -> str | None:
            unsigned = _run(target, variant.case, variant.inputs)
            case, inputs = to_signed(variant.case, variant.inputs)
            signed = _run(target, case, inputs)
            return disagreement(variant.case, unsigned, signed)

        run_case(target, suite, name, body, emit)
