"""Two `mlts validate` runs side by side: the cases whose outcome changed.

A case is the pair (suite, name). For each case in both runs whose outcome differs:

- "regression": it passed or was skipped and now fails, errs or hangs;
- "fixed": it failed, erred or hung and now passes or is skipped;
- "changed": any other change (pass <-> skip, or one failing outcome to another).

A suite that could not run in the new run but did in the old one (a new line under `errors`) is a
regression too. Cases in only one run are listed as added or removed (a failing added case is named
as such, but it is the new run's own failure, not a change). Options that differ (quick against full,
seed, filter, fuzz budget) and the driver's name, when it differs, are configuration warnings;
recorded software versions and CPU properties that differ are environment warnings.

A validate document (or a validate section) can only be compared with another one: a benchmark or
stress document without a validate section has nothing in common with it (ValueError).
"""

from __future__ import annotations

from typing import Any

from mlts.records import ResultsDocument, ValidateSection
from mlts.records.validate import FAILING
from mlts.report.compare import environment_differences, verdict_lines, warning_lines

# Options of a validate run whose difference changes which cases run or how hard they push.
_OPTIONS = ("quick", "seed", "filter", "fuzz_seconds", "fuzz_cases", "call_timeout")


def involves_validate(old: ResultsDocument, new: ResultsDocument) -> bool:
    """Whether `mlts compare` compares these two as validate runs (either is a `kind: "validate"` document)."""
    return "validate" in (old.kind, new.kind)


def compare_validate(
    old: ResultsDocument, new: ResultsDocument, labels: tuple[str, str] = ("old", "new")
) -> dict[str, Any]:
    """The comparison of two documents' validate sections, JSON-ready (see the module's docstring).

    {"kind": "validate", "old", "new" (labels), "changes" ([{suite, name, old, new, change}] in the old
    run's order), "added", "removed" ([{suite, name, outcome}]), "new_suite_errors", "regressions" (one
    line each), "config_warnings", "environment_warnings", "summary" ({"old", "new"}: cases and failing
    cases)}. ValueError when one of them has no validate section, or they have no case in common.
    """
    a, b = old.validate, new.validate
    if a is None or b is None:
        missing = labels[0] if a is None else labels[1]
        other = labels[1] if a is None else labels[0]
        kind = (old if a is None else new).kind
        raise ValueError(
            f"{other} is a validate run and {missing} a {kind} document without a validate section: "
            "they have nothing in common to compare"
        )
    old_out, new_out = a.outcomes(), b.outcomes()
    if old_out and new_out and not old_out.keys() & new_out.keys():
        raise ValueError(f"{labels[0]} and {labels[1]} have no validate case in common: nothing to compare")
    changes = [
        {"suite": s, "name": n, "old": o, "new": new_out[(s, n)], "change": _change(o, new_out[(s, n)])}
        for (s, n), o in old_out.items()
        if (s, n) in new_out and new_out[(s, n)] != o
    ]
    old_errors = {e.split(":", 1)[0] for e in a.errors}
    new_suite_errors = [e for e in b.errors if e.split(":", 1)[0] not in old_errors]
    regressions = [f"{c['suite']}: {c['name']}: {c['old']} -> {c['new']}" for c in changes]
    regressions = [r for r, c in zip(regressions, changes, strict=True) if c["change"] == "regression"]
    regressions += [f"suite {e}" for e in new_suite_errors]
    return {
        "kind": "validate",
        "old": labels[0],
        "new": labels[1],
        "changes": changes,
        "added": [_case(k, o) for k, o in new_out.items() if k not in old_out],
        "removed": [_case(k, o) for k, o in old_out.items() if k not in new_out],
        "new_suite_errors": new_suite_errors,
        "regressions": regressions,
        "config_warnings": _config_differences(a, b),
        "environment_warnings": environment_differences(old.environment, new.environment),
        "summary": {"old": _counts(a), "new": _counts(b)},
    }


def _change(old: str, new: str) -> str:
    if old not in FAILING and new in FAILING:
        return "regression"
    if old in FAILING and new not in FAILING:
        return "fixed"
    return "changed"


def _case(key: tuple[str, str], outcome: str) -> dict[str, str]:
    return {"suite": key[0], "name": key[1], "outcome": outcome}


def _counts(section: ValidateSection) -> dict[str, Any]:
    return {
        "driver": section.driver,
        "cases": len(section.cases),
        "failing": sum(c.failed for c in section.cases),
        "suite_errors": len(section.errors),
    }


def _config_differences(old: ValidateSection, new: ValidateSection) -> list[str]:
    lines = [f"driver: {old.driver} -> {new.driver}"] if old.driver != new.driver else []
    if old.suites != new.suites:
        lines.append(f"suites: {','.join(old.suites)} -> {','.join(new.suites)}")
    for key in _OPTIONS:
        a, b = old.options.get(key), new.options.get(key)
        if a != b:
            lines.append(f"{key}: {a} -> {b}")
    return lines


def format_validate_comparison(cmp: dict[str, Any]) -> list[str]:
    """The comparison as text lines: warnings, changed cases by kind, added/removed counts, the verdict."""
    s_old, s_new = cmp["summary"]["old"], cmp["summary"]["new"]
    lines = [
        f"{cmp['old']} -> {cmp['new']} (validate runs)",
        f"  {cmp['old']}: {s_old['driver']}: {s_old['cases']} cases, {s_old['failing']} failing",
        f"  {cmp['new']}: {s_new['driver']}: {s_new['cases']} cases, {s_new['failing']} failing",
        "",
    ]
    lines += warning_lines(cmp)
    for change, title in (("regression", "newly failing"), ("fixed", "fixed"), ("changed", "other changes")):
        rows = [c for c in cmp["changes"] if c["change"] == change]
        if rows:
            lines.append(f"{title} ({len(rows)}):")
            lines += [f"  {c['suite']}: {c['name']}: {c['old']} -> {c['new']}" for c in rows]
            lines.append("")
    if not cmp["changes"]:
        lines += ["no case changed its outcome", ""]
    for what, side in (("added", "new"), ("removed", "old")):
        if cmp[what]:
            failing = sum(c["outcome"] in FAILING for c in cmp[what])
            lines.append(
                f"{len(cmp[what])} cases {what} (only in {cmp[side]})"
                + (f", {failing} failing" if failing else "")
            )
            lines += [
                f"  {c['suite']}: {c['name']}: {c['outcome']}" for c in cmp[what] if c["outcome"] in FAILING
            ]
    if cmp["new_suite_errors"]:
        lines.append("suites that could not run in the new run:")
        lines += [f"  {e}" for e in cmp["new_suite_errors"]]
    if lines[-1]:
        lines.append("")
    return lines + verdict_lines(cmp["regressions"], "regression")
