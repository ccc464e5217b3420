"""The HTML of a `validate` section: per-suite counts, the operation × type matrix, failing cases.

`mlts report` on a `kind: "validate"` document writes `page` (the page `mlts validate` writes as
report.html); on a benchmark document that carries a validate section, the report's template includes
`body` and `CSS` (see mlts.report.html). No scripts and nothing fetched: inline CSS only, so the page
opens offline and in CI artifact viewers. Case names of the form `OPERATION/TYPE: ...` (validation and
operations suites) fill the matrix; reproducer paths are linked relative to the page. Every style is
scoped to the `.validate-run` element, so the benchmark report's own styles are untouched.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from html import escape
from typing import Any

from markupsafe import Markup

from mlts.hal.atomic import write_atomic
from mlts.hal.enums import OperationType
from mlts.records.validate import FAILING, OUTCOMES, ValidateSection

_CELL = re.compile(r"^([A-Z0-9_]+)/([A-Z0-9_+]+)(?:\s|:|\[)")
_PAGE_STYLE = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}"
#: The section's styles, each scoped to `.validate-run` (the element `body` returns).
CSS = """
.validate-run h2{font-size:1.15em;margin-top:1.6em}
.validate-run table{border-collapse:collapse;margin:.5em 0}
.validate-run td,.validate-run th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
.validate-run th{background:#f2f2f2}
.validate-run .pass{background:#d9f2d9}
.validate-run .fail,.validate-run .error,.validate-run .hang{background:#f8d0d0}
.validate-run .skip{background:#eee}
.validate-run .verdict{font-size:1.2em;padding:.3em .6em;display:inline-block}
.validate-run td.m{text-align:center;font-size:12px;white-space:nowrap}
.validate-run .small{font-size:12px;color:#555}
.validate-run code{font-size:12px}
"""


def matrix_cells(section: ValidateSection) -> dict[tuple[str, str], dict[str, int]]:
    """(operation, type) -> outcome counts, from case names that start with 'OPERATION/TYPE'."""
    cells: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for case in section.cases:
        m = _CELL.match(case.name)
        if m and m.group(1) in OperationType.__members__:
            cells[(m.group(1), m.group(2))][case.outcome] += 1
    return dict(cells)


def _cell_class(counts: dict[str, int]) -> str:
    if any(counts[o] for o in FAILING):
        return "fail"
    return "pass" if counts["pass"] else "skip"


def _matrix(section: ValidateSection) -> str:
    cells = matrix_cells(section)
    if not cells:
        return "<p class=small>No per-operation cases in this run.</p>"
    ops = sorted({op for op, _ in cells}, key=lambda n: OperationType[n].value)
    types = sorted({t for _, t in cells})
    head = "".join(f"<th class=small>{escape(t)}</th>" for t in types)
    rows = []
    for op in ops:
        tds = []
        for t in types:
            counts = cells.get((op, t))
            if counts is None:
                tds.append("<td></td>")
                continue
            bad = sum(counts[o] for o in FAILING)
            total = sum(counts.values())
            text = f"{counts['pass']}/{total}" + (f" ({bad} bad)" if bad else "")
            tds.append(f"<td class='m {_cell_class(counts)}'>{text}</td>")
        rows.append(f"<tr><th>{escape(op)}</th>{''.join(tds)}</tr>")
    return f"<table><tr><th>operation</th>{head}</tr>{''.join(rows)}</table>"


def _link(path: str | None, page_dir: str, section: ValidateSection, case_name: str, suite: str) -> str:
    if not path:
        # No single-file reproducer (behaviour cases): the command that runs the case alone.
        pattern = "^" + re.escape(case_name) + "$"
        return f"<code>mlts validate --driver {escape(section.driver)} --suite {escape(suite)} --filter '{escape(pattern)}'</code>"
    rel = os.path.relpath(path, page_dir) if page_dir else path
    return f"<a href='{escape(rel)}'><code>{escape(rel)}</code></a>"


def body(section: ValidateSection, page_dir: str = "", heading: str = "h1") -> Markup:
    """The section as one `<div class=validate-run>`; reproducer links relative to `page_dir`."""
    verdict = "FAILED" if section.failed else "PASSED"
    summary = section.summary()
    rows = []
    for suite, counts in summary.items():
        cls = "fail" if any(counts[o] for o in FAILING) else "pass"
        cells = "".join(f"<td>{counts[o]}</td>" for o in OUTCOMES)
        rows.append(f"<tr class={cls}><th>{escape(suite)}</th>{cells}</tr>")
    errors = "".join(f"<li>{escape(e)}</li>" for e in section.errors)
    failing = [c for c in section.cases if c.failed]
    frows = "".join(
        f"<tr class={c.outcome}><td>{escape(c.suite)}</td><td>{escape(c.outcome)}</td><td>{escape(c.name)}</td>"
        f"<td>{escape(c.reason)}</td><td>{_link(c.reproducer, page_dir, section, c.name, c.suite)}</td></tr>"
        for c in failing[:2000]
    )
    more = (
        f"<p class=small>{len(failing) - 2000} more failing cases are in results.json.</p>"
        if len(failing) > 2000
        else ""
    )
    skipped = [c for c in section.cases if c.outcome == "skip"]
    srows = "".join(
        f"<tr><td>{escape(c.suite)}</td><td>{escape(c.name)}</td><td>{escape(c.reason)}</td></tr>"
        for c in skipped[:500]
    )
    opts = ", ".join(f"{k}={v}" for k, v in section.options.items())
    return Markup(f"""<div class=validate-run>
<{heading}>mlts validate: {escape(section.driver)}</{heading}>
<p><span class='verdict {"fail" if section.failed else "pass"}'>{verdict}</span>
 {len(section.cases)} cases in {section.seconds:.1f} s; driver restarts: {section.restarts}</p>
<p class=small>options: {escape(opts)}</p>
<h2>Suites</h2>
<table><tr><th>suite</th>{"".join(f"<th>{o}</th>" for o in OUTCOMES)}</tr>{"".join(rows)}</table>
{f"<h2>Suites that could not run</h2><ul>{errors}</ul>" if errors else ""}
<h2>Operations × types</h2>
<p class=small>Passed / all cases per operation and key operand type; red cells hold a failing case.</p>
{_matrix(section)}
<h2>Failing cases ({len(failing)})</h2>
{"<table><tr><th>suite</th><th>outcome</th><th>case</th><th>reason</th><th>reproducer</th></tr>" + frows + "</table>" if failing else "<p>None.</p>"}
{more}
<p class=small>Run a reproducer again with <code>mlts validate --driver NAME --replay FILE</code>.</p>
{f"<h2>Skipped ({len(skipped)})</h2><table><tr><th>suite</th><th>case</th><th>why</th></tr>{srows}</table>" if skipped else ""}
</div>
""")


def page(section: ValidateSection, page_dir: str = "", environment: Mapping[str, Any] | None = None) -> str:
    """The whole self-contained page of a validate run (`environment`: the document's, shown at the end)."""
    env = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(str(v))}</td></tr>"
        for k, v in (environment or {}).items()
        if not isinstance(v, Mapping)
    )
    setup = f"<h2>Setup</h2><table>{env}</table>" if env else ""
    return f"""<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>mlts validate: {escape(section.driver)}</title>
<style>{_PAGE_STYLE}{CSS}</style></head><body>
{"".join(body(part, page_dir) for part in by_device(section))}
<div class=validate-run>{setup}</div>
</body></html>
"""


def by_device(section: ValidateSection) -> list[ValidateSection]:
    """The section, or in a lab run (cases on several devices) one section per device, in case order."""
    devices = list(dict.fromkeys(c.device for c in section.cases))
    if len(devices) <= 1 and devices[:1] in ([], [None]):
        return [section]
    return [
        replace(
            section,
            driver=f"{device} ({section.driver})",
            cases=tuple(c for c in section.cases if c.device == device),
            errors=tuple(e for e in section.errors if f" on {device}:" in e or e.endswith(f"[{device}]")),
        )
        for device in devices
    ]


# --- hooks of mlts.report.html ---------------------------------------------------------------------------


def validate_view(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The validate section of results document `doc` (JSON) inside the report: None when it has none."""
    data = doc.get("validate")
    if data is None:
        return None
    section = ValidateSection.from_json(data)
    parts = Markup("").join(body(part, heading="h2") for part in by_device(section))
    return {"css": Markup(CSS), "body": parts, "failed": section.failed}


def validate_page(doc: Mapping[str, Any], page_dir: str = "") -> str:
    """The page of a `kind: "validate"` document (its validate section and environment)."""
    env = doc.get("environment")
    return page(
        ValidateSection.from_json(doc["validate"]), page_dir, env if isinstance(env, Mapping) else None
    )


def write_validate_page(doc: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """`validate_page` of `doc` written atomically at `path`, reproducer links relative to it."""
    write_atomic(path, validate_page(doc, os.path.dirname(os.path.abspath(path))).encode("utf-8"))
