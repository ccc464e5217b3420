"""`--junit FILE` of `mlts benchmark` and `mlts stress`: the run's verdicts as JUnit XML for CI systems.

Benchmark: one <testsuite> per model, one <testcase> per backend (classname `mlts.benchmark.MODEL`):
a row that could not run is an <error>, a driver row whose accuracy verdict failed or that broke a
validation rule a <failure>. Stress: one <testsuite> per mode, one <testcase> per test: an outcome
other than the expected one is a <failure> whose type is the outcome (FAILURE, HANG, CRASH). A run
that did not finish adds a suite `mlts run` with one <error> saying how far it got, so CI never
mistakes a partial file for a passing run. The shared writer is mlts.records.junit.
"""

from __future__ import annotations

import os
from typing import Any

from mlts.hal.atomic import write_atomic
from mlts.records import BenchmarkRow, ResultsDocument, StressRecord
from mlts.records.junit import Case, Suite, junit_xml


def _row_case(row: BenchmarkRow) -> Case:
    classname = f"mlts.benchmark.{row.model}"
    seconds = (row.run.seconds if row.run else 0.0) + (row.warmup.seconds if row.warmup else 0.0)
    if not row.ok:
        message = " ".join((row.error or "failed").split())
        return Case(row.backend, classname, "error", seconds, message, kind="run failed")
    problems = []
    if row.verdict is not None and not row.verdict.passed:
        failed = ", ".join(f"{c.metric} {c.value} (limit {c.limit})" for c in row.verdict.failures())
        problems.append(f"accuracy verdict failed: {failed}; rule: {row.verdict.rule}")
    problems += [f"validation error: {v.message}" for v in row.violations]
    if problems and not row.is_reference:
        return Case(row.backend, classname, "fail", seconds, problems[0], "\n".join(problems), "verdict")
    return Case(row.backend, classname, "pass", seconds)


def _stress_case(record: StressRecord) -> Case:
    name = record.test or "/".join(x for x in (record.mode, record.driver, record.model) if x)
    seconds = record.duration_s or 0.0
    if not record.unexpected:
        return Case(name, f"mlts.stress.{record.mode}", "pass", seconds)
    expected = record.expected or "SUCCESS"
    message = f"{record.outcome}, expected {expected}" + (f": {record.reason}" if record.reason else "")
    text = "\n".join([message, *(record.log_tail or ())])
    return Case(
        name, f"mlts.stress.{record.mode}", "fail", seconds, " ".join(message.split()), text, record.outcome
    )


def _completion_suite(doc: dict[str, Any]) -> list[Suite]:
    completion = doc.get("completion")
    if not isinstance(completion, dict) or completion.get("complete", True):
        return []
    message = (
        f"incomplete: {completion.get('done')} of {completion.get('planned')} ({completion.get('reason')})"
    )
    case = Case("run completion", "mlts.run", "error", 0.0, message, kind="incomplete")
    return [Suite("mlts run", (case,))]


def results_junit_xml(doc: dict[str, Any]) -> bytes:
    """The JUnit XML of a benchmark or stress document."""
    document = ResultsDocument.from_json(doc)
    groups: dict[str, list[Case]] = {}
    if document.kind == "stress":
        for record in document.stress:
            groups.setdefault(record.mode, []).append(_stress_case(record))
        seconds = sum(r.duration_s or 0.0 for r in document.stress)
    else:
        for row in document.rows:
            groups.setdefault(row.model, []).append(_row_case(row))
        seconds = sum(c.seconds for cases in groups.values() for c in cases)
    suites = [Suite(name, tuple(cases)) for name, cases in groups.items()] + _completion_suite(doc)
    return junit_xml(f"mlts {document.kind}", suites, seconds)


def write_results_junit(doc: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """The JUnit XML written atomically."""
    write_atomic(path, results_junit_xml(doc))
