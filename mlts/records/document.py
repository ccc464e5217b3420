"""The results document (results.json): version, kind, environment, config, records and optional sections.

Optional sections are top-level keys added by features that not every run has (the drivers'
`capabilities`, the `validate` section of `mlts validate`, and later e.g. a `profile` section). Each is registered in
`OPTIONAL_SECTIONS` with the check that reads it; a section the running mlts does not know is kept as
plain JSON and written back unchanged, so adding one needs no new schema version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mlts.records import _json as j
from mlts.records.benchmark import BenchmarkRow
from mlts.records.capabilities import capabilities_section
from mlts.records.endpoint import cluster_section, lab_section
from mlts.records.stress import StressRecord
from mlts.records.validate import ValidateSection, validate_section

SCHEMA_VERSION = 3
# Versions this mlts reads: older ones are upgraded on reading (see `_upgrade`).
READABLE_VERSIONS = (2, 3)
KINDS = ("benchmark", "stress", "validate")
CORE_KEYS = ("schema_version", "kind", "environment", "config", "devices", "results")

# name -> check: the optional top-level sections this mlts knows (add an entry to add a section).
OPTIONAL_SECTIONS: dict[str, Callable[[Any, str], Any]] = {
    "capabilities": capabilities_section,
    "validate": validate_section,
    "lab": lab_section,
    "cluster": cluster_section,
}


class VersionError(j.RecordError):
    """A document of a schema version this mlts cannot read (`found`: the version it says)."""

    def __init__(self, found: Any, message: str) -> None:
        super().__init__("", message)
        self.found = found


@dataclass(frozen=True)
class ResultsDocument(j.Record):
    """A whole results.json: `results` holds BenchmarkRow or StressRecord records, by `kind`."""

    kind: str
    environment: dict
    config: dict
    results: tuple[BenchmarkRow | StressRecord, ...]
    devices: dict | None = None
    sections: dict[str, Any] = field(default_factory=dict)  # name -> decoded optional section
    extra: dict = field(default_factory=dict)  # unknown top-level keys, kept
    schema_version: int = SCHEMA_VERSION
    read_from_version: int = field(default=SCHEMA_VERSION, compare=False)  # the version of the file read

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> ResultsDocument:
        if not isinstance(data, dict):
            j.fail("", f"not an mlts results document: the top level is {j.got(data)}, not an object")
        version = _check_version(data.get("schema_version"))
        kind = j.one_of(KINDS)(_field(data, "kind"), "kind")
        if kind == "validate":
            data = _validate_document(data, version)
        environment = j.obj(_field(data, "environment"), "environment")
        config = j.obj(_field(data, "config"), "config")
        devices = j.obj(data["devices"], "devices") if "devices" in data else None
        items = j.lst(_field(data, "results"), "results")
        row = BenchmarkRow.from_json if kind == "benchmark" else StressRecord.from_json
        results = tuple(row(item, f"results[{i}]") for i, item in enumerate(items))
        sections = {k: check(data[k], k) for k, check in OPTIONAL_SECTIONS.items() if k in data}
        known = {*CORE_KEYS, *OPTIONAL_SECTIONS}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(kind, environment, config, results, devices, sections, extra, SCHEMA_VERSION, version)

    def to_json(self) -> dict:
        """The document as written by this mlts (version SCHEMA_VERSION, whatever it was read from)."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "environment": self.environment,
            "config": self.config,
        }
        if self.devices is not None:
            out["devices"] = self.devices
        out.update({k: j.encode(v) for k, v in self.sections.items()})
        out["results"] = [r.to_json() for r in self.results]
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    # --- what readers ask --------------------------------------------------------------------------

    @property
    def rows(self) -> list[BenchmarkRow]:
        return [r for r in self.results if isinstance(r, BenchmarkRow)]

    @property
    def stress(self) -> list[StressRecord]:
        return [r for r in self.results if isinstance(r, StressRecord)]

    @property
    def validate(self) -> ValidateSection | None:
        """The `validate` section (always there in a `kind: "validate"` document), or None."""
        return self.sections.get("validate")

    def section(self, name: str) -> Any:
        return self.sections.get(name, self.extra.get(name))

    def with_section(self, name: str, value: Any) -> ResultsDocument:
        """A copy with optional section `name` set (checked when it is a known section)."""
        check = OPTIONAL_SECTIONS.get(name)
        decoded = check(j.encode(value), name) if check is not None else value
        return replace(self, sections={**self.sections, name: decoded})


def _field(data: dict, key: str) -> Any:
    if key not in data:
        j.fail(key, "missing")
    return data[key]


def _validate_document(data: dict, version: int) -> dict:
    """A `kind: "validate"` document: a `validate` section and no results records.

    Version 2 validate documents (mlts validate before the typed document) had neither `config` nor
    `results`: they are read as an empty config and no records.
    """
    if "validate" not in data:
        j.fail("validate", 'missing (a document of kind "validate" holds a validate section)')
    if version == 2:
        data = {"config": {}, "results": [], **data}
    if _field(data, "results") != []:
        j.fail(
            "results", 'expected an empty list in a document of kind "validate" (its cases are in validate)'
        )
    return data


def _check_version(found: Any) -> int:
    if found in READABLE_VERSIONS and isinstance(found, int) and not isinstance(found, bool):
        return found
    if found is None:
        raise VersionError(found, "schema_version: missing; not an mlts results document")
    if isinstance(found, int) and not isinstance(found, bool) and found > SCHEMA_VERSION:
        fix = "upgrade mlts to read it"
    else:
        fix = "re-run the benchmark to get a new file"
    readable = " and ".join(str(v) for v in READABLE_VERSIONS)
    raise VersionError(
        found, f"results schema version {j.got(found)}; this mlts reads versions {readable} ({fix})"
    )
