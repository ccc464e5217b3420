"""Every reader of a results document reads its typed records: an invalid row is refused by each with the
same one-line error naming the row and the field (docs/results-schema.md)."""

from __future__ import annotations

import copy

import pytest

from mlts.records import RecordError
from mlts.report.compare import compare_results
from mlts.report.csv_export import results_frame
from mlts.report.html import render_report
from mlts.report.results import format_table
from tests.report._sample import sample_doc

READERS = {
    "html": render_report,
    "csv": results_frame,
    "compare": lambda doc: compare_results(sample_doc(), doc),
    "table": lambda doc: format_table(doc["results"]),
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("iterations", -3, "expected an integer >= 0, got -3"),
        ("status", "fine", "expected one of 'ok', 'error', got 'fine'"),
    ],
)
def test_an_invalid_row_is_refused_in_one_line_naming_its_field(reader, field, value, problem):
    doc = copy.deepcopy(sample_doc())
    doc["results"][2][field] = value
    with pytest.raises(RecordError) as e:
        READERS[reader](doc)
    assert e.value.path == f"results[2].{field}"
    message = str(e.value)
    assert message == f"results[2].{field}: {problem}"


def test_a_valid_document_is_read_by_every_reader():
    doc = sample_doc()
    for read in READERS.values():
        read(doc)
