"""The runner and the outputs on synthetic results (no driver): suites that break, interruption, JUnit, HTML."""

from __future__ import annotations

import types
import xml.etree.ElementTree as ET

import pytest

from mlts.hal.errors import HalError
from mlts.records import RecordError
from mlts.report.validate_section import matrix_cells, page
from mlts.runtime.discovery import plugin_specs
from mlts.validate import core, runner
from mlts.validate.core import CaseResult, SuiteOptions, Target
from mlts.validate.junit import junit_xml
from mlts.validate.results import ValidateSection


class FakeTarget:
    name = "fake"
    restarts = 0

    def __init__(self) -> None:
        self.restart_reasons: list[str] = []

    def restart(self, reason: str) -> None:
        self.restarts += 1
        self.restart_reasons.append(reason)


def _suite(body):
    return types.SimpleNamespace(run=body)


def test_a_broken_suite_is_an_error_line_and_the_next_suite_runs(monkeypatch):
    def broken(target, options, emit):
        emit(CaseResult("a", "first", "pass", ""))
        raise RuntimeError("boom")

    def fine(target, options, emit):
        emit(CaseResult("b", "only", "pass", ""))

    monkeypatch.setattr(runner, "load_suite", lambda name: _suite(broken if name == "a" else fine))
    target = FakeTarget()
    section = runner.run_suites(target, ("a", "b"), SuiteOptions())
    assert [c.name for c in section.cases] == ["first", "only"]
    assert len(section.errors) == 1 and section.errors[0].startswith("a: RuntimeError: boom")
    assert section.failed and target.restarts == 1
    assert section.restart_reasons == ("a: the suite broke (RuntimeError)",)
    assert section.to_json()["restart_reasons"] == ["a: the suite broke (RuntimeError)"]


def test_interruption_keeps_what_was_gathered(monkeypatch):
    def interrupted(target, options, emit):
        emit(CaseResult("a", "one", "pass", ""))
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "load_suite", lambda name: _suite(interrupted))
    section = runner.run_suites(FakeTarget(), ("a", "b"), SuiteOptions())
    assert [c.name for c in section.cases] == ["one"]
    assert section.errors == ("a: interrupted after 1 cases",)


def _section() -> ValidateSection:
    cases = (
        CaseResult("validation", "ADD/TENSOR_FLOAT32: operation input count: x", "pass", ""),
        CaseResult(
            "validation", "ADD/TENSOR_FLOAT32: operand scale: y", "fail", "accepted <bad>", "/o/r/x.json"
        ),
        CaseResult("validation", "CONV_2D/TENSOR_QUANT8_ASYMM+PER_CHANNEL: z", "pass", ""),
        CaseResult("behaviour", "timing [sync]", "hang", "no reply"),
        CaseResult("behaviour", "cache: round trip", "skip", "no cache files"),
    )
    return ValidateSection("drv", ("validation", "behaviour"), cases, 1.5, 1, {"quick": True}, ("fuzz: x",))


def test_section_round_trip_and_summary():
    section = _section()
    assert ValidateSection.from_json(section.to_json()) == section
    assert section.summary()["behaviour"] == {"pass": 0, "fail": 0, "error": 0, "hang": 1, "skip": 1}
    with pytest.raises(
        RecordError, match=r"^validate\.version: section version 9; this mlts reads version 1$"
    ):
        ValidateSection.from_json({**section.to_json(), "version": 9})
    with pytest.raises(RecordError, match=r"^validate\.cases: expected a list"):
        ValidateSection.from_json({**section.to_json(), "cases": "x"})


def test_junit_counts():
    root = ET.fromstring(junit_xml(_section()))
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "5",
        "1",
        "1",
        "1",
    )
    validation = root.find("testsuite[@name='validation']")
    failure = validation.find("testcase/failure")
    assert failure is not None and "reproducer: /o/r/x.json" in failure.text


def test_html_matrix_and_escaping():
    section = _section()
    cells = matrix_cells(section)
    assert cells[("ADD", "TENSOR_FLOAT32")]["fail"] == 1
    assert ("CONV_2D", "TENSOR_QUANT8_ASYMM+PER_CHANNEL") in cells
    page_ = page(section, "/o")
    assert "accepted &lt;bad&gt;" in page_ and "<bad>" not in page_
    assert "href='r/x.json'" in page_
    assert "--suite behaviour --filter" in page_  # the rerun command of a case without reproducer file
    assert "<script" not in page_ and "://" not in page_


def test_a_driver_that_keeps_failing_to_start_is_given_up(tmp_path, monkeypatch):
    monkeypatch.setattr(core, "MAX_START_FAILURES", 2)
    plugin = tmp_path / "broken.py"
    plugin.write_text(
        "from driver.variants import SampleAll\n\n\nclass Broken(SampleAll):\n    name = 'broken'\n\n"
        "    def __init__(self, **options):\n        raise RuntimeError('no hardware')\n",
        encoding="utf-8",
    )
    (spec,) = plugin_specs(plugin)
    starts = []
    start = Target._start
    monkeypatch.setattr(Target, "_start", lambda self, kind: starts.append(kind) or start(self, kind))
    with Target(spec, str(tmp_path / "out")) as target:
        for _ in range(core.MAX_START_FAILURES):
            with pytest.raises(HalError, match="no hardware"):
                target.device()
        assert len(starts) == core.MAX_START_FAILURES
        with pytest.raises(HalError, match="not trying again"):
            target.device()
        assert len(starts) == core.MAX_START_FAILURES  # given up without starting it again
