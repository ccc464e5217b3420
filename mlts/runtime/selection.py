"""Choosing a device for a whole model when the user names none (MLTS's "NNAPI reference" run).

As the NNAPI runtime does without an explicit device list: every available
driver is asked which operations of the model it supports
(getSupportedOperations); among the drivers that support all of them, the one
whose getCapabilities promise the lowest cost wins. The cost of a driver is
the sum over operations of the PerformanceInfo for the type of the
operation's first input (execTime for FAST_SINGLE_ANSWER and SUSTAINED_SPEED,
powerUsage for LOW_POWER); ties go to the first name in sorted order. This
places the model on one device; a model that no single driver supports
fully is refused with a clear error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mlts.hal.enums import ErrorStatus, ExecutionPreference
from mlts.hal.errors import HalError
from mlts.hal.interface import Device
from mlts.hal.types import Model


@dataclass(frozen=True)
class Choice:
    name: str
    cost: float
    reason: str


def model_cost(device: Device, model: Model, preference: ExecutionPreference) -> float:
    """Summed PerformanceInfo of the device for each operation's first-input operand type."""
    caps = device.getCapabilities()
    sub = model.main
    total = 0.0
    for op in sub.operations:
        if not op.inputs:
            continue
        info = caps.performance_of(sub.operands[op.inputs[0]].type)
        total += info.power_usage if preference == ExecutionPreference.LOW_POWER else info.exec_time
    return total


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
            ErrorStatus.BAD_DATA,
            f"no single driver supports every operation of the model ({detail})",
        )
    cost, name = min(candidates)
    others = ", ".join(f"{n} {c:.3g}" for c, n in sorted(candidates) if n != name)
    reason = f"supports all {len(model.main.operations)} operations, cost {cost:.3g}" + (
        f" (others: {others})" if others else ""
    )
    return Choice(name, cost, reason)
