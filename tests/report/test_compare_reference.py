"""`mlts compare` names the CPU reference each run compared a row with (onnxruntime, or LiteRT for .tflite)."""

from __future__ import annotations

import copy

from mlts.report.compare import compare_results, format_comparison
from tests.report._sample import sample_doc

DRV = "driver:sample-all"


def _with_reference(doc: dict, reference: str | None) -> dict:
    doc = copy.deepcopy(doc)
    for row in doc["results"]:
        if reference is None:
            row.pop("reference", None)
        else:
            row["reference"] = reference
    return doc


def test_rows_say_which_reference_each_run_used_and_the_table_marks_a_change() -> None:
    old = _with_reference(sample_doc(), None)
    new = _with_reference(sample_doc(), "litert")
    result = compare_results(old, new)
    row = next(r for r in result["rows"] if r["backend"] == DRV)
    assert row["compared_with"] == {"old": "onnxruntime", "new": "litert"}
    assert any("[vs onnxruntime -> litert]" in line for line in format_comparison(result))


def test_rows_compared_with_onnxruntime_in_both_runs_are_not_marked() -> None:
    result = compare_results(sample_doc(), sample_doc())
    assert all(r["compared_with"] == {"old": "onnxruntime", "new": "onnxruntime"} for r in result["rows"])
    assert not any("[vs " in line for line in format_comparison(result))
