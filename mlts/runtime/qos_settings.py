"""What a tool asks of the driver's quality of service: priority, preference, deadlines, loop timeout.

One record shared by benchmark, stress and calibrate: it becomes a Session's keyword arguments and
is written into results as plain JSON (names, not numbers). As NNAPI's calls take them, preparation
and execution have deadlines of their own: `prepare_deadline_ms` ahead of every prepareModel,
`deadline_ms` ahead of every execution.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlts.hal.enums import ExecutionPreference, Priority

PRIORITY_NAMES = {"low": Priority.LOW, "medium": Priority.MEDIUM, "high": Priority.HIGH}
PREFERENCE_NAMES = {
    "low-power": ExecutionPreference.LOW_POWER,
    "fast-single-answer": ExecutionPreference.FAST_SINGLE_ANSWER,
    "sustained-speed": ExecutionPreference.SUSTAINED_SPEED,
}
#: The longest deadline a tool accepts (one hour) and WHILE's longest loop timeout (15 s, NNAPI's).
MAX_DEADLINE_MS = 3_600_000.0
MAX_LOOP_TIMEOUT_MS = 15_000.0


def _name_of(table: Mapping[str, int], value: int) -> str:
    return next(name for name, v in table.items() if v == value)


@dataclass(frozen=True)
class QosSettings:
    priority: Priority = Priority.MEDIUM
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER
    deadline_ms: float | None = None
    loop_timeout_ms: float | None = None
    prepare_deadline_ms: float | None = None

    def __post_init__(self) -> None:
        Priority(self.priority)
        ExecutionPreference(self.preference)
        for what, ms in (("deadline", self.deadline_ms), ("prepare deadline", self.prepare_deadline_ms)):
            if ms is not None and not (
                isinstance(ms, (int, float)) and math.isfinite(ms) and 0 < ms <= MAX_DEADLINE_MS
            ):
                raise ValueError(f"{what} {ms} ms outside (0, {MAX_DEADLINE_MS:g}] ms")
        if self.loop_timeout_ms is not None and not (
            math.isfinite(self.loop_timeout_ms) and 0 <= self.loop_timeout_ms <= MAX_LOOP_TIMEOUT_MS
        ):
            raise ValueError(
                f"loop timeout {self.loop_timeout_ms} ms outside [0, {MAX_LOOP_TIMEOUT_MS:g}] ms"
            )

    @classmethod
    def from_names(
        cls,
        priority: str = "medium",
        preference: str = "fast-single-answer",
        deadline_ms: float | None = None,
        loop_timeout_ms: float | None = None,
        prepare_deadline_ms: float | None = None,
    ) -> QosSettings:
        """From the tools' option values; ValueError naming a bad one."""
        if priority not in PRIORITY_NAMES:
            raise ValueError(f"priority {priority!r} is not one of {', '.join(PRIORITY_NAMES)}")
        if preference not in PREFERENCE_NAMES:
            raise ValueError(f"preference {preference!r} is not one of {', '.join(PREFERENCE_NAMES)}")
        return cls(
            PRIORITY_NAMES[priority],
            PREFERENCE_NAMES[preference],
            deadline_ms,
            loop_timeout_ms,
            prepare_deadline_ms,
        )

    @classmethod
    def from_dict(cls, doc: dict[str, Any] | None) -> QosSettings:
        if not doc:
            return cls()
        return cls.from_names(
            str(doc.get("priority", "medium")),
            str(doc.get("preference", "fast-single-answer")),
            doc.get("deadline_ms"),
            doc.get("loop_timeout_ms"),
            doc.get("prepare_deadline_ms"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "priority": _name_of(PRIORITY_NAMES, self.priority),
            "preference": _name_of(PREFERENCE_NAMES, self.preference),
            "deadline_ms": self.deadline_ms,
            "prepare_deadline_ms": self.prepare_deadline_ms,
            "loop_timeout_ms": self.loop_timeout_ms,
        }

    def session_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of mlts.runtime.session.Session."""
        return {
            "priority": self.priority,
            "preference": self.preference,
            "deadline_ms": self.deadline_ms,
            "prepare_deadline_ms": self.prepare_deadline_ms,
            "loop_timeout_ms": self.loop_timeout_ms,
        }
