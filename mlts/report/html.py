"""The self-contained HTML report of a results document: one file, inline CSS and SVG, no script, no URL.

`build_view` reads the document as its typed records (`mlts.records.ResultsDocument`: a document given
as JSON is validated first, and an invalid row is refused with a RecordError, one line naming the
field's JSON path) and turns it into plain values (every missing optional field already resolved to
"-" or "not measured"); the jinja2 template (autoescaped) only lays them out. The difference against
the CPU baseline is median - baseline median, in ms and in % of the baseline median; it is "same"
when the two medians' 95% confidence intervals overlap, else "better" (faster) or "worse".

This module assembles the page; `mlts.report._html_format` formats values,
`mlts.report._html_tables` builds the per-family inference tables and
`mlts.report._html_sections` the other sections.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from mlts.hal.atomic import write_atomic
from mlts.records import SCHEMA_VERSION, ResultsDocument
from mlts.report._html_format import BASELINE, DASH, NOT_MEASURED, _mapping, _text
from mlts.report._html_overview import overview
from mlts.report._html_sections import (
    _capabilities,
    _charts,
    _compilation,
    _config_items,
    _devices,
    _driver_timing,
    _environment_items,
    _extensions_used,
    _inexact_reference,
    _memory,
    _stress,
    _summary,
    _validation,
    _warnings,
)
from mlts.report._html_tables import _families, compare_medians
from mlts.report.lab_section import device_rows, lab_view
from mlts.report.profile_section import profile_rows
from mlts.report.validate_section import validate_page, validate_view, write_validate_page

__all__ = [
    "BASELINE",
    "DASH",
    "NOT_MEASURED",
    "build_view",
    "compare_medians",
    "render_report",
    "write_report",
]


def render_report(doc: Mapping | ResultsDocument) -> str:
    """The whole report page for `doc` (a results document, schema version 2 or 3) as one HTML string.

    A `kind: "validate"` document gets the validate page (mlts.report.validate_section). Any other
    document is read as typed records: RecordError (one line, naming the JSON path) if it is invalid.
    """
    if _kind(doc) == "validate":
        return validate_page(_json(doc))
    return _template().render(r=build_view(doc))


def write_report(doc: Mapping | ResultsDocument, path: str | Path) -> None:
    """Render `doc` and write it so `path` is either the old file or the complete new one."""
    if _kind(doc) == "validate":
        write_validate_page(_json(doc), path)  # reproducer links relative to where the page goes
        return
    write_atomic(path, render_report(doc).encode("utf-8"))


def _kind(doc: Mapping | ResultsDocument) -> object:
    return doc.kind if isinstance(doc, ResultsDocument) else doc.get("kind")


def _json(doc: Mapping | ResultsDocument) -> Mapping:
    return doc.to_json() if isinstance(doc, ResultsDocument) else doc


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("mlts.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2")


def build_view(doc: Mapping | ResultsDocument) -> dict[str, Any]:
    """Everything the template shows, as strings, lists and dicts; robust to missing optional fields.

    The overview, tables, lists and charts read the typed records; the profiles read the rows' JSON
    and the header the document's environment, config and devices (validated the same way).
    """
    document = doc if isinstance(doc, ResultsDocument) else ResultsDocument.from_json(doc)
    data = document.to_json()
    kind = document.kind
    records = device_rows(document)  # in a lab run, each device's rows apart
    rows: list[Mapping] = [r.to_json() for r in records]
    stress = document.stress
    env = _mapping(data.get("environment"))
    return {
        "title": f"mlts {kind} report",
        "time": _text(env.get("time_utc")),
        "environment": _environment_items(env),
        "config": _config_items(_mapping(data.get("config")), records),
        "overview": overview(records) if records else None,
        "schema_version": SCHEMA_VERSION,
        "devices": _devices(_mapping(data.get("devices"))),
        "summary": _summary(records, stress),
        "families": _families(records),
        "validation": _validation(records),
        "inexact_reference": _inexact_reference(records),
        "extensions": _extensions_used(records),
        "warnings": _warnings(records),
        "charts": _charts(records),
        "compilation": _compilation(records),
        "timing": _driver_timing(records),
        "memory": _memory(records),
        "stress": _stress(stress),
        "capabilities": _capabilities(data.get("capabilities")),
        "profiles": profile_rows(rows),
        "validate": validate_view(data),
        "lab": lab_view(document),
    }
