"""The sample driver's own burst object (HAL 1.2's IBurstContext; `PreparedModel.configureExecutionBurst`).

Seed 003: a burst's lifetime tells the driver how long its client will keep executing one model, so
a driver may hold resources for that long. A `SampleBurst` holds, for the burst's life, a workspace
of its own (every operation's output and scratch buffers, the compiled runs bound to their
addresses: driver.ops._workspace, driver.bound_steps; filled when the burst is configured, as a
prepared model's first workspace is at preparation: driver.executor.Plan.warm) and its own request
layouts (driver.request_io: where each input and output sits in the pools, checked once). Its executions never wait for, share
or rebuild these, whatever else runs on the model; they go when the burst is closed (the client
released it or went away), and a freed memory slot (`freeMemory`) drops the layouts that could name it.

A burst runs one execution at a time (the service's listener serves a burst's requests in order); an
execution that finds its burst busy (a caller sharing the object between threads) runs as a plain
execution of the model instead.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from driver.ops._workspace import Workspace
from driver.request_io import IoCache
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.interface import Burst
from mlts.hal.types import ExecutionResult, OptionalTimePoint, Request

if TYPE_CHECKING:
    from driver.device import SamplePreparedModel


class SampleBurst(Burst):
    """A burst of one sample prepared model: a workspace and request layouts kept for its life."""

    def __init__(self, prepared: SamplePreparedModel, polling_us: int | None = None) -> None:
        self.prepared = prepared
        self.polling_us = polling_us
        #: What the burst keeps for its life (read by executeSynchronously's `kept`).
        self.io = IoCache()
        self.workspace: Workspace | None = Workspace()
        prepared.plan.warm(self.workspace)  # its buffers allocated and bound now, not by its first execution
        self._busy = threading.Lock()
        self.executions = 0
        self.closed = False

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: int | None = None,
    ) -> ExecutionResult:
        if self.closed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "burst: the burst was released")
        if not self._busy.acquire(blocking=False):
            # Another execution of this burst runs now (a caller sharing it between threads).
            return self.prepared.executeSynchronously(request, measure, deadline, loop_timeout_duration)
        try:
            self.executions += 1
            return self.prepared.executeSynchronously(
                request, measure, deadline, loop_timeout_duration, kept=self
            )
        finally:
            self._busy.release()

    def freeMemory(self, memory: object) -> None:
        """A memory slot of the burst was freed: the layouts that could name it go (the next execution
        of such a request checks it again)."""
        self.io.clear()

    def release_kept(self) -> bool:
        """Let the kept workspace and layouts go now, unless an execution uses them (an idle watchdog's
        call); the next execution makes them again. True when released."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            if self.closed:
                return False
            self.workspace = Workspace()
            self.io.clear()
            return True
        finally:
            self._busy.release()

    def kept_bytes(self) -> int:
        """Bytes the burst's own workspace holds now."""
        workspace = self.workspace
        return 0 if workspace is None else workspace.nbytes

    def close(self) -> None:
        """Release what the burst keeps; idempotent."""
        with self._busy:  # not while one of its executions uses the workspace
            if self.closed:
                return
            self.closed = True
            self.io.clear()
            self.workspace = None
        self.prepared.burst_closed(self)
