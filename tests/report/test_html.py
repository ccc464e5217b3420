"""The HTML report and its SVG charts, read back with the standard library's HTML parser.

Values are checked against numbers computed here from the document (medians, CIs, shares), not
against the report's own formatting code.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from click.testing import CliRunner

from mlts.bench.stats import describe
from mlts.commands import report as report_cmd
from mlts.records import RecordError, ResultsDocument
from mlts.report.html import compare_medians, render_report, write_report
from tests.report._dom import Node, parse_html
from tests.report._sample import sample_doc, slower

UINT64_MAX = 2**64 - 1
V1, V2, QUANT = "mobilenet_v1_0.25_128", "mobilenet_v2_0.35_128", "mobilenet_v1_0.25_128_quant"
CPU, DRV = "cpu:onnxruntime", "driver:sample-all"
NUMBER = re.compile(r"[-+]?\d[\d,]*\.?\d*(?:e[-+]?\d+)?")


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in NUMBER.findall(text)]


# --- helpers over the sample -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def doc():
    return sample_doc()


@pytest.fixture(scope="module")
def html(doc):
    return render_report(doc)


@pytest.fixture(scope="module")
def tree(html):
    return parse_html(html)


def record(doc, model, backend):
    return next(r for r in doc["results"] if r["model"] == model and r["backend"] == backend)


def inference_row(tree, model, backend) -> Node:
    return tree.find("tr", "result", data_model=model, data_backend=backend)


def accuracy_cells(tree, model, backend) -> dict[str, tuple[str, set[str]]]:
    """{column header: (text, classes)} of one row's accuracy cells, keyed by their second-row headers."""
    row = inference_row(tree, model, backend)
    table = next(t for t in tree.find_all("table", "inference") if row in list(t.iter("tr")))
    headers = [th.text for th in table.find_all("tr")[1].find_all("th")][2:]  # after median, p90
    cells = row.find_all("td", "acc")
    assert len(cells) == len(headers)
    return {h: (c.text, c.classes) for h, c in zip(headers, cells, strict=True)}


# --- inference tables --------------------------------------------------------------------------------


def test_every_model_and_backend_has_a_row_in_its_familys_table(doc, tree):
    tables = {t.attrs["data-family"]: t for t in tree.find_all("table", "inference")}
    assert list(tables) == ["mobilenet_v1", "mobilenet_v2", "mobilenet_v1_quant", "asr"]
    for r in doc["results"]:
        row = tables[r["family"]].find("tr", "result", data_model=r["model"], data_backend=r["backend"])
        assert row.find_all("td")[0].text == r["model"]
        if r["status"] == "ok":
            assert numbers(row.find("td", "iters").text) == [r["iterations"]]
            assert numbers(row.find("td", "size").text) == [r["dataset"]["size"]]


def test_median_ci_and_p90_are_the_documents_values(doc, tree):
    for model, backend in [(V1, CPU), (V1, DRV), (QUANT, DRV), ("asr_float", DRV)]:
        lat = record(doc, model, backend)["latency_ms"]
        row = inference_row(tree, model, backend)
        median, lo, hi = numbers(row.find("td", "median").text)
        assert median == pytest.approx(lat["median"], rel=5e-3)  # 3 significant digits shown
        assert (lo, hi) == pytest.approx(lat["median_ci95"], rel=5e-3)
        assert numbers(row.find("td", "p90").text)[0] == pytest.approx(lat["p90"], rel=5e-3)
    assert "per step" in inference_row(tree, "asr_float", DRV).find("td", "median").text


def test_difference_against_the_cpu_baseline_is_coloured_by_ci_overlap(doc, tree):
    # Samples around 3.4 ms vs 1.1 ms with a 5% spread: the CIs cannot overlap, the driver is worse.
    for model, ref_ms, drv_ms in [(V1, 1.1, 3.4), (V2, 1.6, 5.2), (QUANT, 0.9, 7.5)]:
        ref, drv = record(doc, model, CPU)["latency_ms"], record(doc, model, DRV)["latency_ms"]
        assert drv["median_ci95"][0] > ref["median_ci95"][1]
        cell = inference_row(tree, model, DRV).find("td", "diff")
        assert "worse" in cell.classes and cell.text.endswith("worse")
        d = drv["median"] - ref["median"]
        shown_ms, shown_pct = numbers(cell.text)
        assert shown_ms == pytest.approx(d, rel=5e-3)
        assert shown_pct == pytest.approx(100.0 * d / ref["median"], abs=0.5)
        assert d > drv_ms - ref_ms - 0.5
        assert "baseline" in inference_row(tree, model, CPU).find("td", "diff").classes
    assert inference_row(tree, "asr_float", DRV).find("td", "diff").text == "-"  # no CPU row for it


def test_a_faster_driver_is_better_and_an_equal_one_is_same(doc):
    faster = slower(doc, V1, CPU, 10.0)  # the CPU row 10x slower: 11 ms vs 3.4 ms
    equal = copy.deepcopy(doc)
    record(equal, V1, DRV)["latency_ms"] = copy.deepcopy(record(equal, V1, CPU)["latency_ms"])
    assert "better" in inference_row(parse_html(render_report(faster)), V1, DRV).find("td", "diff").classes
    cell = inference_row(parse_html(render_report(equal)), V1, DRV).find("td", "diff")
    assert "same" in cell.classes and numbers(cell.text) == [0.0, 0.0]


@pytest.mark.parametrize(
    "lat, base, verdict, d, pct",
    [
        (
            {"median": 2.0, "median_ci95": [1.9, 2.1]},
            {"median": 2.05, "median_ci95": [2.0, 2.2]},
            "same",
            -0.05,
            -2.439,
        ),
        (
            {"median": 1.0, "median_ci95": [0.9, 1.1]},
            {"median": 2.0, "median_ci95": [1.9, 2.1]},
            "better",
            -1.0,
            -50.0,
        ),
        (
            {"median": 3.0, "median_ci95": [2.0, 4.0]},
            {"median": 1.0, "median_ci95": [0.5, 2.0]},
            "same",
            2.0,
            200.0,
        ),
        (
            {"median": 3.0, "median_ci95": [2.1, 4.0]},
            {"median": 1.0, "median_ci95": [0.5, 2.0]},
            "worse",
            2.0,
            200.0,
        ),
        ({"median": 3.0}, {"median": 3.0}, "same", 0.0, 0.0),  # no CI: the medians alone
    ],
)
def test_compare_medians_by_hand(lat, base, verdict, d, pct):
    c = compare_medians(lat, base)
    assert c["verdict"] == verdict
    assert c["ms"] == pytest.approx(d) and c["percent"] == pytest.approx(pct, abs=1e-3)


def test_same_is_explained_in_every_tables_legend(tree):
    legends = tree.find_all("dl", "legend")
    families = [t.attrs["data-family"] for t in tree.find_all("table", "inference")]
    assert [d.attrs["data-family"] for d in legends if "data-family" in d.attrs] == families
    for legend in legends[1:]:
        terms = [dt.text for dt in legend.find_all("dt")]
        note = legend.find_all("dd")[terms.index("vs CPU baseline")].text
        assert "95% intervals" in note and "same" in note and "overlap" in note


def test_accuracy_columns_per_evaluator(tree):
    drv = accuracy_cells(tree, V1, DRV)
    assert [drv[k][0] for k in "12345"] == ["93.0", "98.0", "100.0", "100.0", "100.0"]  # 0.93 + 0.05, 0.08...
    assert drv["max |err|"][0] == "1.10e-06"
    assert drv["CTS ratio"] == ("0.41×", {"num", "acc"})
    assert drv["top-1 agr."][0] == "100.0%"
    assert accuracy_cells(tree, V1, CPU)["CTS ratio"][0] == "-"  # the reference has no vs_reference
    quant = accuracy_cells(tree, QUANT, DRV)
    assert (
        quant["CTS ratio"][0] == "1.67×" and "fail" not in quant["CTS ratio"][1]
    )  # a figure, not the verdict
    assert quant["max dev"][0] == "5 u"
    assert accuracy_cells(tree, QUANT, CPU)["vs float"][0] == "82.0%"
    lstm = accuracy_cells(tree, "asr_float", DRV)
    assert set(lstm) == {"max |err|", "PER"}  # max over its named outputs, and PhoneErrorRate
    assert lstm["max |err|"][0] == "2.00e-06" and lstm["PER"] == ("0%", {"num", "acc", "pass"})


def test_error_row_shows_its_error(tree):
    row = inference_row(tree, V2, "driver:sample-minimal")
    assert "does not support operation 3 (DEPTHWISE_CONV_2D)" in row.find("td", "error").text


# --- lists, charts, tables ------------------------------------------------------------------------------


def test_validation_errors_are_listed_and_the_row_marked(tree):
    items = tree.find("section", id="validation").find_all("li", "validation-error")
    assert [i.text for i in items] == [
        "top-1 accuracy 0.700 is more than 0.05 below the reference's 0.810 (MLTS validation rule)"
    ]
    assert "invalid" in inference_row(tree, QUANT, DRV).classes
    assert "invalid" not in inference_row(tree, V1, DRV).classes


def test_latency_warnings_are_listed(doc):
    warned = copy.deepcopy(doc)
    record(warned, V1, DRV)["latency_ms"]["warnings"] = [
        "outliers: max is 2.0x the median; close other programs"
    ]
    section = parse_html(render_report(warned)).find("section", id="warnings")
    assert [li.text for li in section.find_all("li", "latency-warning")] == [
        "outliers: max is 2.0x the median; close other programs"
    ]
    assert not parse_html(render_report(doc)).find_all("section", id="warnings")  # none in the sample


def test_one_histogram_and_one_cdf_per_model_with_a_series_per_backend(tree):
    charts = tree.find("section", id="charts")
    assert len(list(charts.iter("svg"))) == len(list(tree.iter("svg"))) - 1 == 8  # and the overview's
    backends = {V1: [CPU, DRV], V2: [CPU, DRV], QUANT: [CPU, DRV], "asr_float": [DRV]}
    for model, expected in backends.items():
        box = charts.find("div", "charts", data_model=model)
        hist, cdf = box.find("svg", "chart-histogram"), box.find("svg", "chart-cdf")
        for svg in (hist, cdf):
            assert (
                svg.attrs["role"] == "img"
                and svg.children[0].tag == "title"
                and model in svg.children[0].text
            )
            assert [g.text.split(" (")[0] for g in svg.find_all("g", "legend-entry")] == expected
        assert len(cdf.find_all("path", "series")) == len(expected)
    assert len(charts.find("div", "charts", data_model="asr_float").find_all("rect", "bar")) > 10


def test_compilation_table_values(doc, tree):
    table = tree.find("table", "compilation")
    comp = record(doc, V1, DRV)["compilation"]
    cells = [td.text for td in table.find("tr", data_model=V1, data_backend=DRV).find_all("td")]
    for text, key in zip(cells[2:5], ["without_cache", "save_to_cache", "prepare_from_cache"], strict=True):
        median, lo, hi = numbers(text)
        assert median == pytest.approx(comp[key]["median"], rel=5e-3)
        assert [lo, hi] == pytest.approx(comp[key]["median_ci95"], rel=5e-3)
    assert cells[5] == "4,312,064 B (4.11 MiB)"  # 4312064 / 2**20 = 4.1123
    lstm = [td.text for td in table.find("tr", data_model="asr_float", data_backend=DRV).find_all("td")]
    assert lstm[2:5] == ["not measured"] * 3 and lstm[6]  # with a note saying why
    assert not table.find_all("tr", data_backend=CPU)


def test_driver_timing_and_memory(doc, tree):
    timing = tree.find("table", "driver-timing")
    cells = [td.text for td in timing.find("tr", data_model=V1, data_backend=DRV).find_all("td")]
    dev = record(doc, V1, DRV)["driver_timing_us"]["time_on_device"]
    assert numbers(cells[2])[0] == pytest.approx(dev["median"], rel=5e-3) and cells[3] == "not measured"
    quant = [td.text for td in timing.find("tr", data_model=QUANT, data_backend=DRV).find_all("td")]
    lstm = [td.text for td in timing.find("tr", data_model="asr_float", data_backend=DRV).find_all("td")]
    assert quant[2:] == lstm[2:] == ["not measured"] * 2
    memory = tree.find("table", "memory")
    assert [td.text for td in memory.find("tr", data_model=V1, data_backend=DRV).find_all("td")][2:] == [
        "310.5",
        "201.2",
    ]
    assert [td.text for td in memory.find("tr", data_model=V1, data_backend=CPU).find_all("td")][2:] == [
        "310.5",
        "-",
    ]


def test_uint64_max_style_fields_say_not_measured_never_a_huge_number(doc):
    d = copy.deepcopy(doc)
    drv = record(d, V1, DRV)
    # Statistics of samples at the HAL's "no measurement" value: valid records, shown as not measured.
    sentinel_stats = describe([UINT64_MAX / 1000.0], p99_wanted=False)
    drv["driver_timing_us"] = {"time_on_device": "not measured", "time_in_driver": sentinel_stats}
    drv["compilation"]["prepare_from_cache"] = None
    drv["compilation"]["save_to_cache"] = sentinel_stats
    drv["memory_mb"]["driver_peak_rss"] = UINT64_MAX
    html = render_report(d)
    tree = parse_html(html)
    timing = [
        td.text
        for td in tree.find("table", "driver-timing")
        .find("tr", data_model=V1, data_backend=DRV)
        .find_all("td")
    ]
    comp = [
        td.text
        for td in tree.find("table", "compilation").find("tr", data_model=V1, data_backend=DRV).find_all("td")
    ]
    assert timing[2:] == ["not measured", "not measured"]
    assert comp[3:5] == ["not measured", "not measured"] and numbers(comp[2])
    for huge in ("18446744073709551615", "18,446,744", "1.845e+19", "1.8447e+19", "e+19", "e+16"):
        assert huge not in html


def test_header_shows_environment_config_and_devices(doc, tree):
    setup = tree.find("section", id="setup")
    text = setup.text
    for value in (
        "Example CPU @ 2.0GHz",
        "Linux 6.1",
        "1.31.1",
        "0.3 s",
        "sample-all, sample-minimal",
        "mlts-sample-1.3.0",
    ):
        assert value in text
    assert doc["environment"]["time_utc"] in tree.find("header").text


def test_self_contained_no_url_script_link_or_font(html):
    for bad in (
        "http://",
        "https://",
        "<script",
        "<link",
        "@import",
        "@font-face",
        "url(",
        "<iframe",
        "<img",
    ):
        assert bad not in html
    assert "@media print" in html


def test_text_is_escaped(doc):
    d = copy.deepcopy(doc)
    evil = "<script>alert(1)</script>"
    for r in d["results"]:
        if r["model"] == V1:
            r["model"] = evil
    record(d, V2, "driver:sample-minimal")["error"] = "<img src=x onerror=alert(2)>"
    record(d, QUANT, DRV)["validation_errors"] = ["<b>bold</b> & co"]
    html = render_report(d)
    tree = parse_html(html)
    assert not tree.find_all("script") and not tree.find_all("img")
    assert inference_row(tree, evil, DRV).find_all("td")[0].text == evil
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html and "<img" not in html and "<b>bold" not in html
    assert tree.find("section", id="validation").find("li", "validation-error").text == "<b>bold</b> & co"
    svg_title = tree.find("div", "charts", data_model=evil).find("svg", "chart-cdf").children[0]
    assert evil in svg_title.text


def test_a_document_of_only_error_rows_renders():
    d = {
        "schema_version": 2,
        "kind": "benchmark",
        "environment": {},
        "config": {},
        "results": [
            {
                "model": "m",
                "family": "f",
                "backend": DRV,
                "status": "error",
                "error": "DEAD_OBJECT: driver died",
            },
            {"model": "m", "family": "f", "backend": CPU, "status": "error", "error": "onnxruntime failed"},
        ],
    }
    tree = parse_html(render_report(d))
    assert inference_row(tree, "m", DRV).find("td", "error").text == "error: DEAD_OBJECT: driver died"
    assert not list(tree.iter("svg")) and not tree.find_all("section", id="charts")


def _bare(model: str, backend: str, latency: dict) -> dict:
    """A valid ok row with every optional field absent, the nullable ones null and the others empty."""
    return {
        "model": model,
        "family": "f",
        "backend": backend,
        "status": "ok",
        "warmup": {"iterations": 0, "seconds": 0.0},
        "run": {"iterations": latency["n"], "seconds": 0.1},
        "latency_ms": latency,
        "accuracy": {},
        "validation_errors": [],
        "compilation": None,
        "driver_timing_us": None,
        "memory_mb": {"client_peak_rss": None, "driver_peak_rss": None},
    }


def test_rows_missing_optional_fields_render(doc):
    hist_only = dict(record(doc, V1, DRV)["latency_ms"])
    hist_only.pop("samples")
    one = describe([0.002], p99_wanted=False)
    d = {
        "schema_version": 3,
        "kind": "benchmark",
        "environment": {},
        "config": {},
        "results": [_bare("bare", CPU, one), _bare("h", DRV, hist_only), _bare("one", DRV, one)],
    }
    tree = parse_html(render_report(d))
    cells = [td.text for td in inference_row(tree, "bare", CPU).find_all("td")]
    # No iterations or dataset; one sample is too few for a 95% interval (the * note); no accuracy columns.
    assert cells[2:] == ["-", "-", "2.00 [2.00 – 2.00] *", "2.00", "baseline"]
    assert len(list(tree.iter("svg"))) == 6  # a histogram and a CDF per model
    counts = record(doc, V1, DRV)["latency_ms"]["histogram"]["counts"]
    bars = tree.find("div", "charts", data_model="h").find("svg", "chart-histogram").find_all("rect", "bar")
    assert len(bars) == sum(c > 0 for c in counts)


def test_an_invalid_row_is_refused_with_its_field_path(doc):
    d = copy.deepcopy(doc)
    record(d, V2, DRV)["latency_ms"]["median"] = "fast"
    index = d["results"].index(record(d, V2, DRV))
    with pytest.raises(RecordError) as e:
        render_report(d)
    assert str(e.value) == f"results[{index}].latency_ms.median: expected a number, got 'fast'"
    bad = copy.deepcopy(doc)
    del record(bad, V1, CPU)["warmup"]
    with pytest.raises(RecordError, match=r"^results\[0\]\.warmup: missing \(ok rows need it\)$"):
        render_report(bad)


def test_the_report_command_names_an_invalid_row_in_one_line(tmp_path, doc):
    d = copy.deepcopy(doc)
    record(d, V1, DRV)["accuracy"]["topk"]["top1"] = 1.5
    path = tmp_path / "results.json"
    path.write_text(json.dumps(d))
    r = CliRunner().invoke(report_cmd.report, [str(path)])
    assert r.exit_code != 0 and not (tmp_path / "report.html").exists()
    message = r.output.strip().splitlines()
    assert (
        len(message) == 1
        and "results[1].accuracy.topk.top1: expected a fraction in [0, 1], got 1.5" in message[0]
    )


def test_a_records_document_renders_like_its_json(doc, html):
    assert render_report(ResultsDocument.from_json(doc)) == html


# --- stress and capabilities ------------------------------------------------------------------------


def test_stress_section():
    d = {
        "schema_version": 2,
        "kind": "stress",
        "environment": {"cpu": "x"},
        "config": {},
        "results": [
            {"mode": "inference-stress", "driver": "sample-all", "models": ["a", "b"], "outcome": "SUCCESS",
             "expected": "SUCCESS", "reason": None, "duration_s": 2.0, "iterations": 120, "signal": None,
             "log_tail": ["step 119 ok", "step 120 ok"]},
            {"mode": "client-early-termination-stress", "driver": "sample-all", "models": ["a"],
             "outcome": "CRASH", "expected": "CRASH", "reason": "client killed", "duration_s": 0.7,
             "iterations": 0, "signal": 9, "log_tail": []},
            {"mode": "parallel-inference-stress", "driver": "sample-all", "models": ["a"], "outcome": "HANG",
             "expected": "SUCCESS", "reason": "no result within 3 s", "duration_s": 3.0, "iterations": 17,
             "signal": None, "log_tail": ["<tail>"]},
        ],
    }  # fmt: skip
    tree = parse_html(render_report(d))
    rows = tree.find("table", "stress").find_all("tr", None)[1:]
    outcomes = [(r.find("td", "outcome").text, r.find("td", "outcome").classes) for r in rows]
    assert [(t, "expected" in c) for t, c in outcomes] == [
        ("SUCCESS", True),
        ("CRASH", True),
        ("HANG", False),
    ]
    first = [td.text for td in rows[0].find_all("td")]
    assert first[:4] == ["inference-stress", "-", "sample-all", "a, b"] and first[7:10] == [
        "2.0 s",
        "120",
        "-",
    ]
    assert rows[0].find("pre", "log").text == "step 119 ok step 120 ok"
    assert rows[0].find("details") and rows[2].find("pre", "log").text == "<tail>"
    assert not tree.find_all("table", "inference") and "mlts stress report" in tree.find("h1").text


def test_capabilities_section_renders_nested_numbers_as_tables(doc):
    d = copy.deepcopy(doc)
    d["capabilities"] = {
        "sample-float-fast": {
            "source": "calibrated",
            "relaxed": {
                "scalar": {"exec_time": 0.7, "power_usage": 1.1},
                "tensor": {"exec_time": 0.65, "power_usage": 1.0},
            },
            "operand_performance": [
                {"type": "FLOAT32", "exec_time": 0.8, "power_usage": 1.2},
                {"type": "TENSOR_FLOAT32", "exec_time": 0.75, "power_usage": 1.2},
            ],
            "if": {"exec_time": 1.0, "power_usage": 1.0},
        }
    }
    section = parse_html(render_report(d)).find("section", id="capabilities")
    tables = {t.attrs.get("data-title", ""): t for t in section.find_all("table", "capabilities")}
    scalars = {tr.find("th").text: tr.find("td").text for tr in tables[""].find_all("tr")}
    assert scalars == {"source": "calibrated", "if / exec_time": "1", "if / power_usage": "1"}
    ops = [[td.text for td in tr.find_all("td")] for tr in tables["operand_performance"].find_all("tr")[1:]]
    assert ops == [["FLOAT32", "0.8", "1.2"], ["TENSOR_FLOAT32", "0.75", "1.2"]]
    relaxed = [[td.text for td in tr.find_all("td")] for tr in tables["relaxed"].find_all("tr")[1:]]
    assert relaxed == [["scalar", "0.7", "1.1"], ["tensor", "0.65", "1"]]
    assert not parse_html(render_report(doc)).find_all("section", id="capabilities")


@pytest.fixture()
def results_file(tmp_path, doc):
    path = tmp_path / "run" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_command_writes_report_next_to_results(results_file):
    r = CliRunner().invoke(report_cmd.report, [str(results_file)])
    assert r.exit_code == 0, r.output
    out = results_file.parent / "report.html"
    assert f"report: {out}" in r.output
    assert parse_html(out.read_text(encoding="utf-8")).find_all("table", "inference")


def test_command_output_option_and_write_report(results_file, tmp_path, doc):
    target = tmp_path / "elsewhere" / "page.html"
    r = CliRunner().invoke(report_cmd.report, [str(results_file), "-o", str(target)])
    assert r.exit_code == 0, r.output
    direct = tmp_path / "direct.html"
    write_report(doc, direct)
    assert target.read_text(encoding="utf-8") == direct.read_text(encoding="utf-8")


def test_command_errors_are_one_line(tmp_path):
    missing = CliRunner().invoke(report_cmd.report, [str(tmp_path / "nope.json")])
    old = tmp_path / "old.json"
    old.write_text('{"schema_version": 1, "results": []}', encoding="utf-8")
    wrong = CliRunner().invoke(report_cmd.report, [str(old)])
    for r in (missing, wrong):
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1
    assert "nope.json" in missing.output and "schema version 1" in wrong.output


def test_open_only_with_a_display(results_file, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    monkeypatch.setattr(report_cmd.sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    r = CliRunner().invoke(report_cmd.report, [str(results_file), "--open"])
    assert r.exit_code == 0 and "cannot open a browser" in r.output and not opened
    monkeypatch.setenv("DISPLAY", ":0")
    r = CliRunner().invoke(report_cmd.report, [str(results_file), "--open"])
    assert r.exit_code == 0 and opened == [(results_file.parent / "report.html").resolve().as_uri()]
