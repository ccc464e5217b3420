"""The `validate` section of results.json: one run of `mlts validate` on one driver, typed and versioned."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlts.validate.core import OUTCOMES, CaseResult

SECTION_VERSION = 1


class ValidateSectionError(ValueError):
    """A `validate` section that cannot be read; one line naming the JSON path."""


@dataclass(frozen=True)
class ValidateSection:
    """What ran (driver, suites, options), every case, and how long it took."""

    driver: str
    suites: tuple[str, ...]
    cases: tuple[CaseResult, ...]
    seconds: float = 0.0
    restarts: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # suites that could not run at all, one line each
    version: int = SECTION_VERSION

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

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "driver": self.driver,
            "suites": list(self.suites),
            "seconds": round(self.seconds, 3),
            "restarts": self.restarts,
            "options": dict(self.options),
            "errors": list(self.errors),
            "summary": self.summary(),
            "passed": not self.failed,
            "cases": [c.to_json() for c in self.cases],
        }

    @classmethod
    def from_json(cls, doc: Any) -> ValidateSection:
        """The section of `doc`; ValidateSectionError naming the first bad field."""
        if not isinstance(doc, dict):
            raise ValidateSectionError("validate: expected an object")
        if doc.get("version") != SECTION_VERSION:
            raise ValidateSectionError(
                f"validate.version: {doc.get('version')!r}; this mlts reads version {SECTION_VERSION}"
            )
        cases = _list(doc, "cases")
        parsed = []
        for i, c in enumerate(cases):
            try:
                parsed.append(CaseResult.from_json(c))
            except (KeyError, TypeError, ValueError) as e:
                raise ValidateSectionError(f"validate.cases[{i}]: {e}") from None
        try:
            return cls(
                driver=str(doc["driver"]),
                suites=tuple(str(s) for s in _list(doc, "suites")),
                cases=tuple(parsed),
                seconds=float(doc.get("seconds", 0.0)),
                restarts=int(doc.get("restarts", 0)),
                options=dict(doc.get("options") or {}),
                errors=tuple(str(e) for e in doc.get("errors") or ()),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValidateSectionError(f"validate: {e}") from None


def _list(doc: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ValidateSectionError(f"validate.{key}: expected a list")
    return value
