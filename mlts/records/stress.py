"""The record of one stress test (a row of a `kind: "stress"` document)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.records import _json as j
from mlts.records.endpoint import Endpoint

OUTCOMES = ("SUCCESS", "FAILURE", "HANG", "CRASH")
_outcome = j.one_of(OUTCOMES)


def _signal(value: Any, where: str) -> int | str | None:
    """The signal that ended the process: its number or its name ("SIGKILL"), or null."""
    if value is None or isinstance(value, str):
        return value
    return j.count(value, where)


@dataclass(frozen=True)
class StressRecord(j.Record):
    """One stress test: mode, driver and outcome, plus how it ended (see docs/results-schema.md)."""

    mode: str = j.value(j.text)
    driver: str = j.value(j.text)
    outcome: str = j.value(_outcome)
    kind: str | None = j.value(j.text, default=None, omit=True)
    test: str | None = j.value(j.text, default=None, omit=True)
    models: tuple[str, ...] | None = j.value(j.texts, default=None, omit=True)
    model: str | None = j.value(j.text, default=None, omit=True)
    expected: str | None = j.value(j.nullable(_outcome), default=None, omit=True)
    as_expected: bool | None = j.value(j.boolean, default=None, omit=True)
    reason: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    duration_s: float | None = j.value(j.number, default=None, omit=True)
    iterations: int | None = j.value(j.count, default=None, omit=True)
    signal: int | str | None = j.value(_signal, default=None, omit=True)
    driver_died: bool | None = j.value(j.boolean, default=None, omit=True)
    log_tail: tuple[str, ...] | None = j.value(j.texts, default=None, omit=True)
    details: dict | None = j.value(j.obj, default=None, omit=True)
    endpoint: Endpoint | None = j.value(j.record_check(Endpoint), default=None, omit=True)
    process: int | None = j.value(j.count, default=None, omit=True)
    extra: dict = j.extra()

    @property
    def unexpected(self) -> bool:
        """The outcome differs from the expected one (SUCCESS when the record does not say)."""
        return self.outcome != (self.expected or "SUCCESS")
