"""`--summary FILE.md`: a benchmark's or stress run's verdict as Markdown to paste into a pull request.

A heading with the verdict, a table of the run's key figures (verdicts, geometric mean ratio, noise,
completion, drivers, machine), the failures, and one row per model × backend (benchmark) or per test
(stress). Read from the validated document, as every reader of results.json is.
"""

from __future__ import annotations

from typing import Any

from mlts.records import BenchmarkRow, ResultsDocument, StressRecord
from mlts.report.results import ms_text as _ms
from mlts.report.run_verdict import ratio_text
from mlts.report.terminal import escape


def cell(text: Any) -> str:
    """A Markdown table cell: one line, pipes escaped, control and invisible characters shown escaped
    (names and reasons come from the results file)."""
    return escape(" ".join(str(text).split())).replace("|", "\\|") or " "


def _heading(doc: dict[str, Any]) -> str:
    summary = doc.get("summary") or {}
    kind = doc.get("kind", "benchmark")
    what = "tests as expected" if kind == "stress" else "verdicts passed"
    head = (
        f"mlts {kind}: {summary.get('verdicts_passed', '?')} of {summary.get('verdicts_total', '?')} {what}"
    )
    completion = doc.get("completion") or {}
    if completion and not completion.get("complete", True):
        head += f" (INCOMPLETE: {completion.get('done')} of {completion.get('planned')})"
    return f"## {head}"


def _facts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    summary, noise = doc.get("summary") or {}, doc.get("noise") or {}
    completion, env, config = (
        doc.get("completion") or {},
        doc.get("environment") or {},
        doc.get("config") or {},
    )
    facts = [
        ("verdicts", f"{summary.get('verdicts_passed', '?')} of {summary.get('verdicts_total', '?')} passed")
    ]
    if summary.get("geomean_ratio") is not None:
        ci = summary.get("geomean_ci")
        interval = f" [{ratio_text(ci[0])}, {ratio_text(ci[1])}]" if ci else ""
        facts.append(
            (
                "driver ÷ onnxruntime, geometric mean",
                f"{ratio_text(summary['geomean_ratio'])}{interval} over {summary.get('geomean_rows', '?')} rows",
            )
        )
    if noise:
        facts.append(
            ("noisy", ("**yes**: " if noise.get("noisy") else "no: ") + str(noise.get("headline", "")))
        )
    if completion:
        state = "complete" if completion.get("complete") else "**incomplete**"
        facts.append(("completion", f"{state}: {completion.get('reason', '')}"))
    drivers = config.get("drivers")
    if drivers:
        facts.append(("drivers", ", ".join(map(str, drivers))))
    if doc.get("kind") == "benchmark":
        facts.append(
            ("run", f"{'quick' if config.get('quick') else 'full'}, {config.get('threads', '?')} thread(s)")
        )
    facts.append(
        (
            "machine",
            f"{env.get('cpu', '?')}, {env.get('usable_cores', env.get('cores', '?'))} cores; "
            f"mlts {env.get('mlts', '?')}, onnxruntime {env.get('onnxruntime', '?')}",
        )
    )
    return facts


def _benchmark_rows(rows: list[BenchmarkRow]) -> list[str]:
    refs = {r.model: r for r in rows if r.is_reference and r.ok}
    out = [
        "| model | backend | median ms [95% CI] | ÷ onnxruntime [95% CI] | verdict |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lat = row.per_call_latency
        if not row.ok or lat is None:
            out.append(
                f"| {cell(row.model)} | {cell(row.backend)} | error | | {cell(row.error or 'failed')} |"
            )
            continue
        lo, hi = lat.median_ci95
        median = f"{_ms(lat.median)} [{_ms(lo)}, {_ms(hi)}]"
        ratio = ""
        ref = refs.get(row.model)
        if not row.is_reference and ref is not None and ref.per_call_latency is not None:
            r = ref.per_call_latency
            (r_lo, r_hi) = r.median_ci95
            if r.median > 0:
                ratio = ratio_text(lat.median / r.median)
                if r_lo > 0 and r_hi > 0:
                    ratio += f" [{ratio_text(lo / r_hi)}, {ratio_text(hi / r_lo)}]"
        if row.is_reference:
            verdict = "reference"
        elif row.violations or (row.verdict is not None and not row.verdict.passed):
            verdict = "**fail**"
        else:
            verdict = "pass" if row.verdict is not None else "pass (no accuracy verdict)"
        out.append(f"| {cell(row.model)} | {cell(row.backend)} | {median} | {ratio} | {verdict} |")
    return out


def _stress_rows(records: list[StressRecord]) -> list[str]:
    out = ["| test | outcome | expected | iterations | reason |", "|---|---|---|---|---|"]
    for r in records:
        outcome = f"**{r.outcome}**" if r.unexpected else r.outcome
        out.append(
            f"| {cell(r.test or r.mode)} | {outcome} | {cell(r.expected or 'SUCCESS')} | "
            f"{cell(r.iterations if r.iterations is not None else '')} | {cell(r.reason or '')} |"
        )
    return out


def markdown_summary(doc: dict[str, Any]) -> str:
    """The Markdown text (ends with a newline)."""
    document = ResultsDocument.from_json(doc)
    lines = [_heading(doc), "", "| | |", "|---|---|"]
    lines += [f"| {cell(k)} | {cell(v)} |" for k, v in _facts(doc)]
    failures = (doc.get("summary") or {}).get("failures") or []
    if failures:
        lines += ["", f"### Failures ({len(failures)})", ""]
        lines += [f"- {escape(' '.join(f.split()))}" for f in failures]
    lines += ["", "### Results", ""]
    lines += _stress_rows(document.stress) if document.kind == "stress" else _benchmark_rows(document.rows)
    return "\n".join(lines) + "\n"
