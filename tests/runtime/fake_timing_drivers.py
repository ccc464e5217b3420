"""A fake driver whose per-operation times are chosen by its `record` option (hostile ones included)."""

from __future__ import annotations

from dataclasses import replace

from mlts.hal.enums import MeasureTiming
from mlts.hal.operation_times import OperationTime
from mlts.hal.types import Model
from tests.runtime.fake_drivers import AddDevice, AddPrepared

RECORDS = {
    "good": (OperationTime(0, 1000),),
    "twice": (OperationTime(0, 1), OperationTime(0, 2)),  # the service refuses it
    "out-of-range": (
        OperationTime(7, 1),
    ),  # well formed, but the model has one operation: the client refuses
    "too-long": (OperationTime(0, 3_600 * 10**9),),  # an hour inside a call that took far less
}


class TimingAddDevice(AddDevice):
    """The ADD driver, returning `RECORDS[record]` with every result, asked for or not."""

    name = "fake-timing"

    def __init__(self, record: str = "good") -> None:
        super().__init__()
        self.record = RECORDS[record]

    def _prepared(self, model: Model):
        return TimingPrepared(model, self.record)


class TimingPrepared(AddPrepared):
    def __init__(self, model: Model, record) -> None:
        super().__init__(model)
        self.record = record

    def executeSynchronously(
        self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout_duration=None
    ):
        result = super().executeSynchronously(request, measure, deadline, loop_timeout_duration)
        return replace(result, operation_times=self.record)
