"""The `validate` section of results.json: one run of `mlts validate` on one driver, every case in it.

`mlts validate` builds a ValidateSection (mlts.validate.runner) and writes it into a `kind: "validate"`
document; a benchmark document may carry one too. `from_json` validates like every record: a RecordError
naming the JSON path of the first problem ("validate.cases[3].outcome: expected one of ...").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from mlts.records import _json as j
from mlts.records.endpoint import Endpoint

SECTION_VERSION = 1
#: The outcomes of a case; "pass" and "skip" are not failures.
OUTCOMES = ("pass", "fail", "error", "hang", "skip")
FAILING = frozenset({"fail", "error", "hang"})


def _version(value: Any, where: str) -> int:
    if value != SECTION_VERSION or isinstance(value, bool):
        j.fail(where, f"section version {j.got(value)}; this mlts reads version {SECTION_VERSION}")
    return value


@dataclass(frozen=True)
class CaseResult(j.Record):
    """The outcome of one case: "pass", "fail", "error", "hang" or "skip", why, and how to reproduce it."""

    suite: str = j.value(j.text)
    name: str = j.value(j.text)
    outcome: str = j.value(j.one_of(OUTCOMES))
    reason: str = j.value(j.text)
    reproducer: str | None = j.value(j.nullable(j.text), default=None)  # `mlts validate --replay` runs it
    seconds: float = j.value(j.number, default=0.0)
    device: str | None = j.value(j.text, default=None, omit=True)  # the lab endpoint it ran on (lab runs)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"case outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING

    def to_json(self) -> dict[str, Any]:
        return {**j.encode_fields(self), "seconds": round(self.seconds, 6)}


@dataclass(frozen=True)
class ValidateSection(j.Record):
    """What ran (driver, suites, options), every case, and how long it took.

    `summary` and `passed` are written for readers of the JSON; they follow from the cases and errors,
    so reading recomputes them (a file whose `passed` disagrees with its cases is refused).
    """

    driver: str = j.value(j.text)
    suites: tuple[str, ...] = j.value(j.texts)
    cases: tuple[CaseResult, ...] = j.value(j.list_of(j.record_check(CaseResult)))
    seconds: float = j.value(j.number, default=0.0)
    restarts: int = j.value(j.count, default=0)
    options: dict = j.value(j.obj, default={})
    errors: tuple[str, ...] = j.value(j.texts, default=())  # suites that could not run at all, one line each
    version: int = j.value(_version, default=SECTION_VERSION)
    endpoint: Endpoint | None = j.value(j.record_check(Endpoint), default=None, omit=True)  # where it ran
    # Why each restart happened (one line each; absent in files of an older mlts).
    restart_reasons: tuple[str, ...] = j.value(j.texts, default=())
    extra: dict = j.extra()  # keys a newer mlts added, kept and written back

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(c.failed for c in self.cases)

    def summary(self) -> dict[str, dict[str, int]]:
        """Per suite: the count of each outcome (every outcome present, zeros included)."""
        out: dict[str, dict[str, int]] = {}
        for suite in self.suites:
            counts = Counter(c.outcome for c in self.cases if c.suite == suite)
            out[suite] = {o: counts.get(o, 0) for o in OUTCOMES}
        return out

    def outcomes(self) -> dict[tuple[str, str], str]:
        """(suite, case name) -> outcome; the last one where a name repeats.

        In a lab run (cases on several devices) the suite reads "suite@device", so each device's
        cases stay apart.
        """
        return {
            (c.suite if c.device is None else f"{c.suite}@{c.device}", c.name): c.outcome for c in self.cases
        }

    def to_json(self) -> dict[str, Any]:
        out = {
            "version": self.version,
            "driver": self.driver,
            "suites": list(self.suites),
            "seconds": round(self.seconds, 3),
            "restarts": self.restarts,
            "restart_reasons": list(self.restart_reasons),
            "options": dict(self.options),
            "errors": list(self.errors),
            "summary": self.summary(),
            "passed": not self.failed,
            "cases": [c.to_json() for c in self.cases],
        }
        if self.endpoint is not None:
            out["endpoint"] = self.endpoint.to_json()
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "validate") -> ValidateSection:
        source = j.obj(data, where)
        if "version" not in source:
            j.fail(j.at(where, "version"), "missing")
        _version(source["version"], j.at(where, "version"))
        known = {k: v for k, v in source.items() if k not in ("summary", "passed")}
        section = j.decode(cls, known, where)
        unlisted = sorted({c.suite for c in section.cases} - set(section.suites))
        if unlisted:
            j.fail(j.at(where, "cases"), f"cases of suite {unlisted[0]!r}, which `suites` does not list")
        if "passed" in source and j.boolean(source["passed"], j.at(where, "passed")) == section.failed:
            j.fail(
                j.at(where, "passed"), f"{j.got(source['passed'])}, but the cases and errors say otherwise"
            )
        return section


def validate_section(value: Any, where: str) -> ValidateSection:
    """The check of the optional top-level `validate` section (see document.OPTIONAL_SECTIONS)."""
    return ValidateSection.from_json(value, where or "validate")
