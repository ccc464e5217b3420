"""Partitioning a model across drivers, as the NNAPI runtime does when no device is named.

Every driver is asked which operations it supports (getSupportedOperations).
Each operation goes to the supporting driver whose capabilities promise the
lowest cost for it (`selection.operation_performance`: execTime for
FAST_SINGLE_ANSWER and SUSTAINED_SPEED, powerUsage for LOW_POWER, of the
operation's first input type); ties go to the first name in sorted order, and
an operation no driver supports goes to the runtime's CPU path (`CPU`).

Operations are then grouped into steps by a topological walk that keeps
taking ready operations of the current step's device (lowest index first)
and opens a new step only when none is ready, so a step starts only once
every tensor it reads exists. Each step becomes a self-contained Model,
built with ModelBuilder: its inputs are the model inputs and intermediates
it reads, its outputs the model outputs it writes and the intermediates
later steps read; the constants it uses are copied into it.

A model with control flow (IF, WHILE and their referenced subgraphs) is not
cut: it runs whole, as one step, on the driver that supports every one of its
operations at the lowest promised cost (ifPerformance/whilePerformance are in
each operation's first input type's entry), else on the CPU path, so a
control-flow operation and its subgraphs always stay together.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlts.hal.builder import ModelBuilder
from mlts.hal.describe import operation_type_name
from mlts.hal.enums import (
    DTYPE_NAME,
    ErrorStatus,
    ExecutionPreference,
    OperandLifeTime,
    OperandType,
    is_extension_type,
)
from mlts.hal.errors import HalError
from mlts.hal.extensions import resolve
from mlts.hal.interface import Device
from mlts.hal.types import Capabilities, ExtensionData, Model, Operand
from mlts.hal.validate import validate_model
from mlts.runtime.selection import operation_performance

#: The name under which the runtime's own CPU path appears in plans and coverage.
CPU = "cpu"

L = OperandLifeTime
_CONSTANTS = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE)


@dataclass(frozen=True)
class Step:
    """Operations run together on one device, as the sub-model `model`.

    `inputs` and `outputs` are operand indexes of the partitioned model, in the
    order of the sub-model's inputs and outputs.
    """

    index: int
    device: str
    operations: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    model: Model


@dataclass(frozen=True)
class PartitionPlan:
    """Where each operation of a model runs and the steps that run them."""

    model: Model
    preference: ExecutionPreference
    devices: tuple[str, ...]  # the candidate drivers, sorted
    assignment: tuple[str, ...]  # device (or CPU) per operation of the main subgraph
    steps: tuple[Step, ...]
    unavailable: Mapping[str, str] = field(default_factory=dict)  # driver -> why it was not used

    def coverage(self) -> dict[str, int]:
        """Operations per device: every candidate driver and the CPU path, zeros included."""
        return count_operations(self.assignment, self.devices)

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description: per operation (index, type, device, step), the steps, the counts."""
        step_of = {op: step.index for step in self.steps for op in step.operations}
        return {
            "preference": ExecutionPreference(self.preference).name,
            "operations": [
                {
                    "index": k,
                    "type": operation_type_name(op.type, self.model),
                    "device": self.assignment[k],
                    "step": step_of[k],
                }
                for k, op in enumerate(self.model.main.operations)
            ],
            "steps": [
                {
                    "index": step.index,
                    "device": step.device,
                    "operations": list(step.operations),
                    "inputs": list(step.inputs),
                    "outputs": list(step.outputs),
                }
                for step in self.steps
            ],
            "coverage": self.coverage(),
            "unavailable": dict(self.unavailable),
        }


def count_operations(assignment: Sequence[str], devices: Sequence[str]) -> dict[str, int]:
    """Operations per device name, listing `devices` and CPU even when they run none."""
    counts = {name: 0 for name in (*devices, CPU)}
    for name in assignment:
        counts[name] = counts.get(name, 0) + 1
    return counts


# ---------------------------------------------------------------- assignment


@dataclass(frozen=True)
class DeviceAnswers:
    """What one driver said about a model: its capabilities and which operations it supports."""

    capabilities: Capabilities
    supported: tuple[bool, ...]


def query_devices(
    devices: Mapping[str, Device], model: Model
) -> tuple[dict[str, DeviceAnswers], dict[str, str]]:
    """Each driver's getCapabilities and getSupportedOperations, and why a driver that failed is left out."""
    count = len(model.main.operations)
    answers: dict[str, DeviceAnswers] = {}
    unavailable: dict[str, str] = {}
    for name in sorted(devices):
        try:
            caps = devices[name].getCapabilities()
            supported = tuple(bool(x) for x in devices[name].getSupportedOperations(model))
        except HalError as e:
            unavailable[name] = f"{e}"
            continue
        if len(supported) != count:
            unavailable[name] = f"getSupportedOperations gave {len(supported)} answers for {count} operations"
            continue
        answers[name] = DeviceAnswers(caps, supported)
    return answers, unavailable


def assign_devices(
    model: Model, answers: Mapping[str, DeviceAnswers], preference: ExecutionPreference
) -> tuple[str, ...]:
    """Per operation, the supporting driver of lowest promised cost (first name on ties), else CPU."""
    chosen = []
    for k, op in enumerate(model.main.operations):
        best, best_cost = CPU, 0.0
        for name in sorted(answers):
            if not answers[name].supported[k]:
                continue
            cost = operation_performance(answers[name].capabilities, model, op, preference)
            if best == CPU or cost < best_cost:
                best, best_cost = name, cost
        if best == CPU:
            found = resolve(model, op.type)
            if found is not None:
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"operation {k} uses extension {found[0]!r} (operation {found[1]}), which no selected driver "
                    f"supports ({', '.join(sorted(answers)) or 'none answered'}); extension operations have no CPU fallback",
                )
        chosen.append(best)
    return tuple(chosen)


# ---------------------------------------------------------------- steps


def _dependencies(model: Model) -> list[set[int]]:
    """Per operation, the operations that write an operand it reads."""
    operations = model.main.operations
    writer = {i: k for k, op in enumerate(operations) for i in op.outputs}
    return [{writer[i] for i in op.inputs if i in writer} for op in operations]


def group_steps(model: Model, assignment: Sequence[str]) -> list[tuple[str, list[int]]]:
    """(device, operations in run order) per step, from a topological walk that prefers the current device."""
    deps = _dependencies(model)
    waiting = [len(d) for d in deps]
    dependents: list[list[int]] = [[] for _ in deps]
    for k, d in enumerate(deps):
        for j in d:
            dependents[j].append(k)
    ready: dict[str, list[int]] = {}
    for k, n in enumerate(waiting):
        if n == 0:
            heapq.heappush(ready.setdefault(assignment[k], []), k)
    steps: list[tuple[str, list[int]]] = []
    while any(ready.values()):
        current = steps[-1][0] if steps else None
        if current is None or not ready.get(current):
            current = min((heap[0], name) for name, heap in ready.items() if heap)[1]
            steps.append((current, []))
        k = heapq.heappop(ready[current])
        steps[-1][1].append(k)
        for j in dependents[k]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready.setdefault(assignment[j], []), j)
    return steps


def step_interfaces(
    model: Model, steps: Sequence[Sequence[int]]
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(inputs, outputs) per step, as sorted operand indexes of `model`.

    Inputs: model inputs and intermediates a step reads but does not write. Outputs: what it
    writes that is a model output or read by another step; a step whose results nobody reads
    outputs them all, so that its sub-model stays valid.
    """
    sub = model.main
    model_outputs = set(sub.output_indexes)
    step_of_reader: dict[int, set[int]] = {}
    for s, ops in enumerate(steps):
        for k in ops:
            for i in sub.operations[k].inputs:
                step_of_reader.setdefault(i, set()).add(s)
    result = []
    for s, ops in enumerate(steps):
        written = {i for k in ops for i in sub.operations[k].outputs}
        read = {i for k in ops for i in sub.operations[k].inputs}
        inputs = sorted(
            i
            for i in read - written
            if sub.operands[i].lifetime in (L.SUBGRAPH_INPUT, L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT)
        )
        outputs = sorted(i for i in written if i in model_outputs or step_of_reader.get(i, set()) - {s})
        if not outputs:
            outputs = sorted(i for i in written if i not in step_of_reader)
        result.append((tuple(inputs), tuple(outputs)))
    return result


# ---------------------------------------------------------------- sub-models


def constant_bytes(model: Model, operand: Operand) -> bytes:
    """The raw bytes of a CONSTANT_COPY or CONSTANT_REFERENCE operand."""
    loc = operand.location
    if operand.lifetime == L.CONSTANT_COPY:
        return bytes(memoryview(model.operand_values)[loc.offset : loc.offset + loc.length])
    return bytes(model.pools[loc.pool_index].buffer[loc.offset : loc.offset + loc.length])


def constant_array(model: Model, operand: Operand) -> np.ndarray:
    """The value of a CONSTANT_COPY or CONSTANT_REFERENCE operand as a NumPy array (rank 0 for scalars)."""
    loc = operand.location
    if operand.lifetime == L.CONSTANT_COPY:
        raw = memoryview(model.operand_values)[loc.offset : loc.offset + loc.length]
    else:
        raw = model.pools[loc.pool_index].buffer[loc.offset : loc.offset + loc.length]
    dtype = np.dtype(DTYPE_NAME[OperandType(operand.type)])
    return np.frombuffer(raw, dtype=dtype).reshape(operand.dimensions)


def _copy_operand(builder: ModelBuilder, model: Model, operand: Operand) -> int:
    """A constant, omitted or temporary operand of the sub-model with the same type and value."""
    if operand.lifetime in _CONSTANTS and is_extension_type(operand.type):
        index = builder.add_extension_value(operand.type, constant_bytes(model, operand), operand.dimensions)
        if isinstance(operand.extra_params, ExtensionData):
            builder.set_operand_extension_data(index, operand.extra_params.data)
        return index
    if operand.lifetime in _CONSTANTS:
        return builder.add_constant(
            constant_array(model, operand),
            operand.type,
            operand.scale,
            operand.zero_point,
            operand.extra_params,
        )
    if operand.lifetime == L.NO_VALUE:
        return builder.add_omitted(
            operand.type, operand.dimensions, operand.scale, operand.zero_point, operand.extra_params
        )
    return builder.add_operand(
        operand.type, operand.dimensions, operand.scale, operand.zero_point, operand.extra_params
    )


def build_step_model(
    model: Model, operations: Sequence[int], inputs: Sequence[int], outputs: Sequence[int]
) -> Model:
    """The self-contained Model of one step; raises ValueError when ModelBuilder cannot express it."""
    sub = model.main
    builder = ModelBuilder()
    for entry in model.extension_name_to_prefix:
        builder.use_extension(entry.name, entry.prefix)  # the same codes in every sub-model
    new: dict[int, int] = {}
    for i in inputs:
        operand = sub.operands[i]
        if operand.extra_params is not None:
            raise ValueError(f"operand {i} crosses steps but carries extra parameters")
        new[i] = builder.add_input(operand.type, operand.dimensions, operand.scale, operand.zero_point)
    for k in operations:
        op = sub.operations[k]
        for i in (*op.inputs, *op.outputs):
            if i not in new:
                new[i] = _copy_operand(builder, model, sub.operands[i])
        builder.add_operation(op.type, [new[i] for i in op.inputs], [new[i] for i in op.outputs])
    builder.mark_outputs([new[i] for i in outputs])
    return builder.build(relax=model.relax_computation_float32_to_float16)


def _make_step(
    model: Model, index: int, device: str, ops: list[int], io: tuple[tuple[int, ...], tuple[int, ...]]
) -> Step:
    """Step `index` with its sub-model built and validated; a sub-model that cannot be built is an error."""
    inputs, outputs = io
    try:
        sub_model = build_step_model(model, ops, inputs, outputs)
        validate_model(sub_model)
    except (ValueError, KeyError, HalError) as e:
        detail = e.message if isinstance(e, HalError) else str(e)
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"cannot build the sub-model of step {index} ({device}, operations {ops}): {detail}",
        ) from None
    return Step(index, device, tuple(ops), inputs, outputs, sub_model)


# ---------------------------------------------------------------- the plan


def plan_partition(
    model: Model,
    devices: Mapping[str, Device],
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
) -> PartitionPlan:
    """Assign every operation of `model` to a driver or the CPU path and cut it into runnable steps."""
    if CPU in devices:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"a driver may not be named {CPU!r}: that name is the runtime's CPU path",
        )
    validate_model(model)
    answers, unavailable = query_devices(devices, model)
    if model.referenced:
        return _whole_model_plan(model, devices, answers, unavailable, preference)
    assignment = assign_devices(model, answers, preference)
    grouped = group_steps(model, assignment)
    interfaces = step_interfaces(model, [ops for _, ops in grouped])
    steps = tuple(
        _make_step(model, s, device, ops, io)
        for s, ((device, ops), io) in enumerate(zip(grouped, interfaces, strict=True))
    )
    return PartitionPlan(
        model, ExecutionPreference(preference), tuple(sorted(devices)), assignment, steps, unavailable
    )


def _whole_model_plan(
    model: Model,
    devices: Mapping[str, Device],
    answers: Mapping[str, DeviceAnswers],
    unavailable: dict[str, str],
    preference: ExecutionPreference,
) -> PartitionPlan:
    """One step: the whole model on the cheapest driver that supports all of it, else on the CPU path."""
    best, best_cost = CPU, 0.0
    for name in sorted(answers):
        if not all(answers[name].supported):
            continue
        caps = answers[name].capabilities
        cost = sum(operation_performance(caps, model, op, preference) for op in model.main.operations)
        if best == CPU or cost < best_cost:
            best, best_cost = name, cost
    ops = tuple(range(len(model.main.operations)))
    sub = model.main
    step = Step(0, best, ops, tuple(sub.input_indexes), tuple(sub.output_indexes), model)
    return PartitionPlan(
        model,
        ExecutionPreference(preference),
        tuple(sorted(devices)),
        tuple(best for _ in ops),
        (step,),
        unavailable,
    )
