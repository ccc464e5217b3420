"""JUnit XML of a validate run: one <testsuite> per suite, one <testcase> per case (for CI systems)."""

from __future__ import annotations

import os

from mlts.hal.atomic import write_atomic
from mlts.records.junit import Case, Suite
from mlts.records.junit import junit_xml as _xml
from mlts.validate.results import ValidateSection

#: validate's outcomes as JUnit's: hang is an error (its type says "hang").
_OUTCOME = {"pass": "pass", "fail": "fail", "error": "error", "hang": "error", "skip": "skip"}


def junit_xml(section: ValidateSection) -> bytes:
    """The run as JUnit XML: fail -> <failure>, error and hang -> <error>, skip -> <skipped>; a suite
    that could not run is one more case in error, "suite could not run"."""
    suites = []
    for suite in section.suites:
        classname = f"mlts.validate.{suite}"
        cases = [
            Case(
                name=case.name,
                # A lab run's cases are told apart by their device.
                classname=classname + (f".{case.device}" if case.device else ""),
                outcome=_OUTCOME[case.outcome],
                seconds=case.seconds,
                message=case.reason,
                text=case.reason + (f"\nreproducer: {case.reproducer}" if case.reproducer else ""),
                kind=case.outcome,
            )
            for case in section.cases
            if case.suite == suite
        ]
        cases += [
            Case(name="suite could not run", classname=classname, outcome="error", message=e, kind="suite")
            for e in section.errors
            if e.startswith(f"{suite}: ")
        ]
        seconds = sum(c.seconds for c in section.cases if c.suite == suite)
        suites.append(Suite(suite, tuple(cases), seconds))
    return _xml(f"mlts validate {section.driver}", suites, section.seconds)


def write_junit(section: ValidateSection, path: str | os.PathLike[str]) -> None:
    write_atomic(path, junit_xml(section))
