"""The verdict a report opens with (header line, chips, banners), the load table, the legends, the validate
page's options and restarts, and the stress table's process index."""

from __future__ import annotations

import copy
import math

import pytest

from mlts.records import CaseResult, ResultsDocument, ValidateSection
from mlts.report._html_headline import geomeans
from mlts.report._html_overview import overview
from mlts.report.html import render_report
from mlts.report.validate_section import option_items, restarts_text
from mlts.validate.results import results_document
from tests.report._dom import Node, parse_html
from tests.report._full_run import full_run_doc, multi_process_stress_doc, wide_validate_doc
from tests.report._sample import sample_doc


def _page(doc: dict) -> Node:
    return parse_html(render_report(doc))


def _verdict_line(tree: Node) -> Node:
    return tree.find("header", "page").find("p", "verdict")


def _banners(tree: Node) -> dict[str, Node]:
    return {d.attrs["data-banner"]: d for d in tree.find_all("div", "banner")}


# --- the benchmark's verdict ------------------------------------------------------------------------------


def test_the_run_sides_summary_noise_and_completion_open_the_report():
    tree = _page(full_run_doc())
    line = _verdict_line(tree)
    assert line.attrs["data-state"] == "fail" and line.find("b").text == "FAILED"
    text = line.text
    assert "48 of 50 verdicts passed" in text
    assert "driver ÷ onnxruntime 1.63× (geomean, 95% interval 1.41×–1.90×)" in text
    assert "2 failures" in text and "this run was noisy" in text and "incomplete: 58 of 87" in text
    banners = _banners(tree)
    assert banners["incomplete"].find("h2").text == "Incomplete: 58 of 87 done"
    assert "interrupted by the user (Ctrl-C)" in banners["incomplete"].text
    noisy = banners["noisy"]
    assert noisy.find("h2").text == "This run was noisy"
    assert "CPU steal up to 6.1%" in [li.text for li in noisy.find_all("li")]
    assert len(banners["fail"].find_all("li")) == 2
    # The banners come before the overview, and the contents bar leads to them.
    sections = [s.attrs.get("id") for s in tree.find_all("section")]
    assert sections[:2] == ["verdict", "overview"]
    assert tree.find("nav", "contents").find_all("a")[0].attrs["href"] == "#verdict"


def test_without_a_summary_the_verdict_is_worked_out_from_the_rows():
    doc = sample_doc()
    line = _verdict_line(_page(doc))
    # sample-all's two float rows carry no verdict; the sample-minimal run failed.
    assert line.attrs["data-state"] == "fail"
    assert "1 failure" in line.text and "noise not measured" in line.text
    ratios = overview(ResultsDocument.from_json(doc).rows)["lines"]
    per = geomeans(ratios)
    g, lo, hi, n = per["driver:sample-all"]
    shown = [ln["ratio"] for ln in ratios if ln["backend"] == "driver:sample-all" and ln["ratio"]]
    assert n == len(shown) == 3
    assert g == pytest.approx(math.prod(r["ratio"] for r in shown) ** (1 / 3))
    assert lo == pytest.approx(math.prod(r["lo"] for r in shown) ** (1 / 3))
    assert lo <= g <= hi
    assert f"sample-all ÷ onnxruntime {g:.2f}× (geomean of 3, interval {lo:.2f}×–{hi:.2f}×)" in line.text


def test_a_quiet_complete_passing_run_says_so():
    doc = sample_doc()
    doc["results"] = [r for r in doc["results"] if r["status"] == "ok" and r["model"] != "asr_float"]
    for r in doc["results"]:
        if r["backend"] == "driver:sample-all":
            r["verdict"] = {"pass": True, "profile": "float", "rule": "dense-error", "checks": []}
            r["validation_errors"] = []
    doc["noise"] = {"noisy": False, "reasons": [], "headline": ""}
    doc["completion"] = {"complete": True, "interrupted": False, "planned": 6, "done": 6, "reason": ""}
    tree = _page(doc)
    line = _verdict_line(tree)
    assert line.attrs["data-state"] == "pass" and line.find("b").text == "PASSED"
    assert "3 of 3 verdicts passed" in line.text and "run quiet" in line.text and "no failures" in line.text
    assert not tree.find_all("div", "banner") and not tree.find_all("section", id="verdict")
    # The verdict's rule is named under it.
    cell = tree.find("section", id="overview").find_all("td", "verdict-cell")[0]
    assert cell.find("span", "rule").text == "dense-error"


def test_malformed_run_side_sections_are_left_out_not_guessed():
    doc = sample_doc()
    doc["summary"] = {"verdicts_passed": "many", "verdicts_total": -1, "geomean_ratio": "x", "failures": 3}
    doc["noise"] = ["noisy"]
    doc["completion"] = {"complete": "no", "planned": 1.5}
    doc["environment"]["load"] = {"before": {"loadavg": [1, "x"]}, "during": "often"}
    tree = _page(doc)
    line = _verdict_line(tree).text
    assert "noise not measured" in line and "incomplete" not in line and "geomean of 3" in line
    assert not tree.find_all("table", "load")


def test_the_load_before_during_and_after_the_run_is_in_the_setup():
    tree = _page(full_run_doc())
    rows = [
        [c.text for c in tr.find_all("th") + tr.find_all("td")]
        for tr in tree.find("table", "load").find_all("tr")
    ]
    assert rows[0] == ["", "load 1 min", "load 5 min", "load 15 min", "CPU steal", "runnable"]
    assert rows[1] == ["before", "3.90", "2.10", "1.20", "0.4%", "4"]
    assert rows[2] == ["during (highest of 2 readings)", "5.20", "3.90", "2.00", "6.1%", "6"]
    assert rows[3] == ["after", "4.10", "3.70", "2.20", "1.0%", "3"]
    env = [dt.text for dt in tree.find("section", id="setup").find_all("dt")]
    assert "load" not in env  # not repeated as a raw line


# --- legends ----------------------------------------------------------------------------------------------


def test_every_shown_column_has_a_legend_and_8_bit_tables_explain_their_top1():
    tree = _page(full_run_doc())
    for table in tree.find_all("table", "inference"):
        family = table.attrs["data-family"]
        heads = [th.text for th in table.find("thead").find_all("tr")[1].find_all("th")]
        legend = tree.find("dl", "legend", data_family=family)
        terms = [dt.text for dt in legend.find_all("dt")]
        assert {"iters", "test set", "median [95% CI]", "p90", "vs CPU baseline"} <= set(terms)
        for head in heads[2:]:
            assert any(t.endswith(f": {head}") or f" {head}," in t + "," for t in terms), (family, head)
        notes = tree.find_all("p", "quantized-note", data_family=family)
        assert bool(notes) == family.endswith("_quant")
        if notes:
            assert (
                "synthetic" in notes[0].text and "max dev" in notes[0].text and "CTS ratio" in notes[0].text
            )
            assert "†" in terms


# --- stress -----------------------------------------------------------------------------------------------


def test_multi_process_rows_name_their_process_and_the_stress_verdict_counts_tests():
    tree = _page(multi_process_stress_doc())
    rows = tree.find("table", "stress").find_all("tr")[1:]
    assert [r.find("td", "test").text for r in rows] == [
        "process 0",
        "process 1",
        "process 2",
        "process 3",
        "-",
    ]
    line = _verdict_line(tree)
    assert line.attrs["data-state"] == "fail"
    assert "4 of 5 stress tests ended as expected" in line.text and "1 failure" in line.text
    (failure,) = _banners(tree)["fail"].find_all("li")
    assert failure.text.startswith(
        "performance-degradation-stress/sample-all: FAILURE, expected SUCCESS: latency"
    )
    # The reason is never cut: the whole sentence is in the table and the banner.
    reason = multi_process_stress_doc()["results"][-1]["reason"]
    assert rows[-1].find("td", "reason").text == reason and failure.text.endswith(reason)


# --- validate ---------------------------------------------------------------------------------------------


def test_the_validate_page_has_the_shared_header_and_its_options_as_a_table():
    tree = _page(wide_validate_doc())
    header = tree.find("header", "page")
    assert header.find("h1").text == "mlts validate report: sample-all"
    line = _verdict_line(tree)
    assert line.attrs["data-state"] == "fail" and line.find("b").text == "FAILED"
    options = tree.find("section", id="validate").find("dl", "kv")
    pairs = dict(
        zip([d.text for d in options.find_all("dt")], [d.text for d in options.find_all("dd")], strict=True)
    )
    assert pairs["run size"] == "quick (the CI-sized run)"
    assert pairs["case filter (--filter)"] == "none: every case"
    assert pairs["call timeout (--call-timeout)"] == "20 s"
    assert "{" not in options.text and "=" not in options.text  # not a Python repr
    assert tree.find("table", "matrix").find_all("th", "type")


def test_option_values_of_another_type_are_shown_as_they_are():
    items = dict(option_items({"call_timeout": "soon", "fuzz_seconds": [1], "custom": {"a": 1}}))
    assert items == {
        "call timeout (--call-timeout)": "soon",
        "fuzzing time (--fuzz-seconds)": "1",
        "custom": "a 1",
    }


def _section(restarts: int, cases: list[CaseResult]) -> ValidateSection:
    return ValidateSection(
        "sample-all", ("behaviour", "validation"), tuple(cases), 1.0, restarts, {"quick": True}
    )


def test_restarts_are_explained():
    stable = CaseResult("behaviour", "queries stable across restarts", "pass", "")
    assert "2 on purpose" in restarts_text(_section(2, [stable]))
    hung = CaseResult("validation", "ADD/TENSOR_FLOAT32: x", "hang", "no answer within 20 s")
    died = CaseResult("validation", "ADD/TENSOR_FLOAT32: y", "error", "the driver died: EOF")
    text = restarts_text(_section(4, [stable, hung, died]))
    assert text.startswith("driver restarts: 4 (2 on purpose") and "2 cases hung or ended the driver" in text
    assert restarts_text(_section(0, [stable])) == "driver restarts: 0"
    page = render_report(results_document(_section(2, [stable])).to_json())
    assert "2 on purpose" in _verdict_line(parse_html(page)).text


def test_a_benchmark_document_with_a_validate_section_keeps_one_stylesheet():
    doc = copy.deepcopy(sample_doc())
    doc["validate"] = _section(0, [CaseResult("behaviour", "timing [sync]", "pass", "")]).to_json()
    html = render_report(doc)
    assert html.count("<style>") == 1 and html.count("<header") == 1
