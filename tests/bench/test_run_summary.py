"""The run's verdict: verdicts passed, failures, and the geometric mean ratio with its interval."""

from __future__ import annotations

import copy
import math

import pytest

from mlts.bench.run_record import completion
from mlts.bench.run_summary import geomean, summarize
from mlts.records import ResultsDocument
from tests.report._sample import sample_doc, stress_doc

Z = 1.959963984540054


def _log_se(ci) -> float:
    return (math.log(ci[1]) - math.log(ci[0])) / (2 * Z)


def test_geomean_and_interval_by_hand_from_the_documents_medians():
    doc = sample_doc()
    summary = summarize(doc, noisy=False)
    by = {(r["model"], r["backend"]): r for r in doc["results"]}
    logs, ses = [], []
    for model in ("mobilenet_v1_0.25_128", "mobilenet_v2_0.35_128", "mobilenet_v1_0.25_128_quant"):
        d, r = by[(model, "driver:sample-all")]["latency_ms"], by[(model, "cpu:onnxruntime")]["latency_ms"]
        logs.append(math.log(d["median"] / r["median"]))
        ses.append(math.sqrt(_log_se(d["median_ci95"]) ** 2 + _log_se(r["median_ci95"]) ** 2))
    mean, se = sum(logs) / 3, math.sqrt(sum(s * s for s in ses)) / 3
    assert summary["geomean_rows"] == 3  # asr_float has no reference row, sample-minimal failed
    assert summary["geomean_ratio"] == pytest.approx(math.exp(mean), rel=1e-12)
    assert summary["geomean_ci"] == pytest.approx(
        [math.exp(mean - Z * se), math.exp(mean + Z * se)], rel=1e-12
    )
    assert summary["noisy"] is False


def test_verdicts_count_driver_rows_and_failures_name_the_row_and_reason():
    doc = sample_doc()
    summary = summarize(doc)
    drivers = [r for r in doc["results"] if not r["backend"].startswith("cpu:")]
    assert summary["verdicts_total"] == len(drivers) == 5
    assert summary["verdicts_passed"] == 3
    minimal = next(r for r in drivers if r["backend"] == "driver:sample-minimal")
    assert summary["failures"] == [
        "mobilenet_v1_0.25_128_quant/driver:sample-all: top-1 accuracy 0.700 is more than 0.05 below the "
        "reference's 0.810 (MLTS validation rule)",
        "mobilenet_v2_0.35_128/driver:sample-minimal: " + " ".join(minimal["error"].split()),
    ]
    # A failing reference row is listed, though it is no verdict of the driver.
    broken = copy.deepcopy(doc)
    ref = broken["results"][0]
    for key in [k for k in ref if k not in ("model", "family", "backend", "threads")]:
        del ref[key]
    ref.update(status="error", error="onnxruntime failed")
    summary = summarize(broken)
    assert summary["verdicts_total"] == 5 and summary["verdicts_passed"] == 3 and summary["geomean_rows"] == 2
    assert (
        "mobilenet_v1_0.25_128/cpu:onnxruntime: onnxruntime failed (the reference: no ratio for this model)"
        in (summary["failures"])
    )


def test_a_row_with_a_validation_error_fails_its_verdict():
    doc = copy.deepcopy(sample_doc())
    doc["results"][1]["validation_errors"] = ["output 0 is not finite"]
    summary = summarize(doc)
    assert summary["verdicts_passed"] == 2
    assert "mobilenet_v1_0.25_128/driver:sample-all: output 0 is not finite" in summary["failures"]


def test_stress_verdicts_are_tests_as_expected():
    doc = stress_doc()
    document = ResultsDocument.from_json(doc)
    summary = summarize(doc, noisy=True)
    unexpected = [r for r in document.stress if r.unexpected]
    assert summary["verdicts_total"] == len(document.stress)
    assert summary["verdicts_passed"] == len(document.stress) - len(unexpected)
    assert len(summary["failures"]) == len(unexpected) and summary["geomean_ratio"] is None
    assert summary["noisy"] is True


def test_geomean_without_rows_or_without_intervals():
    assert geomean([]) == (None, None)
    value, ci = geomean([{"ratio": 2.0, "log_se": None}, {"ratio": 8.0, "log_se": 0.1}])
    assert value == pytest.approx(4.0) and ci is None


@pytest.mark.parametrize(
    ("done", "planned", "finished", "interrupted", "complete", "reason"),
    [
        (4, 4, True, None, True, "all 4 done"),
        (2, 4, False, None, False, "in progress: 2 of 4 written so far (the run did not end)"),
        (1, 4, True, "SIGTERM", False, "interrupted by SIGTERM after 1 of 4"),
        (3, 4, True, None, False, "ended after 3 of 4"),
        (5, 4, True, None, True, "all 5 done"),  # more rows than planned units (extra rows): planned follows
    ],
)
def test_completion(done, planned, finished, interrupted, complete, reason):
    c = completion(done, planned, finished=finished, interrupted=interrupted)
    assert (c["complete"], c["reason"], c["interrupted"]) == (complete, reason, interrupted is not None)
    assert c["done"] == done and c["planned"] == max(done, planned)
