"""Choosing a device for a whole model when the user names none (MLTS's "NNAPI reference" run).

As the NNAPI runtime does without an explicit device list: every available
driver is asked which operations of the model it supports
(getSupportedOperations); among the drivers that support all of them, the one
whose getCapabilities promise the lowest cost wins. The cost of a driver is
the sum over operations of the PerformanceInfo for the type of the
operation's first input (execTime for FAST_SINGLE_ANSWER and SUSTAINED_SPEED,
powerUsage for LOW_POWER; the relaxed entries when the model allows float16
computation); ties go to the first name in sorted order. This places the
model on one device; a model that no single driver supports fully is
refused with a clear error. `mlts.runtime.partition` splits a model across
drivers instead, with the runtime's CPU path for what none supports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mlts.hal.enums import ErrorStatus, ExecutionPreference, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.interface import Device
from mlts.hal.types import FLT_MAX, Capabilities, Model, Operation, PerformanceInfo


@dataclass(frozen=True)
class Choice:
    name: str
    cost: float
    reason: str


def operation_performance(
    caps: Capabilities, model: Model, op: Operation, preference: ExecutionPreference
) -> float:
    """What `caps` promise for `op`: powerUsage for LOW_POWER, else execTime, as NNAPI's runtime reads them.

    IF and WHILE use ifPerformance/whilePerformance; other operations the entry of their first
    input's operand type, or the relaxed float32-to-float16 entry (scalar or tensor) when the model
    allows relaxed computation and that input is float32. A missing type counts as FLT_MAX.
    """
    if op.type == OperationType.IF:
        info = caps.if_performance
    elif op.type == OperationType.WHILE:
        info = caps.while_performance
    elif not op.inputs:
        info = PerformanceInfo(FLT_MAX, FLT_MAX)
    else:
        operand_type = model.main.operands[op.inputs[0]].type
        relaxed = model.relax_computation_float32_to_float16
        if relaxed and operand_type == OperandType.TENSOR_FLOAT32:
            info = caps.relaxed_float32_to_float16_performance_tensor
        elif relaxed and operand_type == OperandType.FLOAT32:
            info = caps.relaxed_float32_to_float16_performance_scalar
        else:
            info = caps.performance_of(operand_type)
    return info.power_usage if preference == ExecutionPreference.LOW_POWER else info.exec_time


def model_cost(device: Device, model: Model, preference: ExecutionPreference) -> float:
    """Summed `operation_performance` of the device over the operations of the main subgraph."""
    caps = device.getCapabilities()
    return sum(operation_performance(caps, model, op, preference) for op in model.main.operations)


def choose_device(
    devices: Mapping[str, Device],
    model: Model,
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
) -> Choice:
    """The driver that supports every operation at the lowest promised cost; HalError when none does."""
    candidates: list[tuple[float, str]] = []
    refusals: list[str] = []
    for name in sorted(devices):
        try:
            supported = devices[name].getSupportedOperations(model)
        except HalError as e:
            refusals.append(f"{name}: {e.status.name}")
            continue
        missing = [i for i, ok in enumerate(supported) if not ok]
        if missing:
            refusals.append(f"{name}: {len(missing)} of {len(supported)} operations unsupported")
            continue
        candidates.append((model_cost(devices[name], model, preference), name))
    if not candidates:
        detail = "; ".join(refusals) or "no drivers are available"
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"no single driver supports every operation of the model ({detail})",
        )
    cost, name = min(candidates)
    others = ", ".join(f"{n} {c:.3g}" for c, n in sorted(candidates) if n != name)
    reason = f"supports all {len(model.main.operations)} operations, cost {cost:.3g}" + (
        f" (others: {others})" if others else ""
    )
    return Choice(name, cost, reason)
