"""results.json schema version 2: the sample document validates, and each corruption is named by its JSON path."""

from __future__ import annotations

import json

import pytest

from mlts.report.results import write_json_atomic
from mlts.report.schema import ResultsSchemaError, load_results, validate_results
from tests.report._sample import sample_doc, slower, stress_doc

# Rows of sample_doc(): 0/1 mobilenet_v1 ref/driver, 2/3 mobilenet_v2, 4/5 quantized, 6 error row, 7 LSTM.


def test_sample_document_validates():
    assert validate_results(sample_doc()) is None
    assert validate_results(slower(sample_doc(), "asr_float", "driver:sample-all", 3.0)) is None


def test_unknown_fields_and_nulls_are_allowed():
    doc = sample_doc()
    doc["future_top_level"] = {"anything": [1, 2]}
    doc["results"][1]["future_field"] = "x"
    doc["results"][1]["accuracy"]["future_evaluator"] = {"score": -3}
    doc["results"][1]["compilation"]["save_to_cache"] = None
    doc["results"][1]["driver_timing_us"] = None
    doc["results"][0]["memory_mb"]["client_peak_rss"] = None
    validate_results(doc)


def _set(path: list, value):
    """A corruption: set doc[path...] = value (a missing sentinel deletes the key)."""

    def apply(doc):
        obj = doc
        for key in path[:-1]:
            obj = obj[key]
        if value is _DELETE:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value

    return apply


_DELETE = object()
LAT = ["results", 1, "latency_ms"]


def _swap_ci(doc):
    lat = doc["results"][0]["latency_ms"]
    lat["median_ci95"] = lat["median_ci95"][::-1]


def _bump_count(doc):
    doc["results"][1]["latency_ms"]["histogram"]["counts"][0] += 1


CORRUPTIONS = [
    (_set(["kind"], "bench"), "kind: expected one of 'benchmark', 'stress', 'validate', got 'bench'"),
    (_set(["environment"], []), "environment: expected an object, got a list"),
    (_set(["results"], {}), "results: expected a list, got an object"),
    (
        _set(["results", 3, "latency_ms", "median"], "x"),
        "results[3].latency_ms.median: expected a number, got 'x'",
    ),
    (_set(["results", 0, "status"], "fine"), "results[0].status: expected one of 'ok', 'error', got 'fine'"),
    (_set(["results", 2, "backend"], None), "results[2].backend: expected a string, got null"),
    (_set(["results", 6, "error"], _DELETE), "results[6].error: missing (error rows need it)"),
    (_set(["results", 0, "latency_ms"], _DELETE), "results[0].latency_ms: missing (ok rows need it)"),
    (_set(["results", 4, "compilation"], _DELETE), "results[4].compilation: missing (ok rows need it)"),
    (_set([*LAT, "std"], True), "results[1].latency_ms.std: expected a number, got true"),
    (
        _set([*LAT, "mean"], float("nan")),
        "results[1].latency_ms.mean: expected a finite number >= 0, got nan",
    ),
    (_set([*LAT, "n"], 40.0), "results[1].latency_ms.n: expected an integer, got 40.0"),
    (_set([*LAT, "warnings"], "none"), "results[1].latency_ms.warnings: expected a list, got 'none'"),
    (
        _set([*LAT, "histogram", "edges"], [1.0] * 32),
        "results[1].latency_ms.histogram.edges: expected 33 numbers, got 32",
    ),
    (_bump_count, "results[1].latency_ms.histogram.counts: counts sum to 41, expected n = 40"),
    (
        _set([*LAT, "samples", 5], -1.0),
        "results[1].latency_ms.samples[5]: expected a finite number >= 0, got -1.0",
    ),
    (_set([*LAT, "samples", 7], "3.2"), "results[1].latency_ms.samples[7]: expected a number, got '3.2'"),
    (_swap_ci, "results[0].latency_ms.median_ci95: ["),
    (
        _set(["results", 3, "driver_timing_us", "time_in_driver"], "n/a"),
        "results[3].driver_timing_us.time_in_driver: expected statistics or 'not measured', got 'n/a'",
    ),
    (
        _set(["results", 1, "compilation", "save_to_cache"], _DELETE),
        "results[1].compilation.save_to_cache: missing",
    ),
    (
        _set(["results", 5, "compilation", "prepare_from_cache", "n"], 0),
        "results[5].compilation.prepare_from_cache.n: expected an integer >= 1, got 0",
    ),
    (
        _set(["results", 5, "compilation", "cache_size_bytes"], -1),
        "results[5].compilation.cache_size_bytes: expected an integer >= 0, got -1",
    ),
    (
        _set(["results", 5, "validation_errors"], [3]),
        "results[5].validation_errors[0]: expected a string or an object, got 3",
    ),
    (
        _set(["results", 0, "accuracy", "topk"], []),
        "results[0].accuracy.topk: expected an object, got a list",
    ),
    (
        _set(["results", 0, "accuracy", "topk", "top1"], 1.2),
        "results[0].accuracy.topk.top1: expected a fraction in [0, 1], got 1.2",
    ),
    (
        _set(["results", 1, "accuracy", "vs_reference", "cts_pass"], "yes"),
        "results[1].accuracy.vs_reference.cts_pass: expected true or false, got 'yes'",
    ),
    (
        _set(["results", 7, "accuracy", "vs_golden", "metric", "phone_error_rate"], "0"),
        "results[7].accuracy.vs_golden.metric.phone_error_rate: expected a number, got '0'",
    ),
    (
        _set(["results", 7, "accuracy", "vs_golden", "outputs", "output", "mse"], -1e-12),
        "results[7].accuracy.vs_golden.outputs.output.mse: expected a finite number >= 0, got -1e-12",
    ),
    (
        _set(["results", 7, "sequence_latency_ms", "p90"], 1e9),
        "results[7].sequence_latency_ms.p95: expected >= p90 (1000000000.0), got ",
    ),
    (_set(["results", 0, "warmup", "seconds"], _DELETE), "results[0].warmup.seconds: missing"),
    (_set(["results", 7, "run"], _DELETE), "results[7].run: missing (ok rows need it)"),
    (
        _set(["results", 0, "run", "iterations"], -1),
        "results[0].run.iterations: expected an integer >= 0, got -1",
    ),
    (
        _set(["results", 3, "memory_mb", "driver_peak_rss"], "big"),
        "results[3].memory_mb.driver_peak_rss: expected a number",
    ),
]


@pytest.mark.parametrize(("corrupt", "message"), CORRUPTIONS, ids=[m.split(":")[0] for _, m in CORRUPTIONS])
def test_corruption_names_its_path(corrupt, message):
    doc = sample_doc()
    corrupt(doc)
    with pytest.raises(ResultsSchemaError) as info:
        validate_results(doc)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_top_level_must_be_an_object_with_version_2():
    with pytest.raises(ResultsSchemaError, match="the top level is a list"):
        validate_results([])
    doc = sample_doc()
    del doc["schema_version"]
    with pytest.raises(ResultsSchemaError, match="schema_version: missing"):
        validate_results(doc)


def test_stress_document_validates():
    validate_results(stress_doc())


@pytest.mark.parametrize(
    ("index", "key", "value", "message"),
    [
        (
            0,
            "outcome",
            "TIMEOUT",
            "results[0].outcome: expected one of 'SUCCESS', 'FAILURE', 'HANG', 'CRASH'",
        ),
        (0, "driver", 3, "results[0].driver: expected a string, got 3"),
        (1, "expected", "OK", "results[1].expected: expected one of 'SUCCESS'"),
        (1, "log_tail", ["a", 1], "results[1].log_tail[1]: expected a string, got 1"),
        (1, "duration_s", -0.5, "results[1].duration_s: expected a finite number >= 0, got -0.5"),
        (1, "signal", 1.5, "results[1].signal: expected an integer, got 1.5"),
    ],
)
def test_stress_corruptions(index, key, value, message):
    doc = stress_doc()
    doc["results"][index][key] = value
    with pytest.raises(ResultsSchemaError) as info:
        validate_results(doc)
    assert str(info.value).startswith(message), str(info.value)


def test_stress_record_needs_mode():
    doc = stress_doc()
    del doc["results"][2]["mode"]
    with pytest.raises(ResultsSchemaError, match=r"^results\[2\]\.mode: missing$"):
        validate_results(doc)


# --- load_results ---------------------------------------------------------------------------------


def test_load_round_trips_a_written_document(tmp_path):
    path = tmp_path / "results.json"
    write_json_atomic(sample_doc(), path)
    assert load_results(path) == json.loads(path.read_text())


def test_load_old_version_says_what_to_do(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "benchmark", "results": []}))
    with pytest.raises(ResultsSchemaError) as info:
        load_results(path)
    assert str(info.value) == (
        f"{path}: results schema version 1; this mlts reads versions 2 and 3 (re-run the benchmark to get a new file)"
    )


def test_load_newer_version_says_upgrade(tmp_path):
    path = tmp_path / "new.json"
    path.write_text(json.dumps({"schema_version": 4}))
    with pytest.raises(
        ResultsSchemaError, match=r"version 4; this mlts reads versions 2 and 3 \(upgrade mlts"
    ):
        load_results(path)


def test_load_prefixes_schema_errors_with_the_file(tmp_path):
    doc = sample_doc()
    doc["results"][3]["latency_ms"]["median"] = "x"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsSchemaError) as info:
        load_results(path)
    assert str(info.value) == f"{path}: results[3].latency_ms.median: expected a number, got 'x'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not a JSON results file (Expecting property name"),
        ('{"schema_version": NaN}', "not a JSON results file (NaN is not a JSON number"),
        ("", "not a JSON results file (Expecting value at line 1)"),
    ],
)
def test_load_not_json(tmp_path, text, message):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(ResultsSchemaError) as info:
        load_results(path)
    assert str(info.value).startswith(f"{path}: {message}")
    assert "\n" not in str(info.value)


def test_load_binary_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ResultsSchemaError, match="not UTF-8 text"):
        load_results(path)


def test_load_missing_file_and_directory_are_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_results(tmp_path / "absent.json")
    assert info.value.filename == str(tmp_path / "absent.json")
    with pytest.raises(IsADirectoryError):
        load_results(tmp_path)
