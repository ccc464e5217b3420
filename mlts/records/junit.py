"""JUnit XML for CI systems: suites of test cases, each passed, failed, in error or skipped.

The writer every command shares (`mlts validate`, `mlts benchmark`, `mlts stress`): the caller turns
its results into `Suite`s of `Case`s; `junit_xml` gives the bytes (Jenkins' and GitLab's reading of
the format: <testsuites> with totals, <testsuite> per suite, <testcase> with a <failure>, <error> or
<skipped> child).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

OUTCOMES = ("pass", "fail", "error", "skip")
#: A message attribute longer than this is cut (the element's text keeps all of it).
MESSAGE_LIMIT = 500


@dataclass(frozen=True)
class Case:
    name: str
    classname: str
    outcome: str = "pass"  # one of OUTCOMES
    seconds: float = 0.0
    message: str = ""  # one line: why it failed, erred or was skipped
    text: str = ""  # the detail (the element's text; default: the message)
    kind: str = ""  # the failure's or error's type attribute (default: the outcome)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"JUnit case outcome {self.outcome!r} is not one of {', '.join(OUTCOMES)}")


@dataclass(frozen=True)
class Suite:
    name: str
    cases: tuple[Case, ...] = field(default_factory=tuple)
    seconds: float | None = None  # default: the sum of the cases'


def _counts(cases: tuple[Case, ...]) -> dict[str, int]:
    return {
        "tests": len(cases),
        "failures": sum(c.outcome == "fail" for c in cases),
        "errors": sum(c.outcome == "error" for c in cases),
        "skipped": sum(c.outcome == "skip" for c in cases),
    }


def junit_xml(title: str, suites: list[Suite], seconds: float) -> bytes:
    """The suites as a JUnit XML document (UTF-8, with its declaration)."""
    root = ET.Element("testsuites", name=title, time=f"{seconds:.3f}")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in suites:
        counts = _counts(suite.cases)
        time = suite.seconds if suite.seconds is not None else sum(c.seconds for c in suite.cases)
        node = ET.SubElement(
            root,
            "testsuite",
            {"name": suite.name, "time": f"{time:.3f}", **{k: str(v) for k, v in counts.items()}},
        )
        for k, v in counts.items():
            totals[k] += v
        for case in suite.cases:
            tc = ET.SubElement(
                node, "testcase", name=case.name, classname=case.classname, time=f"{case.seconds:.3f}"
            )
            message = case.message[:MESSAGE_LIMIT]
            text = case.text or case.message
            if case.outcome == "fail":
                ET.SubElement(tc, "failure", message=message, type=case.kind or "fail").text = text
            elif case.outcome == "error":
                ET.SubElement(tc, "error", message=message, type=case.kind or "error").text = text
            elif case.outcome == "skip":
                ET.SubElement(tc, "skipped", message=message)
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"
