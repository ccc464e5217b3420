"""A minimal mlts driver plugin: six float32 operations run with NumPy.

    mlts devices --driver-plugin examples/minimal_driver.py
    mlts validate --driver-plugin examples/minimal_driver.py --quick
    mlts benchmark --driver-plugin examples/minimal_driver.py --driver minimal-numpy --quick

It supports ADD, SUB and MUL (with NNAPI's broadcasting and fused activation) and RELU, LOGISTIC and
TANH, on TENSOR_FLOAT32 operands of rank 1 to 4, in the main subgraph of a model (no IF or WHILE).
Everything else is reported unsupported, so the runtime leaves it to another device. It validates
every model and request it receives with NNAPI's rules (mlts.hal.validate) and answers
INVALID_ARGUMENT itself, honours deadlines, fills in the shapes of outputs of unknown size and reports
OUTPUT_INSUFFICIENT_SIZE, and measures its Timing on request. It does not cache compilations or
allocate driver buffers: those HAL methods keep the interface's defaults (GENERAL_FAILURE "not
implemented"), and getNumberOfCacheFilesNeeded says it needs no cache files.

docs/writing-a-driver.md walks through this file step by step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from mlts.hal import validate
from mlts.hal.enums import (
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
)
from mlts.hal.errors import HalError
from mlts.hal.interface import Device, PreparedModel
from mlts.hal.types import (
    Capabilities,
    ExecutionResult,
    Model,
    Operand,
    Operation,
    OutputShape,
    PerformanceInfo,
    Request,
    Timing,
)

# FuseCode: the activation ADD, SUB and MUL apply to their result (NeuralNetworks.h).
ACTIVATIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda x: x,  # ANEURALNETWORKS_FUSED_NONE
    1: lambda x: np.maximum(x, np.float32(0)),  # ANEURALNETWORKS_FUSED_RELU
    2: lambda x: np.clip(x, np.float32(-1), np.float32(1)),  # ANEURALNETWORKS_FUSED_RELU1
    3: lambda x: np.clip(x, np.float32(0), np.float32(6)),  # ANEURALNETWORKS_FUSED_RELU6
}
BINARY: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    OperationType.ADD: np.add,
    OperationType.SUB: np.subtract,
    OperationType.MUL: np.multiply,
}
UNARY: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    OperationType.RELU: lambda x: np.maximum(x, np.float32(0)),
    OperationType.LOGISTIC: lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)),
    OperationType.TANH: np.tanh,
}
MAX_RANK = 4


def _missed(deadline: int | None, status: ErrorStatus, what: str) -> None:
    """Raise `status` when `deadline` (time.monotonic_ns) has passed."""
    if deadline is not None and time.monotonic_ns() > deadline:
        raise HalError(status, f"{what}: the deadline has passed")


def _supported(model: Model, op: Operation) -> bool:
    """Whether this driver runs `op` of the main subgraph (the model is already valid)."""
    operands = model.main.operands
    tensors = [operands[i] for i in (*op.inputs, *op.outputs) if not operands[i].is_scalar_type]
    if any(t.type != OperandType.TENSOR_FLOAT32 or len(t.dimensions) > MAX_RANK for t in tensors):
        return False
    if op.type in BINARY:
        return len(op.inputs) == 3 and len(op.outputs) == 1
    return op.type in UNARY and len(op.inputs) == 1 and len(op.outputs) == 1


class MinimalPrepared(PreparedModel):
    """A valid model of supported operations, run operation by operation."""

    def __init__(self, model: Model, priority: int) -> None:
        self.model = model
        self.priority = priority

    def executeSynchronously(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: int | None = None,
        loop_timeout_duration: int | None = None,
    ) -> ExecutionResult:
        t0 = time.perf_counter_ns()
        validate.validate_request(request, self.model)
        if loop_timeout_duration is not None:
            validate.validate_loop_timeout(loop_timeout_duration)
        if any(isinstance(pool, int) for pool in request.pools):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT, "this driver allocates no buffers: no token is valid"
            )
        _missed(deadline, ErrorStatus.MISSED_DEADLINE_PERSISTENT, "executeSynchronously")
        sub = self.model.main
        values: dict[int, np.ndarray | int | None] = {}
        for k, index in enumerate(sub.input_indexes):
            values[index] = self._input(request, k, sub.operands[index])
        t1 = time.perf_counter_ns()
        for op in sub.operations:
            _missed(deadline, ErrorStatus.MISSED_DEADLINE_TRANSIENT, "executeSynchronously")
            args = [self._value(values, i) for i in op.inputs]
            if op.type in BINARY:
                if not isinstance(args[2], int) or args[2] not in ACTIVATIONS:
                    raise HalError(
                        ErrorStatus.INVALID_ARGUMENT, f"fused activation {args[2]!r} is not a FuseCode"
                    )
                result = ACTIVATIONS[args[2]](BINARY[op.type](args[0], args[1]))
            else:
                result = UNARY[op.type](args[0])
            values[op.outputs[0]] = np.asarray(result, dtype=np.float32)
        t2 = time.perf_counter_ns()
        shapes = self._write_outputs(request, values)
        timing = Timing()
        if measure == MeasureTiming.YES:
            timing = Timing((t2 - t1) // 1000, (time.perf_counter_ns() - t0) // 1000)
        return ExecutionResult(shapes, timing)

    def _input(self, request: Request, k: int, operand: Operand) -> np.ndarray | int | None:
        arg = request.inputs[k]
        if arg.has_no_value:
            return None
        dims = arg.dimensions or operand.dimensions
        data = request.pools[arg.location.pool_index].buffer  # type: ignore[union-attr]
        raw = data[arg.location.offset : arg.location.offset + arg.location.length]
        return _decode(operand, raw, dims)

    def _value(self, values: dict[int, np.ndarray | int | None], index: int) -> np.ndarray | int | None:
        """An operand's value: computed or given at run time, or a constant of the model."""
        if index in values:
            return values[index]
        operand = self.model.main.operands[index]
        loc = operand.location
        if operand.lifetime == OperandLifeTime.CONSTANT_COPY:
            raw = memoryview(self.model.operand_values)[loc.offset : loc.offset + loc.length]
        elif operand.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
            raw = self.model.pools[loc.pool_index].buffer[loc.offset : loc.offset + loc.length]
        else:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"operand {index} has no value when it is read")
        values[index] = _decode(operand, raw, operand.dimensions)
        return values[index]

    def _write_outputs(
        self, request: Request, values: dict[int, np.ndarray | int | None]
    ) -> tuple[OutputShape, ...]:
        """Copy each output into its place in the request's pools; OUTPUT_INSUFFICIENT_SIZE (with every
        output's real shape) when one of them does not fit, before anything is written."""
        outputs = [np.ascontiguousarray(values[i]) for i in self.model.main.output_indexes]
        fits = [out.nbytes <= arg.location.length for out, arg in zip(outputs, request.outputs, strict=True)]
        shapes = tuple(OutputShape(tuple(out.shape), ok) for out, ok in zip(outputs, fits, strict=True))
        if not all(fits):
            bad = ", ".join(str(k) for k, ok in enumerate(fits) if not ok)
            raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, f"output(s) {bad} too small", shapes)
        for out, arg in zip(outputs, request.outputs, strict=True):
            if arg.has_no_value:
                continue
            data = request.pools[arg.location.pool_index].buffer  # type: ignore[union-attr]
            data[arg.location.offset : arg.location.offset + out.nbytes] = out.tobytes()
        return shapes


def _decode(operand: Operand, raw: memoryview | bytes, dims: Sequence[int]) -> np.ndarray | int:
    """The value of a FLOAT32 tensor or an INT32 scalar from its bytes."""
    if operand.type == OperandType.INT32:
        return int(np.frombuffer(raw, dtype="<i4", count=1)[0])
    if operand.type == OperandType.TENSOR_FLOAT32:
        return np.frombuffer(raw, dtype="<f4").reshape(tuple(dims)).copy()
    raise HalError(ErrorStatus.GENERAL_FAILURE, f"operand type {operand.type} is not one this driver reads")


class MinimalDevice(Device):
    """The driver: `name` is what `--driver` selects it by."""

    name = "minimal-numpy"

    def getCapabilities(self) -> Capabilities:
        # PerformanceInfo is a ratio against the CPU doing the same work (lower is better): NumPy on the CPU
        # is about the CPU, for every operand type and for IF and WHILE alike.
        return Capabilities.uniform(PerformanceInfo(1.0, 1.0))

    def getType(self) -> DeviceType:
        return DeviceType.CPU

    def getVersionString(self) -> str:
        return "minimal-numpy-1.0"

    def getSupportedOperations(self, model: Model) -> tuple[bool, ...]:
        validate.validate_model(model)
        return tuple(_supported(model, op) for op in model.main.operations)

    def prepareModel(
        self,
        model: Model,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: int | None = None,
        model_cache: Sequence[int] = (),
        data_cache: Sequence[int] = (),
        token: bytes = b"",
    ) -> PreparedModel:
        validate.validate_execution_preference(preference)
        validate.validate_priority(priority)
        validate.validate_model(model)
        if model_cache or data_cache:
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT, "this driver needs no cache files (it caches nothing)"
            )
        _missed(deadline, ErrorStatus.MISSED_DEADLINE_PERSISTENT, "prepareModel")
        if not all(self.getSupportedOperations(model)):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT, "the model has operations this driver does not support"
            )
        return MinimalPrepared(model, int(priority))
