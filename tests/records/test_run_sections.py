"""The run sections' checks (completion, noise, summary): what their producer writes passes, a malformed
field is named; readers keep the sections as the plain JSON they are."""

from __future__ import annotations

import copy

import pytest

from mlts.records import RecordError, ResultsDocument
from mlts.records.run_sections import check_run_sections
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


def test_sections_pass_their_checks_and_are_read_and_written_back_as_json():
    doc = {**copy.deepcopy(sample_doc()), **copy.deepcopy(SECTIONS)}
    check_run_sections(doc)
    document = ResultsDocument.from_json(doc)
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
def test_a_malformed_field_is_named(name, change, path):
    with pytest.raises(RecordError) as info:
        check_run_sections({name: {**SECTIONS[name], **change}})
    assert info.value.path == path


def test_a_missing_field_is_named():
    partial = {k: v for k, v in SECTIONS["summary"].items() if k != "failures"}
    with pytest.raises(RecordError) as info:
        check_run_sections({"summary": partial})
    assert info.value.path == "summary.failures" and "missing" in str(info.value)
