"""The abstract driver interface: Device, PreparedModel, Burst, Buffer (HAL 1.3 method set).

Every method a driver does not override raises HalError(GENERAL_FAILURE)
naming the method, so a partial driver fails clearly instead of crashing.
Errors are raised as `HalError`; successful calls return values.
Method names are the HAL's so they can be matched against the spec.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from mlts.hal.enums import DeviceType, ExecutionPreference, MeasureTiming, Priority
from mlts.hal.errors import not_implemented
from mlts.hal.execution import ExecutionCallback, FencedExecutionCallback, launch_async, launch_fenced
from mlts.hal.fence import SyncFence
from mlts.hal.types import (
    LOOP_TIMEOUT_DEFAULT_NS,
    BufferDesc,
    BufferRole,
    CacheFilesNeeded,
    Capabilities,
    ExecutionResult,
    Extension,
    Model,
    OptionalTimeoutDuration,
    OptionalTimePoint,
    Request,
)


class Burst(ABC):
    """A burst object: executions of one prepared model that reuse memory mappings (HAL 1.2).

    A driver's own (returned by its `PreparedModel.configureExecutionBurst`) may keep resources for
    the burst's life (seed 003: clocks, buffers, layouts); the service runs the burst's executions
    through `execute` one at a time, passes each memory slot the client frees (or replaces) to
    `freeMemory` before unmapping it, and calls `close` when the burst is released or its client goes.
    """

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
    ) -> ExecutionResult:
        raise not_implemented("Burst.execute")

    def freeMemory(self, memory: object) -> None:
        """Forget what the burst keeps of `memory` (a pool of its requests): it is about to be unmapped."""
        raise not_implemented("Burst.freeMemory")

    def close(self) -> None:
        """Release the burst and what it keeps; idempotent."""

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SynchronousBurst(Burst):
    """The default burst of any prepared model: each execution is its synchronous execution."""

    def __init__(self, prepared: PreparedModel) -> None:
        self.prepared = prepared

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
    ) -> ExecutionResult:
        return self.prepared.executeSynchronously(request, measure, deadline, loop_timeout_duration)

    def freeMemory(self, memory: object) -> None:
        """Nothing is cached in-process."""


class Buffer(ABC):
    """A driver-managed buffer (memory domains, HAL 1.3), named in requests by its token.

    `dimensions` are the current ones (set by allocation, copyFrom or the last
    execution that wrote it; a new tuple when they change); `initialized` says
    whether it holds data. `stamp`, optional, is a number the driver changes
    whenever the dimensions, the initialised flag or the buffer's liveness
    change: the service then checks a request it bound before by comparing
    stamps (mlts.hal.buffer_use.buffer_state); None means no such number.
    """

    token: int = 0
    dimensions: tuple[int, ...] = ()
    initialized: bool = False
    stamp: int | None = None

    def copyTo(self, dst: memoryview) -> None:
        """Copy the whole buffer into `dst` (exactly its size); uninitialised is GENERAL_FAILURE."""
        raise not_implemented("Buffer.copyTo")

    def copyFrom(self, src: memoryview, dimensions: Sequence[int]) -> None:
        """Fill the buffer from `src`; `dimensions` may complete the buffer's unknown ones."""
        raise not_implemented("Buffer.copyFrom")

    def has_role(self, prepared: object, is_input: bool, io_index: int) -> bool:
        """Was this buffer allocated for input/output `io_index` of `prepared`?"""
        return False

    def close(self) -> None:
        """Free the buffer; its token becomes invalid; idempotent."""


class PreparedModel(ABC):
    """A model compiled for one device."""

    #: The priority the model runs at (one prepared from the cache keeps the one it was prepared with).
    priority: int = 1

    @abstractmethod
    def executeSynchronously(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
    ) -> ExecutionResult:
        """Run `request`, writing outputs into its pools."""

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
    ) -> ExecutionCallback:
        """Asynchronous execution: returns at once; the callback completes with the result or error.

        The default runs `executeSynchronously` on a thread of its own.
        """
        return launch_async(
            lambda: self.executeSynchronously(request, measure, deadline, loop_timeout_duration)
        )

    def executeFenced(
        self,
        request: Request,
        wait_for: Sequence[SyncFence] = (),
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: OptionalTimeoutDuration = None,
        timeout_after_fence: OptionalTimeoutDuration = None,
    ) -> tuple[SyncFence, FencedExecutionCallback]:
        """Run once every fence of `wait_for` is signalled; returns the fence this execution signals.

        The default waits and runs `executeSynchronously` on a thread of its own.
        """
        return launch_fenced(
            lambda d: self.executeSynchronously(request, measure, d, loop_timeout_duration),
            wait_for,
            measure,
            deadline,
            timeout_after_fence,
        )

    def configureExecutionBurst(self, *, polling_us: int | None = None) -> Burst:
        """A burst of this model (HAL 1.2's configureExecutionBurst): the service calls it for every
        burst a client creates, so the driver learns of each and may return its own burst object
        (keeping resources for the burst's life); the default runs each execution synchronously.

        `polling_us` is how long a waiting side polls before it blocks (0: low-power mode).
        """
        return SynchronousBurst(self)

    def close(self) -> None:
        """Release the prepared model; idempotent."""


class Device(ABC):
    """A driver: answers capability queries and prepares models."""

    #: The name the driver is registered under (e.g. "sample-all").
    name: str = "unnamed"

    @abstractmethod
    def getCapabilities(self) -> Capabilities: ...

    @abstractmethod
    def getSupportedOperations(self, model: Model) -> tuple[bool, ...]:
        """One boolean per operation of model.main, in order."""

    def getType(self) -> DeviceType:
        return DeviceType.OTHER

    def getVersionString(self) -> str:
        return "unknown"

    def getSupportedExtensions(self) -> tuple[Extension, ...]:
        return ()

    def getNumberOfCacheFilesNeeded(self) -> CacheFilesNeeded:
        return CacheFilesNeeded(0, 0)

    @abstractmethod
    def prepareModel(
        self,
        model: Model,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: OptionalTimePoint = None,
        model_cache: Sequence[int] = (),
        data_cache: Sequence[int] = (),
        token: bytes = b"",
    ) -> PreparedModel: ...

    def prepareModelFromCache(
        self,
        model_cache: Sequence[int],
        data_cache: Sequence[int],
        token: bytes,
        deadline: OptionalTimePoint = None,
    ) -> PreparedModel:
        raise not_implemented("Device.prepareModelFromCache")

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[PreparedModel],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> Buffer:
        """A driver-managed buffer for the given roles (mlts.hal.buffer_use.validate_memory_desc rules)."""
        raise not_implemented("Device.allocate")

    def close(self) -> None:
        """Release the device's resources; idempotent."""


__all__ = ["Burst", "Buffer", "SynchronousBurst", "Device", "PreparedModel", "LOOP_TIMEOUT_DEFAULT_NS"]
