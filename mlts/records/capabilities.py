"""The `capabilities` section: per driver, what getCapabilities reported and where its numbers came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.records import _json as j


@dataclass(frozen=True)
class Performance(j.Record):
    """PerformanceInfo: execution time and power relative to the CPU (lower is better)."""

    exec_time: float = j.value(j.number)
    power_usage: float = j.value(j.number)
    extra: dict = j.extra()


@dataclass(frozen=True)
class OperandPerformance(j.Record):
    type: str = j.value(j.text)
    exec_time: float = j.value(j.number)
    power_usage: float = j.value(j.number)
    extra: dict = j.extra()


_perf = j.record_check(Performance)


@dataclass(frozen=True)
class DriverCapabilities(j.Record):
    """One driver's capabilities, or the `error` that kept them from being read."""

    source: str | None = j.value(j.text, default=None, omit=True)
    relaxed_scalar: Performance | None = j.value(_perf, default=None, omit=True)
    relaxed_tensor: Performance | None = j.value(_perf, default=None, omit=True)
    if_performance: Performance | None = j.value(_perf, key="if", default=None, omit=True)
    while_performance: Performance | None = j.value(_perf, key="while", default=None, omit=True)
    operand_performance: tuple[OperandPerformance, ...] | None = j.value(
        j.list_of(j.record_check(OperandPerformance)), default=None, omit=True
    )
    error: str | None = j.value(j.text, default=None, omit=True)
    extra: dict = j.extra()


def capabilities_section(value: Any, where: str) -> dict[str, DriverCapabilities]:
    return j.map_of(j.record_check(DriverCapabilities))(value, where)
