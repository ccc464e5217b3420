"""A test driver whose bursts say they were used: ADD, plus marks in the first output element.

An execution through a burst object the driver made adds 1000 × the burst's number (1, 2, ... in
the order the service configured them) and 10 × the memories that burst was told were freed; a plain
execution adds 100 × the bursts closed so far. So a client reads from its outputs whether the
service handed the driver each burst, each freed slot and each burst's end.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from mlts.hal.enums import MeasureTiming
from mlts.hal.interface import Burst, PreparedModel
from mlts.hal.types import Model
from tests.runtime.fake_drivers import AddDevice, AddPrepared


class _ProbeBurst(Burst):
    def __init__(self, prepared: _ProbePrepared, number: int) -> None:
        self.prepared, self.number, self.freed, self.closed = prepared, number, 0, False

    def execute(self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None):
        result = AddPrepared.executeSynchronously(
            self.prepared, request, measure, deadline, loop_timeout_duration
        )
        self.prepared.mark(request, 1000 * self.number + 10 * self.freed)
        return result

    def freeMemory(self, memory: object) -> None:
        self.freed += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.prepared.device.burst_closed()


class _ProbePrepared(AddPrepared):
    def __init__(self, model: Model, device: BurstProbe) -> None:
        super().__init__(model)
        self.device = device

    def mark(self, request, value: float) -> None:
        out = np.frombuffer(self._view(request, request.outputs[0], "output 0"), np.float32)
        out[0] += np.float32(value)

    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        result = super().executeSynchronously(request, measure, deadline, loop_timeout_duration)
        self.mark(request, 100 * self.device.closed_bursts)
        return result

    def configureExecutionBurst(self, *, polling_us: int | None = None) -> Burst:
        return _ProbeBurst(self, next(self.device.numbers))


class BurstProbe(AddDevice):
    """ADD whose bursts mark their outputs (see the module docstring)."""

    name = "fake-burst-probe"

    def __init__(self) -> None:
        super().__init__()
        self.numbers = itertools.count(1)
        self.closed_bursts = 0
        self._lock = threading.Lock()

    def burst_closed(self) -> None:
        with self._lock:
            self.closed_bursts += 1

    def _prepared(self, model: Model) -> PreparedModel:
        return _ProbePrepared(model, self)
