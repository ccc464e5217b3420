"""Typed records of what a run produces, below both the producers (bench, crash) and the readers (report).

Frozen dataclasses with `from_json` (the validator: a RecordError names the JSON path of the first
problem) and `to_json`. Imports only the standard library and NumPy.
"""

from mlts.records._json import RecordError
from mlts.records.benchmark import (
    BenchmarkRow,
    Compilation,
    Dataset,
    DriverQuality,
    DriverTiming,
    Evaluator,
    Memory,
    Retries,
    Run,
    Verdict,
    VerdictCheck,
    Violation,
    Warmup,
)
from mlts.records.capabilities import DriverCapabilities
from mlts.records.document import OPTIONAL_SECTIONS, SCHEMA_VERSION, ResultsDocument, VersionError
from mlts.records.stats import NOT_MEASURED, Stats
from mlts.records.stress import StressRecord
from mlts.records.validate import CaseResult, ValidateSection

__all__ = [
    "NOT_MEASURED",
    "OPTIONAL_SECTIONS",
    "SCHEMA_VERSION",
    "BenchmarkRow",
    "CaseResult",
    "Compilation",
    "Dataset",
    "DriverCapabilities",
    "DriverQuality",
    "DriverTiming",
    "Evaluator",
    "Memory",
    "RecordError",
    "ResultsDocument",
    "Retries",
    "Run",
    "Stats",
    "StressRecord",
    "Verdict",
    "VerdictCheck",
    "ValidateSection",
    "VersionError",
    "Violation",
    "Warmup",
]
