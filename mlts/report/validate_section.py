"""The HTML of a `validate` section: the run's options, per-suite counts, the operation × type matrix,
failing cases.

`mlts report` on a `kind: "validate"` document writes `page` (the page `mlts validate` writes as
report.html): the frame and stylesheet every report page shares (templates/base.html.j2), whose
header bar opens with the verdict. On a benchmark document that carries a validate section, the
report's template includes `body` (see mlts.report.html). No scripts and nothing fetched: inline CSS
only, so the page opens offline and in CI artifact viewers. Case names of the form
`OPERATION/TYPE: ...` (validation and operations suites) fill the matrix; reproducer paths are linked
relative to the page.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from html import escape
from typing import Any

from markupsafe import Markup

from mlts.hal.atomic import write_atomic
from mlts.hal.enums import OperationType
from mlts.records.validate import FAILING, OUTCOMES, ValidateSection
from mlts.report._html_format import text_of
from mlts.report._html_headline import Chip, Header, Verdict
from mlts.report._html_sections import environment_items
from mlts.report._html_templates import template

_CELL = re.compile(r"^([A-Z0-9_]+)/([A-Z0-9_+]+)(?:\s|:|\[)")
#: How each of the run's options (mlts.validate.core.SuiteOptions) reads: a label and its value as text.
_OPTIONS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "quick": ("run size", lambda v: "quick (the CI-sized run)" if v else "full (--full)"),
    "filter": ("case filter (--filter)", lambda v: "none: every case" if v is None else str(v)),
    "seed": ("seed of generated inputs (--seed)", str),
    "call_timeout": ("call timeout (--call-timeout)", lambda v: f"{v:g} s" if _is_number(v) else str(v)),
    "fuzz_seconds": (
        "fuzzing time (--fuzz-seconds)",
        lambda v: "the suite's default" if v is None else f"{v:g} s",
    ),
    "fuzz_cases": ("fuzzing inputs (--fuzz-cases)", lambda v: "the suite's default" if v is None else str(v)),
}
#: The behaviour case that restarts a driver the run started, twice, to compare its answers.
_RESTARTING_CASE = "queries stable across restarts"
_PLANNED_RESTARTS = 2


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _type_header(name: str) -> str:
    """A type's column header: without the TENSOR_ prefix, breakable after each _ and +."""
    short = escape(name.removeprefix("TENSOR_"))
    return re.sub(r"([_+])", r"\1<wbr>", short)


def _matrix(section: ValidateSection) -> str:
    cells = matrix_cells(section)
    if not cells:
        return "<p class=footnote>No per-operation cases in this run.</p>"
    ops = sorted({op for op, _ in cells}, key=lambda n: OperationType[n].value)
    types = sorted({t for _, t in cells})
    head = "".join(f"<th class=type title='{escape(t)}'>{_type_header(t)}</th>" for t in types)
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
        rows.append(f"<tr><th class=op>{escape(op)}</th>{''.join(tds)}</tr>")
    return (
        f"<div class=table-wrap><table class='matrix sticky'><thead><tr><th class=op>operation</th>{head}</tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _link(path: str | None, page_dir: str, section: ValidateSection, case_name: str, suite: str) -> str:
    if not path:
        # No single-file reproducer (behaviour cases): the command that runs the case alone.
        pattern = "^" + re.escape(case_name) + "$"
        return (
            f"<code>mlts validate --driver {escape(section.driver)} --suite {escape(suite)} "
            f"--filter '{escape(pattern)}'</code>"
        )
    rel = os.path.relpath(path, page_dir) if page_dir else path
    return f"<a href='{escape(rel)}'><code>{escape(rel)}</code></a>"


def option_items(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's options as (label, value) lines, known ones under readable labels, the rest as they are."""
    out = []
    for key, value in options.items():
        label, show = _OPTIONS.get(key, (str(key), text_of))
        try:
            text = show(value)
        except (TypeError, ValueError):  # a hand-edited value of another type: shown as it is
            text = text_of(value)
        out.append((label, text))
    return out


def restarts_text(section: ValidateSection) -> str:
    """How often the driver was restarted, and why: on purpose by one behaviour case, or after a failure."""
    n = section.restarts
    if not n:
        return "driver restarts: 0"
    planned = any(c.name == _RESTARTING_CASE and c.outcome == "pass" for c in section.cases)
    died = sum(c.outcome == "hang" or (c.outcome == "error" and "died" in c.reason) for c in section.cases)
    parts = []
    if planned:
        parts.append(
            f"{min(n, _PLANNED_RESTARTS)} on purpose: the behaviour case '{_RESTARTING_CASE}' restarts the "
            "driver to check that its answers stay the same"
        )
    if died:
        parts.append(
            f"{died} case{'s' if died != 1 else ''} hung or ended the driver, which is then restarted"
        )
    if not parts:
        parts.append("each after a driver that hung or died outside a case, or a suite that failed")
    return f"driver restarts: {n} ({'; '.join(parts)})"


def _counts_text(section: ValidateSection) -> str:
    counts = {o: sum(c.outcome == o for c in section.cases) for o in OUTCOMES}
    named = {"pass": "passed", "fail": "failed", "error": "errors", "hang": "hangs", "skip": "skipped"}
    return f"{len(section.cases)} cases: " + ", ".join(f"{counts[o]} {named[o]}" for o in OUTCOMES)


def body(section: ValidateSection, page_dir: str = "", heading: str = "h2") -> Markup:
    """The section as one `<div class=validate-run>`; reproducer links relative to `page_dir`."""
    state = "fail" if section.failed else "pass"
    verdict = "FAILED" if section.failed else "PASSED"
    rows = []
    for suite, counts in section.summary().items():
        cls = "fail" if any(counts[o] for o in FAILING) else "pass"
        cells = "".join(f"<td class=num>{counts[o]}</td>" for o in OUTCOMES)
        rows.append(f"<tr class={cls}><th>{escape(suite)}</th>{cells}</tr>")
    errors = "".join(f"<li>{escape(e)}</li>" for e in section.errors)
    failing = [c for c in section.cases if c.failed]
    frows = "".join(
        f"<tr class={c.outcome}><td>{escape(c.suite)}</td><td>{escape(c.outcome)}</td>"
        f"<td class=wrap>{escape(c.name)}</td><td class=reason>{escape(c.reason)}</td>"
        f"<td class=wrap>{_link(c.reproducer, page_dir, section, c.name, c.suite)}</td></tr>"
        for c in failing[:2000]
    )
    more = (
        f"<p class=footnote>{len(failing) - 2000} more failing cases are in results.json.</p>"
        if len(failing) > 2000
        else ""
    )
    skipped = [c for c in section.cases if c.outcome == "skip"]
    srows = "".join(
        f"<tr><td>{escape(c.suite)}</td><td class=wrap>{escape(c.name)}</td>"
        f"<td class=reason>{escape(c.reason)}</td></tr>"
        for c in skipped[:500]
    )
    options = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in option_items(section.options))
    failing_table = (
        "<div class=table-wrap><table class=failing><thead><tr><th>suite</th><th>outcome</th><th>case</th>"
        f"<th>reason</th><th>reproducer</th></tr></thead><tbody>{frows}</tbody></table></div>"
    )
    skipped_table = (
        f"<h3>Skipped ({len(skipped)})</h3><div class=table-wrap><table class=skipped><thead><tr>"
        f"<th>suite</th><th>case</th><th>why</th></tr></thead><tbody>{srows}</tbody></table></div>"
    )
    outcome_heads = "".join(f"<th>{o}</th>" for o in OUTCOMES)
    return Markup(f"""<div class=validate-run>
<{heading}>mlts validate: {escape(section.driver)}</{heading}>
<p><span class='verdict {state}'><b class='state {state}'>{verdict}</b></span>
 {escape(_counts_text(section))}, in {section.seconds:.1f} s; {escape(restarts_text(section))}.</p>
<h3>Options</h3>
<dl class=kv>{options or "<dt>options</dt><dd>none recorded</dd>"}</dl>
<h3>Suites</h3>
<div class=table-wrap><table class=suites><thead><tr><th>suite</th>{outcome_heads}</tr></thead>
<tbody>{"".join(rows)}</tbody></table></div>
{f"<h3>Suites that could not run</h3><ul class=issues>{errors}</ul>" if errors else ""}
<h3>Operations × types</h3>
<p class=footnote>Passed / all cases per operation and key operand type (the TENSOR_ prefix left out of the
column names); a red cell holds a failing case, a grey one only skipped cases (a combination the driver does
not claim).</p>
{_matrix(section)}
<h3>Failing cases ({len(failing)})</h3>
{failing_table if failing else "<p>None.</p>"}
{more}
<p class=footnote>Run a reproducer again with <code>mlts validate --driver NAME --replay FILE</code>.</p>
{skipped_table if skipped else ""}
</div>
""")


def page(section: ValidateSection, page_dir: str = "", environment: Mapping[str, Any] | None = None) -> str:
    """The whole self-contained page of a validate run (`environment`: the document's, shown at the end)."""
    env = dict(environment or {})
    verdict = Verdict(
        "fail" if section.failed else "pass",
        "FAILED" if section.failed else "PASSED",
        f"{_counts_text(section)} · {section.seconds:.1f} s · {restarts_text(section)}",
    )
    failing = sum(c.failed for c in section.cases)
    chips = (
        Chip(str(len(section.cases)), "cases"),
        Chip(str(failing), "failing", "failed" if failing else ""),
        Chip(str(len(section.errors)), "suites that could not run", "failed" if section.errors else ""),
        Chip(str(section.restarts), "driver restarts"),
    )
    header = Header(
        title=f"mlts validate report: {section.driver}",
        time=text_of(env.get("time_utc")),
        verdict=verdict,
        chips=chips,
        contents=(("validate", "Validate"), ("setup", "Setup")),
        footer="Generated by mlts validate. Self-contained: no scripts, fonts or other files.",
    )
    # In a lab run, one part per device (by_device).
    parts = Markup("").join(body(part, page_dir) for part in by_device(section))
    items = environment_items({k: v for k, v in env.items() if not isinstance(v, Mapping)})
    return template("validate.html.j2").render(page=header, body=parts, environment=items)


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
    return {"body": parts, "failed": section.failed}


def validate_page(doc: Mapping[str, Any], page_dir: str = "") -> str:
    """The page of a `kind: "validate"` document (its validate section and environment)."""
    env = doc.get("environment")
    return page(
        ValidateSection.from_json(doc["validate"]), page_dir, env if isinstance(env, Mapping) else None
    )


def write_validate_page(doc: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """`validate_page` of `doc` written atomically at `path`, reproducer links relative to it."""
    write_atomic(path, validate_page(doc, os.path.dirname(os.path.abspath(path))).encode("utf-8"))
