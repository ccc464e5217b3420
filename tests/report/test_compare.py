"""`mlts compare`: latency verdicts from the medians' intervals, accuracy and status changes, exit codes."""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from mlts.bench.stats import describe
from mlts.cli import MltsGroup
from mlts.commands.compare import compare
from mlts.records import Stats
from mlts.report.compare import compare_results, latency_change
from mlts.report.results import write_json_atomic
from tests.report._sample import sample_doc, slower

V1, REF = "mobilenet_v1_0.25_128", "cpu:onnxruntime"
DRV = "driver:sample-all"


@pytest.fixture()
def write(tmp_path):
    def put(doc: dict, name: str) -> str:
        path = tmp_path / name
        write_json_atomic(doc, path)
        return str(path)

    return put


def run(*args: str):
    return CliRunner().invoke(compare, list(args), prog_name="mlts compare")


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlts compare: "), result.stderr
    return lines[0]


def _lat(median: float, ci: list[float]) -> SimpleNamespace:
    """The two fields of a latency Stats record that latency_change reads."""
    return SimpleNamespace(median=median, median_ci95=ci)


def rows_by_key(result) -> dict:
    return {(r["model"], r["backend"]): r for r in result["rows"]}


# --- the latency interval, by hand ------------------------------------------------------------------


def test_interval_from_hand_written_intervals():
    # old median 11 in [10, 12], new 14 in [13, 15]: [13/12 - 1, 15/10 - 1] = [0.08333.., 0.5].
    old = _lat(11.0, [10.0, 12.0])
    new = _lat(14.0, [13.0, 15.0])
    lat = latency_change(old, new, 0.05)
    assert lat["change"] == pytest.approx(14 / 11 - 1, rel=1e-15)
    assert lat["change_ci95"] == pytest.approx([1 / 12, 0.5], rel=1e-15)
    assert lat["verdict"] == "slower"
    assert latency_change(old, new, 0.09)["verdict"] == "same"  # lower bound 0.0833 is not above 9%
    # new in [8, 9]: [8/12 - 1, 9/10 - 1] = [-1/3, -0.1]: faster at 5%, same at 20%.
    faster = _lat(8.5, [8.0, 9.0])
    assert latency_change(old, faster, 0.05)["change_ci95"] == pytest.approx([-1 / 3, -0.1], rel=1e-15)
    assert latency_change(old, faster, 0.05)["verdict"] == "faster"
    assert latency_change(old, faster, 0.2)["verdict"] == "same"


def test_interval_from_describe_order_statistics():
    # n = 10: the exact binomial 95% interval of the median is (X(2), X(9)), coverage 1 - 2*11/1024 = 97.9%
    # (X(3), X(8) covers only 89.1%). Old samples 1..10 ms: [2, 9]; new samples 3x: [6, 27].
    old = describe([i / 1000.0 for i in range(1, 11)])
    new = describe([3 * i / 1000.0 for i in range(1, 11)])
    assert old["median_ci95"] == pytest.approx([2.0, 9.0]) and new["median_ci95"] == pytest.approx(
        [6.0, 27.0]
    )
    lat = latency_change(Stats.from_json(old), Stats.from_json(new), 0.05)
    assert lat["change"] == pytest.approx(2.0, rel=1e-12)  # 16.5 / 5.5 - 1
    assert lat["change_ci95"] == pytest.approx([6 / 9 - 1, 27 / 2 - 1], rel=1e-12)
    assert lat["verdict"] == "same"  # the intervals overlap: ten samples cannot show a 3x slowdown


def test_zero_old_latency_leaves_the_bound_open():
    old = _lat(0.0, [0.0, 0.0])
    lat = latency_change(old, _lat(1.0, [1.0, 1.0]), 0.05)
    assert lat["change"] is None and lat["change_ci95"] == [None, None] and lat["verdict"] == "same"


# --- the command ------------------------------------------------------------------------------------------


def test_slower_row_is_a_regression_naming_the_row(write):
    doc = sample_doc()
    result = run(write(doc, "old.json"), write(slower(doc, V1, DRV, 1.5), "new.json"))
    assert result.exit_code == 1, result.output
    assert f"{V1} on {DRV}: slower: driver ÷ reference" in result.stdout
    assert "1 significant regression" in result.stdout
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith(V1) and DRV in ln)
    assert line.split()[-1] == "slower" and line.count("+50.0%") == 2  # the median's and the ratio's change


def _log_se(ci) -> float:
    """Hand-written: the log-normal standard error of a median from its 95% interval."""
    return (math.log(ci[1]) - math.log(ci[0])) / (2 * 1.959963984540054)


def test_slower_json_matches_the_documents(write):
    doc = sample_doc()
    new = slower(doc, V1, DRV, 1.5)
    result = run(write(doc, "old.json"), write(new, "new.json"), "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    row = rows_by_key(out)[(V1, DRV)]
    old_ref, old_lat, new_lat = (
        doc["results"][0]["latency_ms"],
        doc["results"][1]["latency_ms"],
        new["results"][1]["latency_ms"],
    )
    assert doc["results"][0]["backend"] == REF and doc["results"][0]["model"] == V1
    (olo, ohi), (nlo, nhi) = old_lat["median_ci95"], new_lat["median_ci95"]
    assert row["latency"]["old_median_ms"] == old_lat["median"]
    assert row["latency"]["new_median_ms"] == new_lat["median"]
    assert row["latency"]["change"] == pytest.approx(0.5, rel=1e-9)  # every sample scaled by 1.5
    assert row["latency"]["change_ci95"] == pytest.approx([nlo / ohi - 1, nhi / olo - 1], rel=1e-12)
    assert row["latency"]["verdict"] == "slower"
    # The decision: driver ÷ reference in each file (the reference unchanged), its change and interval.
    ratio = row["ratio"]
    assert ratio["old_ratio"] == pytest.approx(old_lat["median"] / old_ref["median"], rel=1e-12)
    assert ratio["new_ratio"] == pytest.approx(new_lat["median"] / old_ref["median"], rel=1e-12)
    assert ratio["change"] == pytest.approx(0.5, rel=1e-9)
    se = math.sqrt(
        _log_se(old_lat["median_ci95"]) ** 2
        + _log_se(new_lat["median_ci95"]) ** 2
        + 2 * _log_se(old_ref["median_ci95"]) ** 2
    )
    half = 1.959963984540054 * se
    assert ratio["change_ci95"] == pytest.approx(
        [1.5 * math.exp(-half) - 1, 1.5 * math.exp(half) - 1], rel=1e-9
    )
    assert ratio["verdict"] == "slower"
    assert out["regressions"] == [f"{V1} on {DRV}: slower: {_text(row)}"]
    others = {
        k: r["ratio"]["verdict"] for k, r in rows_by_key(out).items() if k != (V1, DRV) and r.get("ratio")
    }
    assert others.pop(("asr_float", DRV)) == "not judged"  # the sample has no reference row for it
    assert others and set(others.values()) == {"same"}
    assert "log-normal" in out["ratio_estimator"]


def _text(row):
    from mlts.report.compare import latency_text, ratio_text

    return f"{ratio_text(row['ratio'])}; {latency_text(row['latency'])} (information)"


def test_a_machine_that_got_slower_is_not_a_regression_of_the_driver(write):
    # Both backends of the model 1.5x slower (a busier machine): absolute medians say "slower", the ratio
    # measured within each run does not move, so nothing regressed.
    doc = sample_doc()
    busy = slower(slower(doc, V1, DRV, 1.5), V1, REF, 1.5)
    result = run(write(doc, "old.json"), write(busy, "new.json"), "--json")
    assert result.exit_code == 0, result.output
    row = rows_by_key(json.loads(result.stdout))[(V1, DRV)]
    assert row["latency"]["verdict"] == "slower"  # information
    assert row["ratio"]["change"] == pytest.approx(0.0, abs=1e-9) and row["ratio"]["verdict"] == "same"
    assert row["regressions"] == []


def test_a_driver_row_without_a_reference_is_not_judged(write):
    doc = sample_doc()
    broken = copy.deepcopy(slower(doc, V1, DRV, 3.0))
    ref = broken["results"][0]
    assert ref["model"] == V1 and ref["backend"] == REF
    for key in [k for k in ref if k not in ("model", "family", "backend", "threads")]:
        del ref[key]
    ref.update(status="error", error="onnxruntime failed")
    result = run(write(doc, "old.json"), write(broken, "new.json"), "--json")
    row = rows_by_key(json.loads(result.stdout))[(V1, DRV)]
    assert row["ratio"] == {"verdict": "not judged", "why": "no reference row that ran in the new file"}
    assert not any("slower" in r for r in row["regressions"])


def test_two_files_without_rows_are_one_line_and_status_2(write):
    doc = sample_doc()
    doc["results"] = []
    path = write(doc, "empty.json")
    assert "have no results rows at all: nothing to compare" in one_line_error(run(path, path))


def test_same_file_twice_is_all_same(write):
    path = write(sample_doc(), "same.json")
    result = run(path, path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    verdicts = [r["latency"]["verdict"] for r in out["rows"] if r["latency"]]
    assert len(verdicts) == 7 and set(verdicts) == {"same"}
    assert all(r["latency"]["change"] == 0.0 for r in out["rows"] if r["latency"])
    assert out["regressions"] == [] and out["added"] == [] and out["removed"] == []
    error_row = rows_by_key(out)[("mobilenet_v2_0.35_128", "driver:sample-minimal")]
    assert error_row["status"] == "still failing" and error_row["latency"] is None


def test_same_file_with_threshold_zero_is_still_same(write):
    path = write(sample_doc(), "same.json")
    assert run(path, path, "--threshold", "0").exit_code == 0


def test_faster_is_not_a_regression(write):
    doc = sample_doc()
    result = run(write(doc, "old.json"), write(slower(doc, V1, DRV, 0.6), "new.json"))
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith(V1) and DRV in ln)
    assert line.split()[-1] == "faster" and "-40.0%" in line
    assert "no significant regression" in result.stdout


def test_a_large_threshold_hides_the_slowdown(write):
    doc = sample_doc()
    result = run(write(doc, "old.json"), write(slower(doc, V1, DRV, 1.5), "new.json"), "--threshold", "0.6")
    assert result.exit_code == 0, result.output


def _with_top1(doc: dict, index: int, top1: float) -> dict:
    out = copy.deepcopy(doc)
    out["results"][index]["accuracy"]["topk"]["top1"] = top1
    return out


@pytest.mark.parametrize(("top1", "code"), [(0.86, 1), (0.88, 0), (0.90, 0)])
def test_top1_drop_beyond_005_is_a_regression(write, top1, code):
    doc = sample_doc()  # row 1 has top1 0.93; a drop of exactly 0.05 (0.88) is within the rule
    result = run(write(doc, "old.json"), write(_with_top1(doc, 1, top1), "new.json"), "--json")
    assert result.exit_code == code, result.output
    row = rows_by_key(json.loads(result.stdout))[(V1, DRV)]
    assert row["accuracy"]["top1"]["change"] == pytest.approx(top1 - 0.93, abs=1e-12)
    assert row["accuracy"]["top2"]["change"] == 0.0
    assert any("top-1 dropped by 0.070" in r for r in row["regressions"]) == (code == 1)


def test_accuracy_change_is_listed_in_text(write):
    doc = sample_doc()
    result = run(write(doc, "old.json"), write(_with_top1(doc, 1, 0.90), "new.json"))
    assert f"{V1} on {DRV}: top1 0.930 -> 0.900 (-0.030)" in result.stdout


def test_new_validation_error_is_a_regression_but_a_moved_value_is_not(write):
    doc = sample_doc()
    old = write(doc, "old.json")
    new = copy.deepcopy(doc)
    new["results"][1]["validation_errors"] = ["output 0 is not finite"]
    moved = copy.deepcopy(doc)
    moved["results"][5]["validation_errors"] = [
        "top-1 accuracy 0.690 is more than 0.05 below the reference's 0.810 (MLTS validation rule)"
    ]
    result = run(old, write(new, "new.json"), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["regressions"] == [
        f"{V1} on {DRV}: new validation error: output 0 is not finite"
    ]
    assert run(old, write(moved, "moved.json")).exit_code == 0


def test_newly_failing_and_fixed_rows(write):
    doc = sample_doc()
    broken = copy.deepcopy(doc)
    broken["results"][3] = {
        "model": "mobilenet_v2_0.35_128",
        "backend": DRV,
        "status": "error",
        "error": "DEAD_OBJECT: driver process died",
    }
    old, new = write(doc, "old.json"), write(broken, "new.json")
    result = run(old, new, "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["regressions"] == [
        f"mobilenet_v2_0.35_128 on {DRV}: newly failing: DEAD_OBJECT: driver process died"
    ]
    back = run(new, old, "--json")
    assert back.exit_code == 0
    assert rows_by_key(json.loads(back.stdout))[("mobilenet_v2_0.35_128", DRV)]["status"] == "fixed"


def test_added_and_removed_rows(write):
    doc = sample_doc()
    new = copy.deepcopy(doc)
    new["results"] = [r for r in new["results"] if r["model"] != "asr_float"]
    new["results"].append({**copy.deepcopy(doc["results"][0]), "backend": "driver:other"})
    result = run(write(doc, "old.json"), write(new, "new.json"))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "added (only in" in text and f"  {V1} on driver:other" in text
    assert "removed (only in" in text and f"  asr_float on {DRV}" in text


# --- bad input: exit 2, one line ----------------------------------------------------------------------


def test_version_mismatch(write, tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**sample_doc(), "schema_version": 1}))
    line = one_line_error(run(str(old), write(sample_doc(), "new.json")))
    assert line == (
        f"mlts compare: {old}: results schema version 1; this mlts reads versions 2 and 3 "
        "(re-run the benchmark to get a new file)"
    )


def test_missing_file(write, tmp_path):
    line = one_line_error(run(write(sample_doc(), "old.json"), str(tmp_path / "absent.json")))
    assert line == f"mlts compare: {tmp_path / 'absent.json'}: No such file or directory"


def test_directory_and_invalid_document(write, tmp_path):
    assert one_line_error(run(str(tmp_path), str(tmp_path))).endswith("it is a directory, not a regular file")
    bad = sample_doc()
    bad["results"][2]["latency_ms"]["median_ci95"] = [1.0]
    line = one_line_error(run(write(bad, "bad.json"), write(sample_doc(), "new.json")))
    assert line.endswith("bad.json: results[2].latency_ms.median_ci95: expected 2 numbers, got 1")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-0.1", "expected a finite fraction >= 0"),
        ("nan", "expected a finite fraction >= 0"),
        ("inf", "expected a finite fraction >= 0"),
        ("five", "expected a number such as 0.05, got 'five'"),
    ],
)
def test_bad_threshold(write, value, message):
    path = write(sample_doc(), "a.json")
    assert message in one_line_error(run(path, path, "--threshold", value))


def test_stress_and_duplicate_rows_are_refused(write):
    from tests.report._sample import stress_doc

    path = write(sample_doc(), "a.json")
    assert "compare reads benchmark results" in one_line_error(run(write(stress_doc(), "s.json"), path))
    dup = sample_doc()
    dup["results"].append(copy.deepcopy(dup["results"][0]))
    line = one_line_error(run(path, write(dup, "dup.json")))
    assert line.endswith(f"results[8] repeats {V1} on {REF} (first at results[0])")


def test_exit_codes_pass_through_the_mlts_group(write):
    group = MltsGroup(name="mlts")
    group.add_command(compare)
    doc = sample_doc()
    old, new = write(doc, "old.json"), write(slower(doc, V1, DRV, 1.5), "new.json")
    runner = CliRunner()
    assert runner.invoke(group, ["compare", old, old], obj={}).exit_code == 0
    assert runner.invoke(group, ["compare", old, new], obj={}).exit_code == 1
    bad = runner.invoke(group, ["compare", old, old, "--threshold", "-1"], obj={})
    assert bad.exit_code == 2 and bad.stderr.startswith("mlts compare: --threshold")


def test_help_documents_the_exit_status():
    result = run("--help")
    assert result.exit_code == 0
    assert "Exit status:" in result.output and "mlts compare: <reason>" in result.output


def test_library_refuses_a_negative_threshold():
    with pytest.raises(ValueError, match="threshold must be a finite fraction"):
        compare_results(sample_doc(), sample_doc(), -0.01)


# --- environment warnings ---------------------------------------------------------------------------


def test_differing_package_versions_and_cpu_are_warned_about(write):
    old = sample_doc()
    new = copy.deepcopy(old)
    old["environment"].update(
        packages={"numpy": "2.4.6", "onnxruntime": "1.32.0", "pandas": "3.1.1"},
        cpu_features={"AVX2": True, "AVX-512": False, "VNNI": False, "AMX": False},
        onnxruntime_integer={"exact": False, "summary": "no"},
    )
    new["environment"].update(
        packages={"numpy": "2.4.6", "onnxruntime": "1.31.0", "pandas": "3.1.1"},
        cpu_features={"AVX2": True, "AVX-512": True, "VNNI": True, "AMX": False},
        onnxruntime_integer={"exact": True, "summary": "yes"},
    )
    warnings = compare_results(old, new)["environment_warnings"]
    assert "package onnxruntime differs: 1.32.0 -> 1.31.0" in warnings
    assert not any("numpy" in w or "pandas" in w for w in warnings)
    assert any(w.startswith("cpu_features differs") for w in warnings)
    assert any("exactness differs: not exact -> exact" in w for w in warnings)
    text = run(write(old, "old.json"), write(new, "new.json"))
    assert "warning: the runs' environments differ" in text.stdout
    assert "package onnxruntime differs: 1.32.0 -> 1.31.0" in text.stdout
    as_json = run(write(old, "old.json"), write(new, "new.json"), "--json")
    assert json.loads(as_json.stdout)["environment_warnings"] == warnings
    assert "mlts compare: warning: package onnxruntime differs" in as_json.stderr
    same = compare_results(old, copy.deepcopy(old))
    assert same["environment_warnings"] == []


# --- what compare warns about and treats as information ---------------------------------------------


def test_a_slower_reference_is_information_not_a_regression(write):
    doc = sample_doc()
    result = run(write(doc, "old.json"), write(slower(doc, V1, REF, 1.5), "new.json"), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["regressions"] == []
    assert rows_by_key(out)[(V1, REF)]["latency"]["verdict"] == "slower"
    assert len(out["reference_changes"]) == 1 and out["reference_changes"][0].startswith(
        f"{V1} on {REF}: slower"
    )


def test_configuration_differences_are_warned_about(write):
    doc = sample_doc()
    other = copy.deepcopy(doc)
    other["config"].update(quick=not doc["config"].get("quick", False), threads=7, images=3)
    result = run(write(doc, "old.json"), write(other, "new.json"))
    assert result.exit_code == 0, result.output
    assert "warning: the runs' configurations differ" in result.stdout
    assert "threads differs:" in result.stdout and "images differs:" in result.stdout
    assert "quick differs: full -> quick" in result.stdout or "quick differs: quick -> full" in result.stdout


def test_step_by_step_models_compare_per_step(write):
    doc = sample_doc()
    out = json.loads(run(write(doc, "a.json"), write(doc, "b.json"), "--json").stdout)
    assert rows_by_key(out)[("asr_float", DRV)]["latency"]["unit"] == "step"
    assert rows_by_key(out)[(V1, DRV)]["latency"]["unit"] == "call"


def test_nothing_in_common_exits_2(write):
    doc = sample_doc()
    other = copy.deepcopy(doc)
    for r in other["results"]:
        r["model"] = "other_" + r["model"]
    line = one_line_error(run(write(doc, "a.json"), write(other, "b.json")))
    assert "no model × backend in common" in line


def test_a_version_2_file_compares_with_a_version_3_file(write):
    from pathlib import Path

    v2 = Path(__file__).parent / "data" / "results_v2.json"
    result = run(str(v2), str(v2), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert len(out["rows"]) == 6 and out["regressions"] == []


def test_sequences_matter_only_when_both_runs_have_lstm_models(write):
    doc = sample_doc()
    other = copy.deepcopy(doc)
    other["config"]["sequences"] = 7
    assert "sequences differs" in run(write(doc, "a.json"), write(other, "b.json")).stdout
    other["results"] = [r for r in other["results"] if r["model"] != "asr_float"]
    assert "sequences differs" not in run(write(doc, "a.json"), write(other, "b.json")).stdout
