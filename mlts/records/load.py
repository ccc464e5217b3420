"""Reading results.json: the file's text, JSON without NaN, then `ResultsDocument.from_json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlts.hal import files
from mlts.records._json import RecordError
from mlts.records.document import ResultsDocument


def load_document(path: str | Path) -> ResultsDocument:
    """The validated results document at `path`, upgraded to the current schema version.

    A missing file or a directory raises the OSError open() gives; text that is not JSON, a schema
    version this mlts cannot read or a schema violation raise RecordError, whose message is one line
    starting with the path.
    """
    path = Path(path)
    try:
        text = files.read_text(path, what="a results file", limit=files.MAX_RESULTS_BYTES)
    except UnicodeDecodeError:
        raise RecordError("", f"{path}: not a JSON results file (not UTF-8 text)") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise RecordError("", f"{path}: not a JSON results file ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise RecordError("", f"{path}: not a JSON results file (nested too deeply)") from None
    try:
        return ResultsDocument.from_json(data)
    except RecordError as e:
        raise RecordError(e.path, e.problem, f"{path}: {e}") from None


def _reject_constant(name: str) -> Any:
    """NaN and Infinity are not JSON; mlts never writes them (json.dumps(allow_nan=False))."""
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)
