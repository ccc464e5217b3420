"""Reading results.json back: load it and check its schema version (full validation to follow)."""

from __future__ import annotations

import json
from pathlib import Path

from mlts.report.results import SCHEMA_VERSION


class ResultsSchemaError(ValueError):
    """A results document that this version of mlts cannot read."""


def load_results(path: Path) -> dict:
    """The results document at `path`; one-line errors for a missing, non-JSON or other-version file."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ResultsSchemaError(f"{path}: not a JSON results file ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        found = doc.get("schema_version") if isinstance(doc, dict) else None
        raise ResultsSchemaError(
            f"{path}: results schema version {found!r}; this mlts reads version {SCHEMA_VERSION}"
        )
    return doc
