"""Running a partitioned model: one Session per step, intermediates passed as NumPy arrays, CPU fallback.

`PartitionedSession` plans the model with `mlts.runtime.partition.plan_partition`,
prepares every step on its device and runs the steps in order, handing each
the model inputs and intermediate tensors it reads. When a driver fails to
prepare its step, the whole model runs on the CPU path instead, as NNAPI's
compilation falls back (CompilationBuilder::finish: the plan becomes one CPU
step): the steps prepared so far are released and the failure is recorded
with its reason. As in NNAPI, INVALID_ARGUMENT (a driver calling the request
itself bad, NNAPI's BAD_DATA) is not recovered from, and neither is a model
with extension operations, which the CPU path cannot run.

The runtime's CPU path is a Device loaded in this process from a factory
spec: by default `driver.variants:SampleAll`, the bundled reference driver's
NumPy executor. Any spec `mlts.hal.loader.load_factory` resolves (or a
callable returning a Device) replaces it through `cpu_factory`. The spec is
resolved at run time and only when a step needs the CPU path, so the runtime
never imports the driver package itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.hal import vlog
from mlts.hal.enums import (
    DTYPE_NAME,
    UINT64_MAX,
    ErrorStatus,
    ExecutionPreference,
    OperandType,
    Priority,
)
from mlts.hal.errors import HalError
from mlts.hal.extensions import extensions_used
from mlts.hal.interface import Device
from mlts.hal.loader import FactoryError, load_factory
from mlts.hal.types import ExecutionResult, Model, OutputShape, Timing
from mlts.runtime import allowlist
from mlts.runtime.execution import DEFAULT_MODE
from mlts.runtime.partition import CPU, PartitionPlan, Step, count_operations, plan_partition
from mlts.runtime.partition_buffers import IntermediateBuffers, allocate_intermediates
from mlts.runtime.session import Session

#: The runtime's CPU path unless told otherwise: the bundled sample driver that supports every operation.
DEFAULT_CPU_SPEC = "driver.variants:SampleAll"

CpuFactory = str | Callable[[], Device]


def load_cpu_device(factory: CpuFactory = DEFAULT_CPU_SPEC) -> Device:
    """The CPU path's Device, made in this process from a factory spec or callable."""
    what = factory if isinstance(factory, str) else getattr(factory, "__qualname__", repr(factory))
    try:
        make = load_factory(factory) if isinstance(factory, str) else factory
        device = make()
    except FactoryError as e:
        raise HalError(
            ErrorStatus.DEVICE_UNAVAILABLE, f"the runtime's CPU path cannot be loaded: {e}"
        ) from None
    except HalError as e:
        raise HalError(e.status, f"the runtime's CPU path {what!r} failed to start: {e.message}") from None
    except Exception as e:  # a broken factory is configuration, reported in one line
        raise HalError(
            ErrorStatus.DEVICE_UNAVAILABLE,
            f"the runtime's CPU path {what!r} failed to start: {type(e).__name__}: {e}",
        ) from None
    if not isinstance(device, Device):
        raise HalError(
            ErrorStatus.DEVICE_UNAVAILABLE,
            f"the runtime's CPU path {what!r} made a {type(device).__name__}, not a Device",
        )
    return device


@dataclass(frozen=True)
class Fallback:
    """Step `step` was planned on `device`, which could not prepare it: the model runs on the CPU path."""

    step: int
    device: str
    reason: str


@dataclass(frozen=True)
class StepRun:
    """One step of one execution: where it ran, the driver's result, and its wall time in seconds."""

    step: int
    device: str
    result: ExecutionResult
    seconds: float


@dataclass(frozen=True)
class PartitionedResult:
    """What `PartitionedSession.run` returns beside the outputs; shaped like an ExecutionResult.

    `timing` sums the steps' Timing (CPU-path steps included) when every step measured it,
    else it is not measured.
    """

    output_shapes: tuple[OutputShape, ...]
    timing: Timing
    steps: tuple[StepRun, ...]


def total_timing(results: Sequence[ExecutionResult]) -> Timing:
    """Summed timeOnDevice and timeInDriver; UINT64_MAX for a field any result did not measure."""

    def total(values: list[int]) -> int:
        return UINT64_MAX if not values or UINT64_MAX in values else sum(values)

    return Timing(
        total([r.timing.time_on_device for r in results]),
        total([r.timing.time_in_driver for r in results]),
    )


def release_after(plan: PartitionPlan, steps: Sequence[Step] | None = None) -> list[tuple[int, ...]]:
    """Per step (of `plan`, or `steps` run instead), the intermediates no later step reads (dropped once
    the step has run)."""
    steps = plan.steps if steps is None else steps
    keep = set(plan.model.main.output_indexes)
    last_reader: dict[int, int] = {}
    for step in steps:
        for i in step.inputs:
            last_reader[i] = step.index
    return [tuple(i for i, s in last_reader.items() if s == step.index and i not in keep) for step in steps]


class PartitionedSession:
    """A model split across drivers and the CPU path, prepared once; not thread-safe (one run at a time).

    Attributes: `plan` (the PartitionPlan), `steps` (what runs: the plan's steps, or after a
    fallback one CPU step with the whole model), `step_devices` (where each of them runs),
    `prepare_seconds` (per step; after a fallback the failed attempts included), `fallbacks` (the
    driver that failed to prepare its step), `whole_model_fallback` (True after a fallback),
    `cpu_device` (None until a step needs the CPU path).
    """

    def __init__(
        self,
        model: Model,
        devices: Mapping[str, Device],
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        *,
        cpu_factory: CpuFactory = DEFAULT_CPU_SPEC,
        priority: Priority = Priority.MEDIUM,
        measure: bool = True,
        mode: str = DEFAULT_MODE,
        driver_buffers: bool = True,
    ) -> None:
        self.model = model
        allowlist.check_model(model)
        self.plan = plan_partition(model, devices, preference)
        self.cpu_factory = cpu_factory
        self.cpu_device: Device | None = None
        self.step_devices: list[str] = []
        self.prepare_seconds: list[float] = []
        self.fallbacks: list[Fallback] = []
        self._devices = devices
        self._options: dict[str, Any] = {
            "preference": preference,
            "priority": priority,
            "measure": measure,
            "mode": mode,
        }
        self._sessions: list[Session] = []
        self.steps: tuple[Step, ...] = self.plan.steps
        self.whole_model_fallback = False
        self._closed = False
        #: Intermediates kept in driver buffers (memory domains); None when not asked for.
        self.buffers: IntermediateBuffers | None = None
        try:
            started = time.perf_counter()
            for step in self.plan.steps:
                if not self._prepare(step):
                    self._fall_back(time.perf_counter() - started)
                    break
            if driver_buffers and not self.whole_model_fallback:
                self.buffers = allocate_intermediates(self.plan, self._sessions, self.step_devices)
        except BaseException:
            self.close()
            raise
        self._release = release_after(self.plan, self.steps)
        vlog.log("compilation", "partitioned: %s", self.summary())
        # Each step's driver buffer tokens (position -> token) for its inputs and its outputs.
        self._tokens = [
            (self.buffers.tokens(step.inputs), self.buffers.tokens(step.outputs))
            if self.buffers
            else ({}, {})
            for step in self.steps
        ]

    # ------------------------------------------------------------ preparation

    def _prepare(self, step: Step) -> bool:
        """Prepare `step` on its device (or the CPU path when that is its place); False when its driver
        failed in a way the whole model's CPU fallback recovers from (recorded in `fallbacks`)."""
        start = time.perf_counter()
        if step.device == CPU:
            session = self._cpu_session(step)
        else:
            found = self._device_session(step)
            if found is None:
                return False
            session = found
        self._sessions.append(session)
        self.step_devices.append(step.device if step.device != CPU else CPU)
        self.prepare_seconds.append(time.perf_counter() - start)
        return True

    def _device_session(self, step: Step) -> Session | None:
        """A Session of `step` on its planned driver; None (and a recorded fallback) when it fails to prepare."""
        try:
            return Session(self._devices[step.device], step.model, **self._options)
        except HalError as e:
            used = extensions_used(self.model)
            if used:  # the runtime's CPU path never runs vendor extensions
                raise HalError(
                    e.status,
                    f"step {step.index} failed on {step.device} and the model uses extension {used[0]!r} "
                    f"(extension operations have no CPU fallback): {e.message}",
                ) from None
            if e.status == ErrorStatus.INVALID_ARGUMENT:  # NNAPI's BAD_DATA: no fallback
                raise HalError(
                    e.status, f"step {step.index} on {step.device} failed to prepare: {e.message}"
                ) from None
            self.fallbacks.append(Fallback(step.index, step.device, str(e)))
            vlog.log(
                "compilation",
                "step %d failed to prepare on %s (%s): the whole model falls back to the CPU path",
                step.index,
                step.device,
                e,
            )
            return None

    def _fall_back(self, seconds: float) -> None:
        """After a driver failed to prepare its step: release what was prepared, and prepare the whole
        model as one step on the CPU path (NNAPI's compilation fallback)."""
        sessions, self._sessions = self._sessions, []
        for session in reversed(sessions):
            session.close()
        sub = self.model.main
        whole = Step(
            0,
            CPU,
            tuple(range(len(sub.operations))),
            tuple(sub.input_indexes),
            tuple(sub.output_indexes),
            self.model,
        )
        start = time.perf_counter()
        self._sessions.append(self._cpu_session(whole))
        self.steps = (whole,)
        self.step_devices = [CPU]
        self.prepare_seconds = [seconds + time.perf_counter() - start]
        self.whole_model_fallback = True

    def _cpu_session(self, step: Step) -> Session:
        if self.cpu_device is None:
            self.cpu_device = load_cpu_device(self.cpu_factory)
        try:
            return Session(self.cpu_device, step.model, **self._options)
        except HalError as e:
            what = "the whole model" if step.model is self.model else f"step {step.index}"
            raise HalError(
                e.status,
                f"{what} (operations {list(step.operations)}) cannot be prepared on the "
                f"runtime's CPU path: {e.message}",
            ) from None

    # ------------------------------------------------------------ running

    def _model_inputs(self, inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        """The inputs keyed by operand index, after checking their count and dtypes."""
        sub = self.model.main
        if len(inputs) != len(sub.input_indexes):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                f"the model has {len(sub.input_indexes)} inputs, {len(inputs)} arrays were given",
            )
        values = {}
        for k, (index, value) in enumerate(zip(sub.input_indexes, inputs, strict=True)):
            arr = np.asarray(value)
            code = sub.operands[index].type
            want = DTYPE_NAME.get(OperandType(code)) if code in OperandType._value2member_map_ else None
            if want is not None and arr.dtype != np.dtype(want):
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"input {k} has dtype {arr.dtype}; the model's operand is {OperandType(code).name} ({want})",
                )
            values[index] = arr
        return values

    def run(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], PartitionedResult]:
        """Execute every step once; returns the model outputs and a PartitionedResult."""
        if self._closed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "the partitioned session is closed")
        values = self._model_inputs(inputs)
        runs = []
        for step, session, device, release, (in_tokens, out_tokens) in zip(
            self.steps, self._sessions, self.step_devices, self._release, self._tokens, strict=True
        ):
            start = time.perf_counter()
            try:
                outputs, result = session.run(
                    [None if k in in_tokens else values[i] for k, i in enumerate(step.inputs)],
                    in_tokens=in_tokens,
                    out_tokens=out_tokens,
                )
            except HalError as e:
                raise HalError(e.status, f"step {step.index} on {device}: {e.message}") from None
            runs.append(StepRun(step.index, device, result, time.perf_counter() - start))
            for i, arr in zip(step.outputs, outputs, strict=True):
                if arr is not None:
                    values[i] = arr
            for i in release:
                values.pop(i, None)
        model_outputs = [values[i] for i in self.model.main.output_indexes]
        shapes = tuple(OutputShape(tuple(int(d) for d in arr.shape)) for arr in model_outputs)
        return model_outputs, PartitionedResult(shapes, total_timing([r.result for r in runs]), tuple(runs))

    # ------------------------------------------------------------ reporting

    def ran_on(self) -> tuple[str, ...]:
        """Per operation, where it runs after fallbacks: a driver name or CPU."""
        where = list(self.plan.assignment)
        for step, device in zip(self.steps, self.step_devices, strict=True):
            for k in step.operations:
                where[k] = device
        return tuple(where)

    def coverage(self) -> dict[str, int]:
        """Operations per device after fallbacks: every candidate driver and the CPU path, zeros included."""
        return count_operations(self.ran_on(), self.plan.devices)

    def describe(self) -> dict[str, Any]:
        """The plan's JSON-ready description plus where each operation and step ran, prepare times, fallbacks."""
        doc = self.plan.describe()
        where = self.ran_on()
        for op in doc["operations"]:
            op["ran_on"] = where[op["index"]]
        if self.whole_model_fallback:
            for entry in doc["steps"]:  # planned, never run: the whole model ran as one CPU step
                entry["ran_on"] = CPU
                entry["prepare_ms"] = None
            doc["whole_model_prepare_ms"] = self.prepare_seconds[0] * 1000.0
        else:
            for entry, device, seconds in zip(
                doc["steps"], self.step_devices, self.prepare_seconds, strict=True
            ):
                entry["ran_on"] = device
                entry["prepare_ms"] = seconds * 1000.0
        doc["ran_on"] = self.coverage()
        doc["driver_buffers"] = self.buffers.describe() if self.buffers is not None else None
        doc["fallbacks"] = [{"step": f.step, "device": f.device, "reason": f.reason} for f in self.fallbacks]
        doc["whole_model_fallback"] = self.whole_model_fallback
        cpu = self.cpu_factory
        doc["cpu_path"] = cpu if isinstance(cpu, str) else getattr(cpu, "__qualname__", repr(cpu))
        return doc

    def summary(self) -> str:
        """One line: operations per device, the number of steps and the fallbacks."""
        counts = ", ".join(f"{name} {n}" for name, n in self.coverage().items() if n)
        text = f"{len(self.plan.steps)} steps; operations: {counts}"
        if self.fallbacks:
            text += "; whole model on the CPU path: " + "; ".join(
                f"step {f.step} failed on {f.device} ({f.reason})" for f in self.fallbacks
            )
        return text

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Release every step's prepared model and pool, and the CPU path's device; idempotent."""
        self._closed = True
        buffers, self.buffers = self.buffers, None
        if buffers is not None:
            buffers.close()
        sessions, self._sessions = self._sessions, []
        for session in reversed(sessions):
            session.close()
        cpu, self.cpu_device = self.cpu_device, None
        if cpu is not None:
            cpu.close()

    def __enter__(self) -> PartitionedSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_partitioned(
    devices: Mapping[str, Device],
    model: Model,
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
    *,
    cpu_factory: CpuFactory = DEFAULT_CPU_SPEC,
    measure: bool = True,
    mode: str = DEFAULT_MODE,
    driver_buffers: bool = True,
) -> PartitionedSession:
    """The runtime's own placement of `model` across `devices` (the "nnapi-reference" backend), prepared.

    Use as a Session: `run(inputs)` gives (outputs, result) with `result.timing`; `describe()` and
    `summary()` say where operations ran. Raises HalError when a step cannot be prepared anywhere.
    `driver_buffers` (default): intermediates that stay on one driver pass through driver buffers
    (memory domains); False copies every intermediate through the client.
    """
    return PartitionedSession(
        model,
        devices,
        preference,
        cpu_factory=cpu_factory,
        measure=measure,
        mode=mode,
        driver_buffers=driver_buffers,
    )
