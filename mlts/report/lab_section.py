"""The report of a lab run: each device its own sections, and every device's medians side by side.

A lab run (a document with a `lab` section) holds each model once per device, each device with the
reference row measured beside it. `device_rows` names every row's model and family after its device
("mobilenet_v1_1.0_224 @ board-a"), so every table of the report (and its baseline differences)
reads one device at a time; `lab_view` is the table of median latency per model x backend, one
column per device, and the devices' drivers and endpoints.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mlts.records import BenchmarkRow, ResultsDocument
from mlts.report._html_format import DASH

SEPARATOR = " @ "


def is_lab(document: ResultsDocument) -> bool:
    return document.section("lab") is not None


def device_of(row: BenchmarkRow) -> str | None:
    return None if row.endpoint is None else row.endpoint.name


def device_rows(document: ResultsDocument) -> list[BenchmarkRow]:
    """The benchmark rows, in a lab run each named after its device (model and family)."""
    if not is_lab(document):
        return document.rows
    out = []
    for row in document.rows:
        device = device_of(row)
        if device is None:
            out.append(row)
            continue
        out.append(
            replace(
                row,
                model=f"{row.model}{SEPARATOR}{device}",
                family=f"{row.family or row.model}{SEPARATOR}{device}",
            )
        )
    return out


def lab_view(document: ResultsDocument) -> dict[str, Any] | None:
    """Devices (name, driver, host, transport, address) and the median table, or None outside a lab run."""
    lab = document.section("lab")
    if lab is None:
        return None
    devices = [d.name for d in lab.devices]
    cells: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for row in document.rows:
        device = device_of(row)
        if device is None:
            continue
        entry = cells.setdefault((row.model, row.backend), {})
        lat = row.per_call_latency
        if not row.ok:
            entry[device] = {"text": "error", "cls": "fail", "title": row.error or ""}
        elif lat is None:
            entry[device] = {"text": DASH, "cls": "", "title": ""}
        else:
            lo, hi = lat.median_ci95
            verdict = "" if row.verdict is None else ("pass" if row.verdict.passed else "fail")
            entry[device] = {
                "text": f"{lat.median:.3f}",
                "cls": verdict,
                "title": f"95% interval [{lo:.3f}, {hi:.3f}] ms",
            }
    empty = {"text": DASH, "cls": "", "title": "not run on this device"}
    rows = [
        {"model": model, "backend": backend, "cells": [found.get(d, empty) for d in devices]}
        for (model, backend), found in cells.items()
    ]
    return {
        "file": lab.file,
        "devices": [
            {
                "name": d.name,
                "driver": d.driver,
                "host": d.endpoint.host,
                "transport": d.endpoint.transport,
                "address": d.endpoint.address or "private service",
            }
            for d in lab.devices
        ],
        "names": devices,
        "rows": rows,
    }
