"""The typed records: every record survives JSON both ways, a version 2 file reads, errors name their path."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from mlts.bench.stats import describe
from mlts.records import (
    OPTIONAL_SECTIONS,
    SCHEMA_VERSION,
    BenchmarkRow,
    RecordError,
    ResultsDocument,
    Stats,
    StressRecord,
    Verdict,
    Violation,
)
from mlts.records.load import load_document
from tests.report._sample import sample_doc

V2_FILE = Path(__file__).parents[1] / "report" / "data" / "results_v2.json"


def _records(value, seen):
    """Every record reachable from `value` (dataclass instances, in lists, tuples and dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        seen.append(value)
        for f in dataclasses.fields(value):
            _records(getattr(value, f.name), seen)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _records(v, seen)
    elif isinstance(value, dict):
        for v in value.values():
            _records(v, seen)
    return seen


@pytest.mark.parametrize("source", ["sample", "v2 file"])
def test_every_record_round_trips_through_json(source):
    data = sample_doc() if source == "sample" else json.loads(V2_FILE.read_text())
    doc = ResultsDocument.from_json(data)
    records = _records(doc, [])
    kinds = {type(r).__name__ for r in records}
    assert {
        "BenchmarkRow",
        "Stats",
        "Histogram",
        "Compilation",
        "DriverTiming",
        "Memory",
        "Warmup",
        "Run",
    } <= kinds
    for rec in records:
        again = type(rec).from_json(json.loads(json.dumps(rec.to_json())))
        assert again == rec, type(rec).__name__
    assert ResultsDocument.from_json(json.loads(json.dumps(doc.to_json()))) == doc


def test_a_version_2_file_reads_and_is_written_as_the_current_version():
    data = json.loads(V2_FILE.read_text())
    assert data["schema_version"] == 2
    doc = load_document(V2_FILE)
    assert doc.read_from_version == 2 and doc.to_json()["schema_version"] == SCHEMA_VERSION == 3
    # Nothing is lost: apart from the version, the JSON written back is the file's own.
    assert {**data, "schema_version": SCHEMA_VERSION} == doc.to_json()
    driver = next(r for r in doc.rows if r.model == "mobilenet_v1_0.25_128" and not r.is_reference)
    assert driver.latency_ms.n == driver.iterations == len(driver.latency_ms.samples)
    assert driver.retries.retries == 0 and driver.evaluator("vs_reference").top1_agreement == 1.0
    assert "sample-all" in doc.section("capabilities")


def test_version_2_validation_errors_become_violations_without_figures():
    v = Violation.from_json("top-1 accuracy 0.7 is more than 0.05 below", "x")
    assert v == Violation(message="top-1 accuracy 0.7 is more than 0.05 below")
    assert v.metric is None and v.to_json()["message"].startswith("top-1")


def test_errors_name_the_field_path_and_carry_it():
    data = sample_doc()
    data["results"][3]["latency_ms"]["median"] = "x"
    with pytest.raises(RecordError) as info:
        ResultsDocument.from_json(data)
    assert str(info.value) == "results[3].latency_ms.median: expected a number, got 'x'"
    assert info.value.path == "results[3].latency_ms.median" and info.value.problem.startswith("expected")


def test_a_verdict_check_needs_its_pass_flag():
    with pytest.raises(RecordError, match=r"^v\.checks\[0\]\.pass: missing$"):
        Verdict.from_json(
            {"pass": True, "profile": "p", "rule": "r", "checks": [{"metric": "m", "value": 1, "limit": 2}]},
            "v",
        )


def test_stats_from_describe_and_its_order_check():
    stats = Stats.from_json(describe([0.001 * i for i in range(1, 30)]))
    assert stats.n == 29 and stats.min <= stats.median <= stats.max
    broken = {**stats.to_json(), "p90": stats.max * 2}
    with pytest.raises(RecordError, match=r"^s\.p95: expected >= p90"):
        Stats.from_json(broken, "s")


def test_unknown_fields_and_sections_are_kept():
    data = sample_doc()
    data["results"][1]["future_field"] = {"x": 1}
    data["future_section"] = [1, 2]
    doc = ResultsDocument.from_json(data)
    assert doc.rows[1].extra["future_field"] == {"x": 1}
    assert doc.to_json()["future_section"] == [1, 2] and doc.section("future_section") == [1, 2]


def test_a_known_optional_section_is_checked(monkeypatch):
    def check(value, where):
        if not isinstance(value, dict) or "ops" not in value:
            raise RecordError(f"{where}.ops", "missing")
        return value

    monkeypatch.setitem(OPTIONAL_SECTIONS, "profile", check)
    data = sample_doc()
    data["profile"] = {"ops": []}
    assert ResultsDocument.from_json(data).section("profile") == {"ops": []}
    data["profile"] = {}
    with pytest.raises(RecordError, match=r"^profile\.ops: missing$"):
        ResultsDocument.from_json(data)
    doc = ResultsDocument.from_json(sample_doc()).with_section("profile", {"ops": [1]})
    assert doc.to_json()["profile"] == {"ops": [1]}


def test_stress_records():
    rec = {
        "kind": "stress",
        "mode": "inference-stress",
        "driver": "sample-all",
        "outcome": "CRASH",
        "expected": "SUCCESS",
        "signal": "SIGSEGV",
        "log_tail": ["a"],
        "details": {"calls": 3},
    }
    doc = {"schema_version": 3, "kind": "stress", "environment": {}, "config": {}, "results": [rec]}
    parsed = ResultsDocument.from_json(doc)
    (stress,) = parsed.stress
    assert isinstance(stress, StressRecord) and stress.unexpected and stress.details == {"calls": 3}
    assert parsed.to_json()["results"] == [rec]
    bad = copy.deepcopy(doc)
    bad["results"][0]["outcome"] = "OK"
    with pytest.raises(RecordError, match=r"^results\[0\]\.outcome: expected one of 'SUCCESS'"):
        ResultsDocument.from_json(bad)


def test_row_helpers():
    rows = ResultsDocument.from_json(sample_doc()).rows
    lstm = next(r for r in rows if r.model == "asr_float")
    assert isinstance(lstm, BenchmarkRow) and lstm.step_wise and lstm.per_call_latency is lstm.latency_ms
    err = next(r for r in rows if not r.ok)
    assert err.error and err.latency_ms is None and err.violations == ()


def test_make_keeps_optional_nulls_and_unknown_keys_as_from_json_does():
    made = StressRecord.make(
        mode="m", driver="d", outcome="SUCCESS", reason=None, signal=None, models=("a",), new_key=3
    )
    assert made.reason is None and made.extra == {"reason": None, "signal": None, "new_key": 3}
    out = made.to_json()
    assert out == {
        "mode": "m",
        "driver": "d",
        "outcome": "SUCCESS",
        "models": ["a"],
        "reason": None,
        "signal": None,
        "new_key": 3,
    }
    assert StressRecord.from_json(out) == made
    # Left out entirely when not given at all.
    assert "reason" not in StressRecord.make(mode="m", driver="d", outcome="HANG").to_json()
