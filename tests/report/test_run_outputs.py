"""The end of a run as text: verdict lines, the table's legend, --summary Markdown and --junit XML."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET

from mlts.bench.run_record import completion
from mlts.bench.run_summary import summarize
from mlts.records import ResultsDocument
from mlts.report.run_junit import results_junit_xml
from mlts.report.run_markdown import cell, markdown_summary
from mlts.report.run_verdict import legend_lines, verdict_lines
from tests.report._sample import sample_doc, stress_doc

NOISE = {
    "noisy": True,
    "reasons": ["load average up to 4.2 on 2 cores"],
    "headline": "this run was noisy: load average up to 4.2 on 2 cores",
    "reference_spread": None,
}


def _finished(doc: dict, **completion_args) -> dict:
    doc = copy.deepcopy(doc)
    doc["noise"] = NOISE
    doc["summary"] = summarize(doc, noisy=True)
    n = len(doc["results"])
    args = {"done": n, "planned": n, "finished": True, "interrupted": None, **completion_args}
    doc["completion"] = completion(args.pop("done"), args.pop("planned"), **args)
    return doc


def test_verdict_lines_of_a_benchmark():
    doc = _finished(sample_doc())
    lines = verdict_lines(doc, width=400)
    g = doc["summary"]
    lo, hi = g["geomean_ci"]
    assert lines[0] == (
        f"verdict: 3 of 5 verdicts passed · driver ÷ onnxruntime geomean {g['geomean_ratio']:.2f}× "
        f"[{lo:.2f}×, {hi:.2f}×] over 3 rows · run noisy: yes"
    )
    assert lines[1] == "failures (2):" and lines[2].startswith(
        "  mobilenet_v1_0.25_128_quant/driver:sample-all: "
    )
    assert lines[-1] == NOISE["headline"]


def test_an_incomplete_run_says_so_first():
    doc = _finished(sample_doc(), done=8, planned=20, interrupted="SIGINT (Ctrl-C)")
    assert (
        verdict_lines(doc, width=400)[0]
        == "INCOMPLETE: 8 of 20 (interrupted by SIGINT (Ctrl-C) after 8 of 20)"
    )


def test_verdict_lines_are_wrapped_to_the_width():
    doc = _finished(sample_doc())
    lines = verdict_lines(doc, width=60)
    assert all(len(line) <= 60 for line in lines)
    joined = " ".join(" ".join(line.split()) for line in lines)
    for failure in doc["summary"]["failures"]:
        assert " ".join(failure.split()) in joined


def test_the_legend_explains_quantized_units_and_the_ratio_only_when_there_are_quantized_rows():
    rows = ResultsDocument.from_json(sample_doc()).rows
    text = " ".join(legend_lines(rows, width=400))
    assert '"81u": 81 steps of the output\'s scale' in text and '"27.00x" = 81 / 3' in text
    assert "8-bit models' top1" in text
    float_rows = [r for r in rows if "quant" not in r.model]
    text = " ".join(legend_lines(float_rows, width=400))
    assert "CTS err" in text and "81u" not in text
    assert legend_lines([]) == []


def test_markdown_summary_of_a_benchmark():
    doc = _finished(sample_doc())
    text = markdown_summary(doc)
    lines = text.splitlines()
    assert lines[0] == "## mlts benchmark: 3 of 5 verdicts passed"
    assert "| noisy | **yes**: this run was noisy: load average up to 4.2 on 2 cores |" in lines
    assert "### Failures (2)" in lines
    row = next(ln for ln in lines if ln.startswith("| mobilenet_v1_0.25_128 | driver:sample-all |"))
    d, r = doc["results"][1]["latency_ms"], doc["results"][0]["latency_ms"]
    assert f"{d['median'] / r['median']:.2f}×" in row and row.endswith("| pass (no accuracy verdict) |")
    quant = next(ln for ln in lines if ln.startswith("| mobilenet_v1_0.25_128_quant | driver:sample-all |"))
    assert quant.endswith("| **fail** |")  # its validation error
    assert "| mobilenet_v2_0.35_128 | driver:sample-minimal | error |" in text
    assert cell("a|b\nc") == "a\\|b c"


def test_markdown_summary_of_an_interrupted_stress_run():
    doc = _finished(stress_doc(), done=len(stress_doc()["results"]), planned=10, interrupted="SIGTERM")
    text = markdown_summary(doc)
    assert text.splitlines()[0].endswith(f"(INCOMPLETE: {len(doc['results'])} of 10)")
    assert "| completion | **incomplete**: interrupted by SIGTERM" in text


def test_junit_of_a_benchmark_fails_verdicts_and_errs_failed_runs():
    root = ET.fromstring(results_junit_xml(_finished(sample_doc())))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("8", "1", "1")
    failure = root.find(
        "testsuite[@name='mobilenet_v1_0.25_128_quant']/testcase[@name='driver:sample-all']/failure"
    )
    assert failure is not None and "top-1 accuracy 0.700" in failure.get("message")
    error = root.find(
        "testsuite[@name='mobilenet_v2_0.35_128']/testcase[@name='driver:sample-minimal']/error"
    )
    assert error is not None and "does not support operation" in error.get("message")


def test_junit_of_a_stress_run_and_of_an_incomplete_one():
    doc = stress_doc()
    document = ResultsDocument.from_json(doc)
    unexpected = [r for r in document.stress if r.unexpected]
    root = ET.fromstring(results_junit_xml(_finished(doc)))
    assert root.get("tests") == str(len(document.stress)) and root.get("failures") == str(len(unexpected))
    assert sorted(f.get("type") for f in root.iter("failure")) == sorted(r.outcome for r in unexpected)
    partial = ET.fromstring(
        results_junit_xml(_finished(doc, done=len(doc["results"]), planned=9, interrupted="SIGINT"))
    )
    (run,) = partial.findall("testsuite[@name='mlts run']")
    assert run.find("testcase/error").get("message").startswith(f"incomplete: {len(doc['results'])} of 9")


def test_untrusted_text_is_escaped_in_the_verdict_lines():
    doc = _finished(sample_doc())
    doc["summary"]["failures"] = ["m/driver:x: \x1b[2Jboom \u202eevil"]
    lines = verdict_lines(doc, width=400)
    assert "  m/driver:x: \\x1b[2Jboom \\u202eevil" in lines
    assert not any("\x1b" in line or "\u202e" in line for line in lines)
