"""The checks of the run-level sections of a results document: `completion`, `noise` and `summary`.

Their producer (mlts.bench.run_record) checks what it writes with them (`check_run_sections`).
Readers take the sections as they come, as plain JSON (`doc.section("summary")`): the report leaves
out a field that is absent or malformed rather than refuse a file for its verdict line, so these are
not among the document's OPTIONAL_SECTIONS. See docs/results-schema.md ("Run sections").
"""

from __future__ import annotations

from typing import Any

from mlts.records import _json as j


def _fields(data: Any, where: str, checks: dict[str, j.Check], optional: dict[str, j.Check]) -> dict:
    section = j.obj(data, where)
    for key, check in checks.items():
        if key not in section:
            j.fail(j.at(where, key), "missing")
        check(section[key], j.at(where, key))
    for key, check in optional.items():
        if key in section:
            check(section[key], j.at(where, key))
    return section


def completion_section(data: Any, where: str) -> dict:
    """{"complete", "interrupted", "planned", "done", "reason"}; done never exceeds planned."""
    section = _fields(
        data,
        where,
        {
            "complete": j.boolean,
            "interrupted": j.boolean,
            "planned": j.count,
            "done": j.count,
            "reason": j.text,
        },
        {},
    )
    if section["done"] > section["planned"]:
        j.fail(j.at(where, "done"), f"{section['done']} is more than planned ({section['planned']})")
    if section["complete"] and (section["interrupted"] or section["done"] < section["planned"]):
        j.fail(j.at(where, "complete"), "true, but the run was interrupted or did less than it planned")
    return section


def noise_section(data: Any, where: str) -> dict:
    """{"noisy", "reasons", "headline", "reference_spread" (object or null), "thresholds"}."""
    section = _fields(
        data,
        where,
        {"noisy": j.boolean, "reasons": j.list_of(j.text), "headline": j.text},
        {"reference_spread": j.nullable(j.obj), "thresholds": j.map_of(j.signed)},
    )
    if section["noisy"] != bool(section["reasons"]):
        j.fail(j.at(where, "noisy"), "must be true exactly when there are reasons")
    return section


def _interval(value: Any, where: str) -> tuple[float, float]:
    lo, hi = j.numbers(value, where, 2)
    if lo > hi:
        j.fail(where, f"the interval's ends are out of order: [{lo}, {hi}]")
    return lo, hi


def summary_section(data: Any, where: str) -> dict:
    """{"verdicts_passed", "verdicts_total", "failures", "geomean_ratio", "geomean_ci", "noisy", ...}."""
    section = _fields(
        data,
        where,
        {
            "verdicts_passed": j.count,
            "verdicts_total": j.count,
            "failures": j.list_of(j.text),
            "geomean_ratio": j.nullable(j.number),
            "geomean_ci": j.nullable(_interval),
            "noisy": j.nullable(j.boolean),
        },
        {"geomean_rows": j.count, "estimator": j.text},
    )
    if section["verdicts_passed"] > section["verdicts_total"]:
        j.fail(j.at(where, "verdicts_passed"), "more than verdicts_total")
    return section


#: Section name -> its check.
RUN_SECTIONS = {"completion": completion_section, "noise": noise_section, "summary": summary_section}


def check_run_sections(doc: dict) -> None:
    """Raise RecordError naming the field when a run section present in `doc` is malformed."""
    for name, check in RUN_SECTIONS.items():
        if name in doc:
            check(doc[name], name)
