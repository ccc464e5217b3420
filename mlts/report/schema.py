"""Reading results.json back for the report and `mlts compare` (docs/results-schema.md).

The validation is `mlts.records.ResultsDocument.from_json`: each problem is one line naming the JSON
path ("results[3].latency_ms.median: expected a number, got 'x'"). Fields the schema does not know
are kept, so additive changes need no new version. Version 2 files are read and upgraded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlts.records import RecordError, ResultsDocument
from mlts.records.load import load_document

# The error of a document this mlts cannot read (a RecordError: `path` and `problem` say where and what).
ResultsSchemaError = RecordError

__all__ = ["ResultsSchemaError", "load_document", "load_results", "validate_results"]


def load_results(path: str | Path) -> dict:
    """The validated document at `path` as JSON of the current schema version (see load_document)."""
    return load_document(path).to_json()


def validate_results(doc: Any) -> None:
    """Raise ResultsSchemaError naming the JSON path of the first problem; return None if `doc` is valid."""
    ResultsDocument.from_json(doc)
