"""The `validate` section of results.json is a record (mlts.records.validate); `mlts validate` builds it here.

`results_document` puts the section into a typed results document (schema version 3, kind "validate")
with the same environment header as a benchmark's, so `mlts report` and `mlts compare` read it.
"""

from __future__ import annotations

from mlts.records import ResultsDocument
from mlts.records.environment import environment
from mlts.records.validate import SECTION_VERSION, ValidateSection

__all__ = ["SECTION_VERSION", "ValidateSection", "results_document"]


def results_document(section: ValidateSection, threads: int | None = None) -> ResultsDocument:
    """The results document of one `mlts validate` run: environment, the run's options, the section."""
    config = {"driver": section.driver, "suites": list(section.suites), **section.options}
    doc = ResultsDocument("validate", environment(threads), config, ())
    return doc.with_section("validate", section)
