"""results.csv: the documented columns in order, values read back equal to the document's, empty when absent."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from mlts.report.csv_export import results_frame, write_csv
from mlts.report.schema import ResultsSchemaError
from tests.report._sample import sample_doc

# The documented column order (docs/results-schema.md), written out independently of the code.
EXPECTED_COLUMNS = (
    "model family backend status error threads warmup_iterations warmup_s iterations run_s dataset "
    "dataset_size labels latency_ms_n latency_ms_mean latency_ms_std latency_ms_median latency_ms_mad "
    "latency_ms_p50 latency_ms_p90 latency_ms_p95 latency_ms_p99 latency_ms_min latency_ms_max "
    "latency_ms_ci95_lo latency_ms_ci95_hi driver_time_on_device_us_median driver_time_in_driver_us_median "
    "client_peak_rss_mb driver_peak_rss_mb top1 top2 top3 top4 top5 golden_mse golden_max_abs_error "
    "reference_max_abs_error cts_pass cts_ratio reference_exact phone_error_rate mel_cep_distortion log_f0_rms "
    "compile_without_cache_ms_median compile_save_to_cache_ms_median compile_prepare_from_cache_ms_median "
    "cache_size_bytes validation_errors verdict_pass verdict_rule output_kind retries reference endpoint host "
    "transport"
).split()


@pytest.fixture(scope="module")
def doc():
    return sample_doc()


@pytest.fixture(scope="module")
def table(doc, tmp_path_factory):
    """The CSV written to disk and read back (pandas parses floats exactly: the comparisons below are ==)."""
    path = tmp_path_factory.mktemp("csv") / "results.csv"
    write_csv(doc, path)
    return pd.read_csv(path, keep_default_na=False, na_values=[""]), path


def _row(frame: pd.DataFrame, model: str, backend: str) -> pd.Series:
    rows = frame[(frame["model"] == model) & (frame["backend"] == backend)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_columns_in_documented_order_and_one_row_per_record(doc, table):
    frame, _ = table
    assert list(frame.columns) == EXPECTED_COLUMNS
    assert len(frame) == len(doc["results"]) == 8
    assert list(zip(frame["model"], frame["backend"], strict=True)) == [
        (r["model"], r["backend"]) for r in doc["results"]
    ]


def test_latency_values_equal_the_document(doc, table):
    frame, _ = table
    for rec in doc["results"]:
        if rec["status"] != "ok":
            continue
        row, lat = _row(frame, rec["model"], rec["backend"]), rec["latency_ms"]
        for key in ("n", "mean", "std", "median", "mad", "p50", "p90", "p95", "p99", "min", "max"):
            assert row[f"latency_ms_{key}"] == lat[key], key
        assert (row["latency_ms_ci95_lo"], row["latency_ms_ci95_hi"]) == tuple(lat["median_ci95"])
        assert row["warmup_iterations"] == rec["warmup"]["iterations"]
        assert row["warmup_s"] == rec["warmup"]["seconds"] and row["run_s"] == rec["run"]["seconds"]
        assert row["iterations"] == rec["iterations"]


def test_driver_row_values(doc, table):
    frame, _ = table
    rec = doc["results"][1]
    row = _row(frame, "mobilenet_v1_0.25_128", "driver:sample-all")
    assert row["family"] == "mobilenet_v1" and row["threads"] == 1
    assert (row["dataset"], row["dataset_size"], row["labels"]) == ("procedural", 100, "golden")
    assert row["driver_time_on_device_us_median"] == rec["driver_timing_us"]["time_on_device"]["median"]
    assert pd.isna(row["driver_time_in_driver_us_median"])  # "not measured"
    assert (row["client_peak_rss_mb"], row["driver_peak_rss_mb"]) == (310.5, 201.25)
    assert [row[f"top{k}"] for k in range(1, 6)] == [rec["accuracy"]["topk"][f"top{k}"] for k in range(1, 6)]
    assert (row["golden_mse"], row["golden_max_abs_error"]) == (2.0e-13, 1.1e-6)
    assert (row["reference_max_abs_error"], row["cts_pass"], row["cts_ratio"]) == (9.5e-7, True, 0.41)
    comp = rec["compilation"]
    assert row["compile_without_cache_ms_median"] == comp["without_cache"]["median"]
    assert row["compile_save_to_cache_ms_median"] == comp["save_to_cache"]["median"]
    assert row["compile_prepare_from_cache_ms_median"] == comp["prepare_from_cache"]["median"]
    assert row["cache_size_bytes"] == 4_312_064
    assert pd.isna(row["validation_errors"]) and pd.isna(row["error"])


def test_reference_row_has_empty_driver_columns(table):
    frame, _ = table
    row = _row(frame, "mobilenet_v1_0.25_128", "cpu:onnxruntime")
    for col in (
        "driver_time_on_device_us_median",
        "driver_peak_rss_mb",
        "reference_max_abs_error",
        "cts_pass",
        "compile_without_cache_ms_median",
        "cache_size_bytes",
        "phone_error_rate",
    ):
        assert pd.isna(row[col]), col
    assert row["top1"] == 0.94


def test_quantized_driver_row(doc, table):
    frame, _ = table
    row = _row(frame, "mobilenet_v1_0.25_128_quant", "driver:sample-all")
    assert pd.isna(row["driver_time_on_device_us_median"]) and pd.isna(row["driver_time_in_driver_us_median"])
    assert (row["cts_pass"], row["cts_ratio"], row["top1"]) == (False, 1.67, 0.70)
    assert row["validation_errors"] == doc["results"][5]["validation_errors"][0]["message"]


def test_error_row_has_only_identity_and_error(doc, table):
    frame, _ = table
    row = _row(frame, "mobilenet_v2_0.35_128", "driver:sample-minimal")
    assert row["status"] == "error" and row["error"] == doc["results"][6]["error"]
    filled = {c for c in EXPECTED_COLUMNS if not pd.isna(row[c])}
    assert filled == {"model", "family", "backend", "status", "error", "threads"}


def test_lstm_row_takes_the_speech_metric_and_per_output_errors(table):
    frame, _ = table
    row = _row(frame, "asr_float", "driver:sample-all")
    assert row["phone_error_rate"] == 0.0
    assert pd.isna(row["mel_cep_distortion"]) and pd.isna(row["top1"])
    assert (row["golden_mse"], row["golden_max_abs_error"]) == (1e-12, 2e-6)
    assert row["latency_ms_n"] == 420 and row["dataset"] == "asr-sequences" and pd.isna(row["labels"])


def test_file_text_keeps_integers_and_empty_cells(table):
    _, path = table
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == ",".join(EXPECTED_COLUMNS)
    driver = lines[2].split(",")
    assert driver[EXPECTED_COLUMNS.index("cache_size_bytes")] == "4312064"
    assert driver[EXPECTED_COLUMNS.index("driver_time_in_driver_us_median")] == ""
    assert not [p for p in path.parent.iterdir() if p.name != "results.csv"]  # no temp file left


def test_several_validation_errors_are_joined(doc):
    d = sample_doc()
    d["results"][5]["validation_errors"] = ["first problem", "second problem"]
    assert results_frame(d).loc[5, "validation_errors"] == "first problem; second problem"


def test_lstm_errors_take_the_largest_output():
    d = sample_doc()
    d["results"][7]["accuracy"]["vs_golden"]["outputs"]["state"] = {"mse": 3e-12, "max_abs_error": 1e-6}
    row = results_frame(d).loc[7]
    assert (row["golden_mse"], row["golden_max_abs_error"]) == (3e-12, 2e-6)


def test_invalid_document_is_refused():
    d = sample_doc()
    d["results"][0]["latency_ms"]["median"] = -1.0
    with pytest.raises(ResultsSchemaError, match=r"results\[0\]\.latency_ms\.median"):
        results_frame(d)


def test_stress_document_gets_stress_columns(tmp_path):
    from tests.report._sample import stress_doc

    path = tmp_path / "stress.csv"
    write_csv(stress_doc(), path)
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    assert list(frame.columns) == [
        "mode",
        "model",
        "driver",
        "outcome",
        "expected",
        "reason",
        "duration_s",
        "iterations",
        "signal",
    ]
    assert list(frame["outcome"]) == ["SUCCESS", "CRASH", "HANG"]
    assert frame.loc[1, "duration_s"] == 1.5 and frame.loc[1, "iterations"] == 12
    assert [str(s) for s in frame["signal"]] == ["nan", "9", "SIGKILL"]


def test_verdict_and_retries_columns():
    d = copy.deepcopy(sample_doc())
    d["results"][1]["verdict"] = {"pass": False, "profile": "p", "rule": "r", "checks": []}
    d["results"][1]["retries"] = {"retries": 3, "errors": {}, "error_classes": {}}
    frame = results_frame(d)
    assert frame.loc[1, "verdict_pass"] == False  # noqa: E712 (pandas' nullable boolean)
    assert frame.loc[1, "retries"] == 3
    assert pd.isna(frame.loc[0, "verdict_pass"]) and pd.isna(frame.loc[0, "retries"])
