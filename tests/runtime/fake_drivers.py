"""Tiny drivers for the runtime tests: ADD of two float32 tensors, plus ones that crash, hang or fail to start."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence

import numpy as np

from mlts.hal.enums import (
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
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
    OutputShape,
    PerformanceInfo,
    Request,
    Timing,
)


def _is_float_add(model: Model, op) -> bool:
    operands = model.main.operands
    return (
        op.type == OperationType.ADD
        and len(op.inputs) == 3
        and all(operands[i].type == OperandType.TENSOR_FLOAT32 for i in op.inputs[:2])
    )


class AddPrepared(PreparedModel):
    """Runs the single ADD of the model with NumPy."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def _view(self, request: Request, arg, what: str) -> memoryview:
        loc = arg.location
        buf = request.pools[loc.pool_index].buffer
        if loc.offset + loc.length > len(buf):
            raise HalError(ErrorStatus.INVALID_ARGUMENT, f"{what} lies outside its pool")
        return buf[loc.offset : loc.offset + loc.length]

    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        sub = self.model.main
        ins = []
        for k in range(2):
            arg = request.inputs[k]
            dims = arg.dimensions or sub.operands[sub.input_indexes[k]].dimensions
            ins.append(np.frombuffer(self._view(request, arg, f"input {k}"), np.float32).reshape(dims))
        out = (ins[0] + ins[1]).astype(np.float32)
        arg = request.outputs[0]
        if arg.location.length < out.nbytes:
            raise HalError(
                ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
                f"output 0 needs {out.nbytes} bytes, has {arg.location.length}",
                (OutputShape(out.shape, False),),
            )
        dst = np.frombuffer(self._view(request, arg, "output 0"), np.float32, out.size)
        dst[:] = out.reshape(-1)
        timing = Timing(1, 2) if measure == MeasureTiming.YES else Timing()
        return ExecutionResult((OutputShape(out.shape, True),), timing)


class AddDevice(Device):
    """Supports only ADD of two float32 tensors."""

    name = "fake-add"

    def __init__(self, version: str = "fake-1.0") -> None:
        self.version = version

    def getCapabilities(self) -> Capabilities:
        return Capabilities.uniform(PerformanceInfo(0.5, 0.25))

    def getType(self) -> DeviceType:
        return DeviceType.ACCELERATOR

    def getVersionString(self) -> str:
        return self.version

    def getSupportedOperations(self, model: Model) -> tuple[bool, ...]:
        return tuple(_is_float_add(model, op) for op in model.main.operations)

    def prepareModel(
        self,
        model: Model,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline=None,
        model_cache: Sequence[int] = (),
        data_cache: Sequence[int] = (),
        token: bytes = b"",
    ) -> PreparedModel:
        if not all(self.getSupportedOperations(model)) or len(model.main.operations) != 1:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "fake-add prepares only a single float32 ADD")
        return self._prepared(model)

    def _prepared(self, model: Model) -> PreparedModel:
        return AddPrepared(model)


class _KillingPrepared(AddPrepared):
    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)


class KillingDevice(AddDevice):
    """Dies of SIGKILL inside executeSynchronously."""

    name = "fake-kill"

    def _prepared(self, model: Model) -> PreparedModel:
        return _KillingPrepared(model)


class _HangingPrepared(AddPrepared):
    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        while True:
            time.sleep(3600)


class HangingDevice(AddDevice):
    """Never returns from executeSynchronously."""

    name = "fake-hang"

    def _prepared(self, model: Model) -> PreparedModel:
        return _HangingPrepared(model)


class BrokenDevice(AddDevice):
    """Its constructor fails, as a driver without its hardware would."""

    name = "fake-broken"

    def __init__(self) -> None:
        raise RuntimeError("no fake accelerator found on this machine")


class RaisingPrepared(AddPrepared):
    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        raise ZeroDivisionError("fake driver bug")


class BuggyDevice(AddDevice):
    """Raises a non-HAL exception from executeSynchronously (a driver bug)."""

    name = "fake-buggy"

    def _prepared(self, model: Model) -> PreparedModel:
        return RaisingPrepared(model)


class NanDevice(AddDevice):
    """Reports capabilities JSON cannot carry (NaN)."""

    name = "fake-nan"

    def getCapabilities(self) -> Capabilities:
        return Capabilities.uniform(PerformanceInfo(float("nan"), 1.0))


class _SlowPrepared(AddPrepared):
    def __init__(self, model: Model, delay: float) -> None:
        super().__init__(model)
        self.delay = delay

    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        if deadline is not None and time.monotonic_ns() > deadline:
            raise HalError(ErrorStatus.MISSED_DEADLINE_PERSISTENT, "the deadline had already passed")
        time.sleep(self.delay)
        if deadline is not None and time.monotonic_ns() > deadline:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "the deadline passed during the work")
        return super().executeSynchronously(request, measure, deadline, loop_timeout_duration)


class SlowDevice(AddDevice):
    """ADD that takes `delay` seconds per execution (and `prepare_delay` per preparation)."""

    name = "fake-slow"

    def __init__(self, delay: str = "0.3", prepare_delay: str = "0") -> None:
        super().__init__()
        self.delay = float(delay)
        self.prepare_delay = float(prepare_delay)

    def prepareModel(self, model, *args, **kwargs) -> PreparedModel:
        time.sleep(self.prepare_delay)
        return super().prepareModel(model, *args, **kwargs)

    def _prepared(self, model: Model) -> PreparedModel:
        return _SlowPrepared(model, self.delay)


class _ClientKeyPrepared(AddPrepared):
    """ADD plus the identity of the client the service says the call comes from (qos.current_client())."""

    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        from mlts.hal import qos

        result = super().executeSynchronously(request, measure, deadline, loop_timeout_duration)
        dst = np.frombuffer(self._view(request, request.outputs[0], "output 0"), np.float32)
        dst += np.float32(qos.current_client())
        return result


class ClientKeyDevice(AddDevice):
    """ADD whose result also carries the calling client's identity: shows which client a path acts for."""

    name = "fake-client-key"

    def _prepared(self, model: Model) -> PreparedModel:
        return _ClientKeyPrepared(model)
