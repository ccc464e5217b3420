"""`mlts report` and `mlts compare` on validate documents (results.json of `mlts validate`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlts.commands.compare import compare
from mlts.commands.report import report
from mlts.records import CaseResult, ValidateSection
from mlts.validate.results import results_document
from tests.report._dom import parse_html as parse
from tests.report._sample import sample_doc

ADD = "ADD/TENSOR_FLOAT32: operand scale: y"
CONV = "CONV_2D/TENSOR_QUANT8_ASYMM: nhwc/sync"


def _section(add: str = "pass", conv: str = "pass", timing: str = "pass", errors=()) -> ValidateSection:
    cases = (
        CaseResult("validation", ADD, add, "accepted <bad>" if add == "fail" else "", "/o/reproducers/a.nnm"),
        CaseResult("operations", CONV, conv, ""),
        CaseResult("behaviour", "timing [sync]", timing, ""),
    )
    return ValidateSection(
        "sample-all", ("validation", "operations", "behaviour"), cases, 2.0, 0, {"quick": True}, errors
    )


def _write(tmp_path, name: str, doc: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def _validate_doc(section: ValidateSection) -> dict:
    return results_document(section).to_json()


def test_report_of_a_validate_document_is_the_validate_page(tmp_path):
    path = _write(tmp_path, "results.json", _validate_doc(_section(add="fail")))
    r = CliRunner().invoke(report, [path])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "://" not in html
    tree = parse(html)
    assert "FAILED" in tree.find_all("span", "verdict")[0].text
    failing = [row.text for row in tree.find_all("tr", "fail")]
    assert any("accepted <bad>" in t and "reproducers/a.nnm" in t for t in failing)
    assert "accepted &lt;bad&gt;" in html
    # The matrix: ADD x TENSOR_FLOAT32 holds the failing case, CONV_2D x TENSOR_QUANT8_ASYMM a passing one.
    cells = [td.text for td in tree.find_all("td", "m")]
    assert "0/1 (1 bad)" in cells and "1/1" in cells


def test_report_of_a_benchmark_document_with_a_validate_section_shows_both(tmp_path):
    doc = {**sample_doc(), "validate": _section(timing="hang").to_json()}
    path = _write(tmp_path, "results.json", doc)
    r = CliRunner().invoke(report, [path])
    assert r.exit_code == 0, r.output
    tree = parse((tmp_path / "report.html").read_text(encoding="utf-8"))
    assert tree.find_all("section", id="overview")  # the benchmark report
    (section,) = tree.find_all("section", id="validate")
    assert "FAILED" in section.find_all("span", "verdict")[0].text
    assert any("timing [sync]" in row.text for row in section.find_all("tr", "hang"))
    assert any(a.attrs.get("href") == "#validate" for a in tree.find_all("a"))


def test_report_of_a_bad_validate_section_is_one_line(tmp_path):
    doc = _validate_doc(_section())
    doc["validate"]["cases"][0]["outcome"] = "maybe"
    r = CliRunner().invoke(report, [_write(tmp_path, "results.json", doc)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert (
        "validate.cases[0].outcome: expected one of" in r.output and len(r.output.strip().splitlines()) == 1
    )


def _compare(*args: str):
    return CliRunner().invoke(compare, list(args), prog_name="mlts compare")


def test_compare_lists_changed_outcomes_and_a_new_failure_is_a_regression(tmp_path):
    old = _write(tmp_path, "old.json", _validate_doc(_section(conv="fail")))
    new = _write(tmp_path, "new.json", _validate_doc(_section(add="fail", timing="skip")))
    r = _compare(old, new)
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert f"newly failing (1):\n  validation: {ADD}: pass -> fail" in out
    assert f"fixed (1):\n  operations: {CONV}: fail -> pass" in out
    assert "other changes (1):\n  behaviour: timing [sync]: pass -> skip" in out
    assert "1 regression(s):" in out
    back = _compare(new, old)  # the other way the ADD case is fixed and the CONV case is newly failing
    assert back.exit_code == 1 and f"operations: {CONV}: pass -> fail" in back.stdout


def test_compare_without_a_new_failure_exits_0_and_json_has_the_changes(tmp_path):
    old = _write(tmp_path, "old.json", _validate_doc(_section(add="fail")))
    new = _write(tmp_path, "new.json", _validate_doc(_section()))
    r = _compare(old, new, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["kind"] == "validate" and data["regressions"] == []
    assert data["changes"] == [
        {"suite": "validation", "name": ADD, "old": "fail", "new": "pass", "change": "fixed"}
    ]
    assert "no regression" in _compare(old, old).stdout


def test_a_suite_that_no_longer_runs_is_a_regression(tmp_path):
    old = _write(tmp_path, "old.json", _validate_doc(_section()))
    new = _write(
        tmp_path, "new.json", _validate_doc(_section(errors=("fuzz: the driver hung outside a case",)))
    )
    r = _compare(old, new)
    assert r.exit_code == 1 and "suite fuzz: the driver hung outside a case" in r.stdout


@pytest.mark.parametrize("validate_first", [True, False])
def test_validate_against_benchmark_has_nothing_in_common(tmp_path, validate_first):
    v = _write(tmp_path, "v.json", _validate_doc(_section()))
    b = _write(tmp_path, "b.json", sample_doc())
    r = _compare(*((v, b) if validate_first else (b, v)))
    assert r.exit_code == 2 and r.stdout == ""
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in r.output
    assert line.startswith("mlts compare: ") and line.endswith("they have nothing in common to compare")
    assert f"{b} a benchmark document without a validate section" in line


def test_validate_runs_with_no_case_in_common_are_refused(tmp_path):
    other = ValidateSection("x", ("behaviour",), (CaseResult("behaviour", "alive", "pass", ""),))
    a = _write(tmp_path, "a.json", _validate_doc(_section()))
    b = _write(tmp_path, "b.json", _validate_doc(other))
    r = _compare(a, b)
    assert r.exit_code == 2 and "have no validate case in common" in r.stderr
