"""JUnit XML of a validate run: one <testsuite> per suite, one <testcase> per case (for CI systems)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from mlts.hal.atomic import write_atomic
from mlts.validate.results import ValidateSection


def junit_xml(section: ValidateSection) -> bytes:
    """The run as JUnit XML: fail -> <failure>, error and hang -> <error>, skip -> <skipped>."""
    root = ET.Element("testsuites", name=f"mlts validate {section.driver}", time=f"{section.seconds:.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in section.suites:
        cases = [c for c in section.cases if c.suite == suite]
        counts = {
            "tests": len(cases),
            "failures": sum(c.outcome == "fail" for c in cases),
            "errors": sum(c.outcome in ("error", "hang") for c in cases),
            "skipped": sum(c.outcome == "skip" for c in cases),
        }
        errors = [e for e in section.errors if e.startswith(f"{suite}: ")]
        counts["errors"] += len(errors)
        counts["tests"] += len(errors)
        attrib = {
            "name": suite,
            "time": f"{sum(c.seconds for c in cases):.3f}",
            **{k: str(v) for k, v in counts.items()},
        }
        node = ET.SubElement(root, "testsuite", attrib)
        for k, v in counts.items():
            totals[k] += v
        for case in cases:
            tc = ET.SubElement(
                node,
                "testcase",
                name=case.name,
                # A lab run's cases are told apart by their device.
                classname=f"mlts.validate.{suite}" + (f".{case.device}" if case.device else ""),
                time=f"{case.seconds:.3f}",
            )
            text = case.reason + (f"\nreproducer: {case.reproducer}" if case.reproducer else "")
            if case.outcome == "fail":
                ET.SubElement(tc, "failure", message=case.reason[:500], type="fail").text = text
            elif case.outcome in ("error", "hang"):
                ET.SubElement(tc, "error", message=case.reason[:500], type=case.outcome).text = text
            elif case.outcome == "skip":
                ET.SubElement(tc, "skipped", message=case.reason[:500])
        for error in errors:
            tc = ET.SubElement(
                node, "testcase", name="suite could not run", classname=f"mlts.validate.{suite}"
            )
            ET.SubElement(tc, "error", message=error[:500], type="suite").text = error
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


def write_junit(section: ValidateSection, path: str | os.PathLike[str]) -> None:
    write_atomic(path, junit_xml(section))
