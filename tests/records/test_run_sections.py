"""The run sections of a results document (completion, noise, summary): read back, checked, kept."""

from __future__ import annotations

import copy

import pytest

from mlts.records import RecordError, ResultsDocument
from tests.report._sample import sample_doc

SECTIONS = {
    "completion": {
        "complete": False,
        "interrupted": True,
        "planned": 8,
        "done": 3,
        "reason": "interrupted by SIGINT",
    },
    "noise": {
        "noisy": True,
        "reasons": ["load average up to 4.2 on 2 cores"],
        "headline": "this run was noisy: load average up to 4.2 on 2 cores",
        "reference_spread": None,
        "thresholds": {"load_margin": 1.0},
    },
    "summary": {
        "verdicts_passed": 3,
        "verdicts_total": 5,
        "failures": ["a/b: c", "d/e: f"],
        "geomean_ratio": 1.4,
        "geomean_ci": [1.3, 1.5],
        "noisy": True,
        "geomean_rows": 3,
        "estimator": "log-normal",
    },
}


def _doc(**changes) -> dict:
    doc = copy.deepcopy(sample_doc())
    doc.update(copy.deepcopy(SECTIONS))
    for name, value in changes.items():
        doc[name] = value
    return doc


def test_sections_are_read_as_the_json_they_are_and_written_back():
    document = ResultsDocument.from_json(_doc())
    for name, value in SECTIONS.items():
        assert document.section(name) == value
        assert document.to_json()[name] == value


@pytest.mark.parametrize(
    ("name", "change", "path"),
    [
        ("completion", {"done": 9}, "completion.done"),
        ("completion", {"complete": True}, "completion.complete"),
        ("completion", {"planned": -1}, "completion.planned"),
        ("noise", {"noisy": False}, "noise.noisy"),
        ("noise", {"headline": 3}, "noise.headline"),
        ("summary", {"verdicts_passed": 6}, "summary.verdicts_passed"),
        ("summary", {"geomean_ci": [1.5, 1.3]}, "summary.geomean_ci"),
        ("summary", {"geomean_ratio": "fast"}, "summary.geomean_ratio"),
    ],
)
def test_a_bad_section_is_refused_naming_the_field(name, change, path):
    with pytest.raises(RecordError) as info:
        ResultsDocument.from_json(_doc(**{name: {**SECTIONS[name], **change}}))
    assert info.value.path == path


def test_a_missing_field_is_refused():
    partial = {k: v for k, v in SECTIONS["summary"].items() if k != "failures"}
    with pytest.raises(RecordError) as info:
        ResultsDocument.from_json(_doc(summary=partial))
    assert info.value.path == "summary.failures" and "missing" in str(info.value)
