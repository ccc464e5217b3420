"""The self-contained HTML report of a results document: one file, inline CSS and SVG, no script, no URL.

`build_view` reads the document as its typed records (`mlts.records.ResultsDocument`: a document given
as JSON is validated first, and an invalid row is refused with a RecordError, one line naming the
field's JSON path) and turns it into plain values (every missing optional field already resolved to
"-" or "not measured"); the jinja2 template (autoescaped) only lays them out. The difference against
the CPU baseline is median - baseline median, in ms and in % of the baseline median; it is "same"
when the two medians' 95% confidence intervals overlap, else "better" (faster) or "worse".

This module assembles the page; `mlts.report._html_format` formats values,
`mlts.report._html_headline` the verdict the page opens with, `mlts.report._html_tables` builds the
per-family inference tables and `mlts.report._html_sections` the other sections. Every page (this
one and the validate page of mlts.report.validate_section) shares one frame and stylesheet
(templates/base.html.j2, templates/style.css).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlts.hal.atomic import write_atomic
from mlts.records import SCHEMA_VERSION, ResultsDocument
from mlts.report._html_format import BASELINE, DASH, NOT_MEASURED, mapping_of, text_of
from mlts.report._html_headline import LOAD_COLUMNS, Header, benchmark_header, load_rows, stress_header
from mlts.report._html_overview import overview
from mlts.report._html_sections import (
    capabilities_section,
    charts_section,
    compilation_section,
    config_items,
    devices_section,
    driver_timing_section,
    environment_items,
    extensions_used_section,
    inexact_reference_section,
    memory_section,
    stress_section,
    validation_section,
    warnings_section,
)
from mlts.report._html_tables import compare_medians, family_tables
from mlts.report._html_templates import template
from mlts.report.driver_quality import quality_view
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
    view = build_view(doc)
    return template("report.html.j2").render(r=view, page=view["page"])


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
    env = mapping_of(data.get("environment"))
    ov = overview(records) if records else None
    view: dict[str, Any] = {
        "title": f"mlts {kind} report",
        "time": text_of(env.get("time_utc")),
        "environment": environment_items(env),
        "load": {"columns": LOAD_COLUMNS, "rows": load_rows(env)},
        "config": config_items(mapping_of(data.get("config")), records),
        "overview": ov,
        "schema_version": SCHEMA_VERSION,
        "devices": devices_section(mapping_of(data.get("devices"))),
        "families": family_tables(records),
        "validation": validation_section(records),
        "inexact_reference": inexact_reference_section(records),
        "extensions": extensions_used_section(records),
        "warnings": warnings_section(records),
        "charts": charts_section(records),
        "compilation": compilation_section(records),
        "timing": driver_timing_section(records),
        "memory": memory_section(records),
        "driver_quality": quality_view(records),
        "stress": stress_section(stress),
        "capabilities": capabilities_section(data.get("capabilities")),
        "profiles": profile_rows(rows),
        "validate": validate_view(data),
        "lab": lab_view(document),
    }
    if kind == "stress" or (stress and not records):
        verdict, chips, banners = stress_header(data, stress)
    else:
        verdict, chips, banners = benchmark_header(data, records, ov["lines"] if ov else [])
    view["page"] = Header(
        title=view["title"],
        time=view["time"],
        verdict=verdict,
        chips=chips,
        contents=_contents(view),
        footer=f"Generated by mlts from a results document (schema version {SCHEMA_VERSION}). "
        "Self-contained: no scripts, fonts or other files.",
        banners=banners,
    )
    return view


def _contents(view: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(anchor, label) of every section the page has, in page order."""
    out = [("verdict", "Verdict")]
    if view["overview"]:
        out.append(("overview", "Overview"))
    if view.get("lab"):
        out.append(("devices", "Devices"))
    out += [(fam["anchor"], fam["name"]) for fam in view["families"]]
    optional = (
        ("validation", "validation", "Validation errors"),
        ("warnings", "warnings", "Latency warnings"),
        ("charts", "charts", "Charts"),
        ("compilation", "compilation", "Compilation"),
        ("timing", "driver-timing", "Driver timing"),
        ("profiles", "profiles", "Profiles"),
    )
    out += [(anchor, label) for key, anchor, label in optional if view[key]]
    if view["memory"]["rows"]:
        out.append(("memory", "Memory"))
    if view["driver_quality"]["rows"]:
        out.append(("driver-quality", "Driver quality"))
    if view["stress"]:
        out.append(("stress", "Stress"))
    out.append(("setup", "Setup"))
    if view["capabilities"]:
        out.append(("capabilities", "Capabilities"))
    if view["validate"]:
        out.append(("validate", "Validate"))
    return tuple(out)
