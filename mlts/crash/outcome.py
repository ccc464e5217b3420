"""A stress test's outcome and the record it becomes in results.json (kind "stress").

SUCCESS: the test ran its course. FAILURE: the driver could not compile or
run, gave a wrong result, or died (then `driver_died` is true and the reason
says how). HANG: no result within the test's time plus its grace period; the
test process was killed. CRASH: the test process itself died (by a signal or
an exit without a result). The first outcome reported wins.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from mlts.errors import MltsError
from mlts.records.stress import StressRecord


class Outcome(enum.StrEnum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    HANG = "HANG"
    CRASH = "CRASH"


class StressFailure(MltsError):
    """Raised inside a test: the outcome is FAILURE with this one-line reason."""

    def __init__(self, reason: str, *, driver_died: bool = False, details: dict | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.driver_died = driver_died
        self.details = details or {}


@dataclass
class TestResult:
    """One test's outcome; `record()` is its row of the results document (StressRecord)."""

    test: str
    mode: str
    driver: str
    models: list[str]
    outcome: Outcome
    expected: Outcome = Outcome.SUCCESS
    reason: str | None = None
    duration_s: float = 0.0
    iterations: int = 0
    signal: str | None = None
    driver_died: bool = False
    log_tail: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    process: int | None = None  # the client process's index in the multi-process modes

    @property
    def as_expected(self) -> bool:
        return self.outcome == self.expected

    def record(self) -> StressRecord:
        return StressRecord.make(
            kind="stress",
            test=self.test,
            mode=self.mode,
            driver=self.driver,
            models=tuple(self.models),
            model=", ".join(self.models),
            outcome=self.outcome.value,
            expected=self.expected.value,
            as_expected=self.as_expected,
            reason=self.reason,
            duration_s=round(self.duration_s, 3),
            iterations=int(self.iterations),
            signal=self.signal,
            driver_died=self.driver_died,
            log_tail=tuple(self.log_tail),
            details=dict(self.details),
            **({} if self.process is None else {"process": self.process}),
        )
