"""The self-contained HTML report of a results document: one file, inline CSS and SVG, no script, no URL.

`build_view` turns the document into plain values (every missing optional field already resolved to
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
from mlts.records import SCHEMA_VERSION
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


def render_report(doc: Mapping) -> str:
    """The whole report page for `doc` (a results document, schema version 2 or 3) as one HTML string.

    A `kind: "validate"` document gets the validate page (mlts.report.validate_section).
    """
    if doc.get("kind") == "validate":
        return validate_page(doc)
    return _template().render(r=build_view(doc))


def write_report(doc: Mapping, path: str | Path) -> None:
    """Render `doc` and write it so `path` is either the old file or the complete new one."""
    if doc.get("kind") == "validate":
        write_validate_page(doc, path)  # reproducer links relative to where the page goes
        return
    write_atomic(path, render_report(doc).encode("utf-8"))


def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("mlts.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2")


def build_view(doc: Mapping) -> dict[str, Any]:
    """Everything the template shows, as strings, lists and dicts; robust to missing optional fields."""
    records = [r for r in doc.get("results") or [] if isinstance(r, Mapping)]
    kind = str(doc.get("kind") or "benchmark")
    rows = [r for r in records if "backend" in r]
    stress = [r for r in records if "backend" not in r] if kind == "stress" else []
    env = _mapping(doc.get("environment"))
    return {
        "title": f"mlts {kind} report",
        "time": _text(env.get("time_utc")),
        "environment": _environment_items(env),
        "config": _config_items(_mapping(doc.get("config")), rows),
        "overview": overview(rows) if rows else None,
        "schema_version": SCHEMA_VERSION,
        "devices": _devices(_mapping(doc.get("devices"))),
        "summary": _summary(rows, stress),
        "families": _families(rows),
        "validation": _validation(rows),
        "inexact_reference": _inexact_reference(rows),
        "extensions": _extensions_used(rows),
        "warnings": _warnings(rows),
        "charts": _charts(rows),
        "compilation": _compilation(rows),
        "timing": _driver_timing(rows),
        "memory": _memory(rows),
        "stress": _stress(stress),
        "capabilities": _capabilities(doc.get("capabilities")),
        "profiles": profile_rows(rows),
        "validate": validate_view(doc),
    }
