"""What a tool asks of the driver's quality of service: priority, preference, deadlines, loop timeout.

One typed record shared by benchmark, stress and calibrate: the command-line options become one
(`mlts.commands._common.qos_settings`), the tools' configurations carry it as it is, and a Session
takes it (`Session(device, model, qos=...)`). Priority and preference are NNAPI's enums (with
NNAPI's codes); the deadlines are relative settings, in milliseconds, each made into an absolute
deadline (mlts.hal.deadlines.TimePoint) when its call is made: `preparation_deadline()` ahead of
every prepareModel, `execution_deadline()` ahead of every execution (as NNAPI's calls take them,
preparation and execution have deadlines of their own).

Its JSON form (`to_json`, `from_json`) is what results files and the tools' worker processes carry:
names, not numbers (`"priority": "high"`, `"preference": "low-power"`), and milliseconds; a key
missing from an older file takes its default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mlts.hal import deadlines
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ExecutionPreference, Priority

#: The names options and results use, with NNAPI's values.
PRIORITY_NAMES = {"low": Priority.LOW, "medium": Priority.MEDIUM, "high": Priority.HIGH}
PREFERENCE_NAMES = {
    "low-power": ExecutionPreference.LOW_POWER,
    "fast-single-answer": ExecutionPreference.FAST_SINGLE_ANSWER,
    "sustained-speed": ExecutionPreference.SUSTAINED_SPEED,
}
#: The longest deadline a tool accepts (one hour) and WHILE's longest loop timeout (15 s, NNAPI's).
MAX_DEADLINE_MS = 3_600_000.0
MAX_LOOP_TIMEOUT_MS = 15_000.0


def priority_named(name: str) -> Priority:
    """The priority an option or a results file names; ValueError listing the names."""
    if name not in PRIORITY_NAMES:
        raise ValueError(f"priority {name!r} is not one of {', '.join(PRIORITY_NAMES)}")
    return PRIORITY_NAMES[name]


def preference_named(name: str) -> ExecutionPreference:
    """The execution preference an option or a results file names; ValueError listing the names."""
    if name not in PREFERENCE_NAMES:
        raise ValueError(f"preference {name!r} is not one of {', '.join(PREFERENCE_NAMES)}")
    return PREFERENCE_NAMES[name]


def name_of(value: Priority | ExecutionPreference) -> str:
    """The option name of a priority or a preference (`Priority.HIGH` -> "high")."""
    table: dict[str, Any] = PRIORITY_NAMES if isinstance(value, Priority) else PREFERENCE_NAMES
    return next(name for name, v in table.items() if v == value)


def _milliseconds(value: object, what: str, lo: float, hi: float, lo_open: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} {value!r} ms is not a finite number of milliseconds")
    if value < lo or (lo_open and value == lo) or value > hi:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{what} {value} ms outside {interval} ms")
    return float(value)


@dataclass(frozen=True, slots=True)
class QosSettings:
    """Priority and preference of every preparation, and the relative deadlines and WHILE loop timeout
    of the calls (None: none given, the driver's default loop timeout of 2 s)."""

    priority: Priority = Priority.MEDIUM
    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER
    deadline_ms: float | None = None
    loop_timeout_ms: float | None = None
    prepare_deadline_ms: float | None = None

    def __post_init__(self) -> None:
        """Check every field (ValueError naming the bad one); plain ints of NNAPI's codes become the enums."""
        try:
            object.__setattr__(self, "priority", Priority(self.priority))
            object.__setattr__(self, "preference", ExecutionPreference(self.preference))
        except ValueError as e:
            raise ValueError(f"QosSettings: {e}") from None
        for name, what in (("deadline_ms", "deadline"), ("prepare_deadline_ms", "prepare deadline")):
            value = _milliseconds(getattr(self, name), what, 0.0, MAX_DEADLINE_MS, True)
            object.__setattr__(self, name, value)
        loop = _milliseconds(self.loop_timeout_ms, "loop timeout", 0.0, MAX_LOOP_TIMEOUT_MS, False)
        object.__setattr__(self, "loop_timeout_ms", loop)

    # ------------------------------------------------------------ at the calls

    def execution_deadline(self) -> TimePoint | None:
        """The deadline of an execution starting now (`deadline_ms` ahead), or None."""
        return None if self.deadline_ms is None else deadlines.after_ms(self.deadline_ms)

    def preparation_deadline(self) -> TimePoint | None:
        """The deadline of a preparation starting now (`prepare_deadline_ms` ahead), or None."""
        return None if self.prepare_deadline_ms is None else deadlines.after_ms(self.prepare_deadline_ms)

    @property
    def loop_timeout_ns(self) -> int | None:
        """WHILE's loop timeout as the HAL takes it (nanoseconds), or None for the driver's default."""
        return None if self.loop_timeout_ms is None else int(self.loop_timeout_ms * 1e6)

    # ------------------------------------------------------------ JSON

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> QosSettings:
        """The settings of a JSON form (`to_json`); missing keys take their defaults; ValueError naming a
        bad value."""
        if not doc:
            return cls()
        return cls(
            priority_named(str(doc.get("priority", "medium"))),
            preference_named(str(doc.get("preference", "fast-single-answer"))),
            doc.get("deadline_ms"),
            doc.get("loop_timeout_ms"),
            doc.get("prepare_deadline_ms"),
        )

    def to_json(self) -> dict[str, Any]:
        """Names and milliseconds, as results files record them."""
        return {
            "priority": name_of(self.priority),
            "preference": name_of(self.preference),
            "deadline_ms": self.deadline_ms,
            "prepare_deadline_ms": self.prepare_deadline_ms,
            "loop_timeout_ms": self.loop_timeout_ms,
        }


#: The settings of a tool given no QoS option.
DEFAULT_QOS = QosSettings()
