"""The table `mlts benchmark` prints: columns that stay aligned, small medians readable, a legend."""

from __future__ import annotations

import copy

import pytest

from mlts.bench.stats import describe
from mlts.report.results import format_table, ms_text
from tests.report._sample import sample_doc


@pytest.mark.parametrize(
    "ms, text",
    [(250.04, "250.0"), (3.456, "3.46"), (0.9, "0.90"), (0.1, "0.10"), (0.0213, "0.0213"), (0.00456, "0.00456"),
     (0.00002, "2.00e-05"), (0.0, "0.00")],
)  # fmt: skip
def test_milliseconds_keep_three_significant_digits_below_a_tenth(ms, text):
    assert ms_text(ms) == text


def test_long_backend_names_and_small_medians_keep_the_columns_aligned():
    doc = copy.deepcopy(sample_doc())
    rows = [r for r in doc["results"] if r["model"] == "mobilenet_v1_0.25_128"]
    long = copy.deepcopy(rows[1])
    long["backend"] = "driver:my-vendor-npu-with-a-long-plugin-name"
    long["latency_ms"] = describe([0.0000213, 0.0000215, 0.0000219, 0.0000220, 0.0000231, 0.0000240])
    lines = format_table([*rows, long])
    header, body = lines[0], lines[2:5]
    # Every line puts "iters" and the median in the same columns as the header.
    at = header.index("iters")
    assert all(line[at : at + 5].strip().isdigit() for line in body)
    assert "0.0219 [0.0213, 0.0240]" in body[2] or "0.0220 [0.0213, 0.0240]" in body[2]
    end = header.index("median ms [95% CI]") + len("median ms [95% CI]")
    assert all(line[end - 1] == "]" for line in body)


def test_a_legend_follows_the_image_table():
    lines = format_table(sample_doc()["results"])
    legend = lines[lines.index("") + 1 :]
    assert legend[0].startswith("top1/top5: ") and any(t.startswith("CTS err: ") for t in legend)
