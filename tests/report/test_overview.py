"""The report's first screen: driver ÷ reference latency with its interval, the accuracy verdict, failures
and retries; compact latency warnings; numbers formatted as what they are."""

from __future__ import annotations

import copy

import pytest

from mlts.records import BenchmarkRow, ResultsDocument
from mlts.report._html_overview import overview, ratio_interval
from mlts.report.html import render_report
from tests.report._dom import parse_html
from tests.report._sample import sample_doc

V1, CPU, DRV = "mobilenet_v1_0.25_128", "cpu:onnxruntime", "driver:sample-all"


def _row(doc, model, backend):
    return next(r for r in doc["results"] if r["model"] == model and r["backend"] == backend)


def test_ratio_and_its_interval_by_hand():
    doc = sample_doc()
    ref, drv = (BenchmarkRow.from_json(_row(doc, V1, b)) for b in (CPU, DRV))
    got = ratio_interval(drv, ref)
    (d_lo, d_hi), (r_lo, r_hi) = drv.latency_ms.median_ci95, ref.latency_ms.median_ci95
    assert got["ratio"] == pytest.approx(drv.latency_ms.median / ref.latency_ms.median)
    assert got["lo"] == pytest.approx(d_lo / r_hi) and got["hi"] == pytest.approx(d_hi / r_lo)
    assert got["verdict"] == ("slower" if d_lo / r_hi > 1 else "same")


def _with_verdict(doc, passed: bool):
    row = _row(doc, V1, DRV)
    row["verdict"] = {
        "pass": passed,
        "profile": "whole network float",
        "rule": "max|driver - golden| <= 4 x ...",
        "checks": [{"metric": "max_abs_error_vs_golden", "value": 1e-3, "limit": 2e-5, "pass": passed}],
    }
    row["retries"] = {
        "retries": 2,
        "errors": {"RESOURCE_EXHAUSTED_TRANSIENT": 2},
        "error_classes": {"transient": 2},
    }
    return doc


def test_overview_lines_show_verdict_failures_and_retries():
    doc = _with_verdict(sample_doc(), passed=False)
    view = overview(ResultsDocument.from_json(doc).rows)
    line = next(ln for ln in view["lines"] if ln["model"] == V1 and ln["backend"] == DRV)
    assert line["verdict"] == "fail" and "max_abs_error_vs_golden" in line["verdict_detail"]
    assert line["retries"] == "2 retried (2 transient)"
    assert ("accuracy verdicts passed", "0 of 1") in view["headline"]
    assert ("transient errors retried", "2") in view["headline"]
    failing = next(ln for ln in view["lines"] if ln["backend"] == "driver:sample-minimal")
    assert failing["verdict"] == "error" and failing["problems"] and failing["ratio"] is None
    # The reference rows are not lines of their own: they are what the ratio divides by.
    assert all(not ln["backend"].startswith("cpu:") for ln in view["lines"])


def test_overview_comes_first_with_its_chart_and_setup_moves_below():
    html = render_report(_with_verdict(sample_doc(), passed=True))
    tree = parse_html(html)
    sections = [s.attrs.get("id") for s in tree.find_all("section")]
    # The sample has a failed run: the failures banner comes first, then the overview.
    assert sections[:2] == ["verdict", "overview"] and sections.index("setup") > sections.index("memory")
    box = tree.find("section", id="overview")
    assert box.find("svg", "ratio").find_all("circle")
    row = box.find("tr", data_model=V1, data_backend=DRV)
    assert row.find("td", "verdict-cell").text.strip() == "pass"
    assert "2 retried" in row.find("td", "retries").text


def test_latency_warnings_are_one_expandable_line_per_row():
    doc = sample_doc()
    _row(doc, V1, DRV)["latency_ms"]["warnings"] = [
        "latency varies: std is 26% of the mean; close other programs",
        "p99 needs >= 100 samples for its own rank; have 40: time more iterations",
    ]
    tree = parse_html(render_report(doc))
    items = tree.find("section", id="warnings").find_all("details")
    assert len(items) == 1
    assert "latency varies, p99 needs >= 100 samples for its own rank" in items[0].find("summary").text
    for details in items:
        summary = details.find("summary")
        assert [b.text for b in summary.find_all("b")] == [V1, DRV] and "\n" not in summary.text.strip()
        assert details.find_all("li", "latency-warning")


def test_pid_is_not_grouped_and_the_image_count_is_shown():
    doc = copy.deepcopy(sample_doc())
    doc["devices"] = {"sample-all": {"version": "v", "pid": 22050}}
    doc["config"]["images"] = None
    html = render_report(doc)
    assert "22050" in html and "22,050" not in html
    tree = parse_html(html)
    setup = tree.find("section", id="setup")
    dts = [dt.text for dt in setup.find_all("dt")]
    dds = [dd.text for dd in setup.find_all("dd")]
    images = dds[dts.index("images")]
    assert "(default)" in images and any(ch.isdigit() for ch in images)


def test_the_family_table_shows_the_verdict_and_leaves_cts_unmarked():
    tree = parse_html(render_report(_with_verdict(sample_doc(), passed=False)))
    row = tree.find("tr", "result", data_model=V1, data_backend=DRV)
    cells = [td for td in row.find_all("td") if "acc" in td.attrs.get("class", "")]
    assert any(td.text.strip() == "fail" and "fail" in td.attrs["class"] for td in cells)
