"""The `validate` section as a record of the typed results document: round trip, validation, version 2."""

from __future__ import annotations

import json

import pytest

from mlts.records import CaseResult, RecordError, ResultsDocument, ValidateSection
from mlts.records.load import load_document
from mlts.validate.results import results_document


def _section(outcome: str = "fail") -> ValidateSection:
    cases = (
        CaseResult(
            "validation", "ADD/TENSOR_FLOAT32: operand scale: y", outcome, "accepted", "/r/x.nnm", 0.25
        ),
        CaseResult("behaviour", "timing [sync]", "pass", "", None, 1.5),
    )
    return ValidateSection(
        "sample-all", ("validation", "behaviour"), cases, 3.0, 1, {"quick": True, "seed": 0}
    )


def test_document_round_trip_through_json():
    section = _section()
    doc = results_document(section, threads=1)
    data = json.loads(json.dumps(doc.to_json()))
    assert data["schema_version"] == 3 and data["kind"] == "validate" and data["results"] == []
    assert data["environment"]["threads"] == 1 and "cpu" in data["environment"]
    assert data["config"]["driver"] == "sample-all" and data["config"]["seed"] == 0
    assert data["validate"]["passed"] is False
    assert data["validate"]["summary"]["validation"] == {
        "pass": 0,
        "fail": 1,
        "error": 0,
        "hang": 0,
        "skip": 0,
    }
    back = ResultsDocument.from_json(data)
    assert back.validate == section and back.to_json() == data


def test_a_benchmark_document_may_carry_a_validate_section():
    from tests.report._sample import sample_doc

    data = {**sample_doc(), "validate": _section("pass").to_json()}
    doc = ResultsDocument.from_json(data)
    assert doc.kind == "benchmark" and doc.rows and doc.validate == _section("pass")
    assert doc.to_json()["validate"] == data["validate"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda v: v.update(version=2), "validate.version: section version 2; this mlts reads version 1"),
        (lambda v: v["cases"][0].update(outcome="ok"), "validate.cases[0].outcome: expected one of 'pass'"),
        (lambda v: v["cases"][1].pop("reason"), "validate.cases[1].reason: missing"),
        (
            lambda v: v["cases"][0].update(seconds=-1),
            "validate.cases[0].seconds: expected a finite number >= 0",
        ),
        (lambda v: v.update(suites="validation"), "validate.suites: expected a list"),
        (lambda v: v.update(suites=["validation"]), "validate.cases: cases of suite 'behaviour', which"),
        (lambda v: v.update(passed=True), "validate.passed: true, but the cases and errors say otherwise"),
        (lambda v: v.pop("driver"), "validate.driver: missing"),
    ],
)
def test_a_bad_section_names_its_path(change, message):
    data = results_document(_section()).to_json()
    change(data["validate"])
    with pytest.raises(RecordError) as info:
        ResultsDocument.from_json(data)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_validate_document_needs_its_section_and_no_records():
    data = results_document(_section()).to_json()
    with pytest.raises(RecordError, match=r"^validate: missing \(a document of kind \"validate\""):
        ResultsDocument.from_json({k: v for k, v in data.items() if k != "validate"})
    with pytest.raises(RecordError, match=r"^results: expected an empty list"):
        ResultsDocument.from_json({**data, "results": [{}]})


def test_unknown_section_keys_are_kept():
    data = results_document(_section()).to_json()
    data["validate"]["coverage"] = {"edges": 12}
    assert ResultsDocument.from_json(data).to_json()["validate"]["coverage"] == {"edges": 12}


def test_version_2_validate_documents_are_read(tmp_path):
    """What `mlts validate` wrote before the typed document: no config and no results."""
    section = _section()
    path = tmp_path / "results.json"
    old = {
        "schema_version": 2,
        "kind": "validate",
        "environment": {"cpu": "x"},
        "validate": section.to_json(),
    }
    path.write_text(json.dumps(old))
    doc = load_document(path)
    assert doc.read_from_version == 2 and doc.validate == section and doc.config == {}
    assert doc.to_json()["schema_version"] == 3


def test_other_versions_are_refused_in_one_line(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "validate", "validate": _section().to_json()}))
    with pytest.raises(RecordError) as info:
        load_document(path)
    text = str(info.value)
    assert text.startswith(f"{path}: results schema version 1; this mlts reads versions 2 and 3")
    assert "\n" not in text
