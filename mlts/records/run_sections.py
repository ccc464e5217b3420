"""The run-level sections of a results document: `completion`, `noise` and `summary`.

Each check validates its section and returns it as the plain JSON object it is (readers index it
like the JSON: `doc.section("summary")["verdicts_passed"]`); unknown keys are kept. See
docs/results-schema.md ("Run sections").
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
