"""`mlts benchmark --profile` end to end on the smallest zoo model: results.json and the report."""

from __future__ import annotations

import json

from click.testing import CliRunner

from mlts.bench.stats import describe
from mlts.cli import main
from mlts.report.html import render_report


def test_profile_flag_end_to_end(tmp_path):
    out = tmp_path / "out"
    args = ["benchmark", "--models", "^mobilenet_v1_0.25_128$", "--drivers", "^sample-all$", "--quick"]
    args += ["--profile", "--no-compilation", "--images", "4", "--duration", "0.2", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rows = {row["backend"]: row for row in json.loads((out / "results.json").read_text())["results"]}
    ref, drv = rows["cpu:onnxruntime"]["profile"], rows["driver:sample-all"]["profile"]
    for prof in (ref, drv):
        assert prof["available"] and prof["executions"] >= 5
        assert prof["top"] and prof["by_type"] and prof["overhead"]["ratio"] > 0
        assert abs(sum(t["share"] for t in prof["by_type"]) - 1.0) < 1e-9
    assert drv["operations"] == 32  # every operation of the converted model, each once
    assert drv["by_type"][0]["type"] in ("CONV_2D", "DEPTHWISE_CONV_2D")
    assert drv["total_us"] <= drv["time_on_device_us"] + 32  # per-op µs medians vs the µs Timing
    assert ref["by_type"][0]["type"] == "Conv"
    layers = drv["layers"]
    assert len(layers["pairs"]) >= 27  # every conv layer of the 28 matched across onnxruntime's fusions
    assert layers["coverage"]["reference"] > 0.9
    assert all(p["ratio"] > 0 for p in layers["pairs"])
    html = (out / "report.html").read_text()
    assert 'id="profiles"' in html and drv["top"][0]["name"] in html and ref["top"][0]["name"] in html
    if layers["slowest"]:
        assert "slowest kernel" in html


def test_report_has_no_profile_section_without_profiles():
    # The report reads records: the smallest valid document, one ok row.
    row = {
        "model": "m",
        "backend": "cpu:onnxruntime",
        "status": "ok",
        "warmup": {"iterations": 1, "seconds": 0.01},
        "run": {"iterations": 1, "seconds": 0.01},
        "latency_ms": describe([0.001], p99_wanted=False),
        "accuracy": {},
        "validation_errors": [],
        "compilation": None,
        "driver_timing_us": None,
        "memory_mb": {"client_peak_rss": None, "driver_peak_rss": None},
    }
    doc = {"schema_version": 2, "kind": "benchmark", "environment": {}, "config": {}, "results": [row]}
    assert 'id="profiles"' not in render_report(doc)
    doc["results"][0]["profile"] = {"available": False, "reason": "the driver returns no per-operation times"}
    assert "No per-operation times: the driver returns no per-operation times" in render_report(doc)
