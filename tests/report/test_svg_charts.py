"""The report's SVG charts (histogram and CDF), checked by hand: bar heights, steps, axes, series styles."""

from __future__ import annotations

import re

import pytest

from mlts.report.svg import cdf_svg, histogram_svg
from tests.report._dom import Node, parse_html


def _svg(text: str) -> Node:
    return parse_html(text).find("svg")


def _axis(svg: Node, cls: str) -> list[float]:
    return [float(t.text) for t in svg.find_all("text", cls)]


def _x_px(svg: Node, value: float) -> float:
    """Pixel x of a latency: the first and last x ticks sit at the plot area's left and right edges."""
    area = svg.find("rect", "plot-area")
    ticks = _axis(svg, "x-tick")
    left, width = float(area.attrs["x"]), float(area.attrs["width"])
    return left + (value - ticks[0]) / (ticks[-1] - ticks[0]) * width


def _path_points(path: Node) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"([-\d.]+),([-\d.]+)", path.attrs["d"])]


def test_histogram_bars_by_hand():
    # 32 buckets over [1, 3] ms (width 1/16): 1, 1 -> bucket 0 (50%), 2 -> bucket 16 (25%), 3 -> bucket 31 (25%).
    svg = _svg(histogram_svg({"drv": {"samples": [1.0, 1.0, 2.0, 3.0]}}))
    area = svg.find("rect", "plot-area")
    top_share = _axis(svg, "y-tick")[-1]
    assert top_share == 50.0
    bars = svg.find_all("rect", "bar")
    heights = [float(b.attrs["height"]) for b in bars]
    assert heights == pytest.approx(
        [float(area.attrs["height"]) * s / top_share for s in (50, 25, 25)], abs=0.02
    )
    lefts = [float(b.attrs["x"]) for b in bars]
    assert lefts == pytest.approx([_x_px(svg, v) for v in (1.0, 2.0, 3.0 - 2.0 / 32)], abs=0.02)
    assert svg.attrs["role"] == "img" and svg.children[0].tag == "title"


def test_histogram_from_a_stored_histogram_only():
    hist = {"edges": [0.0, 1.0, 2.0, 3.0, 4.0], "counts": [1, 0, 3, 0]}
    svg = _svg(histogram_svg({"drv": {"histogram": hist}}))
    bars = svg.find_all("rect", "bar")
    assert len(bars) == 2
    assert float(bars[1].attrs["height"]) == pytest.approx(3 * float(bars[0].attrs["height"]), abs=0.02)
    assert "from its histogram" in svg.find("g", "legend-entry").text


def test_cdf_steps_by_hand():
    # F = 1/4 at 1 ms, 3/4 at 2 ms (two samples), 1 at 4 ms.
    svg = _svg(cdf_svg({"drv": {"samples": [4.0, 2.0, 1.0, 2.0]}}))
    area = svg.find("rect", "plot-area")
    bottom, height = float(area.attrs["y"]) + float(area.attrs["height"]), float(area.attrs["height"])
    points = _path_points(svg.find("path", "series"))
    shares = [round((bottom - y) / height, 4) for _, y in points]
    assert shares == [0, 0, 0.25, 0.25, 0.75, 0.75, 1, 1]
    step_x = [x for (x, _), s in zip(points[1:-1:2], shares[1:-1:2], strict=True)]
    assert step_x == pytest.approx([_x_px(svg, v) for v in (1.0, 2.0, 4.0)], abs=0.02)


def test_several_series_differ_in_colour_and_dash():
    series = {f"b{i}": {"samples": [1.0 + i, 2.0 + i, 2.5 + i]} for i in range(4)}
    for svg in (_svg(histogram_svg(series)), _svg(cdf_svg(series))):
        paths = svg.find_all("path", "series")
        assert len(paths) == 4
        assert len({p.attrs["stroke"] for p in paths}) == 4
        assert len({p.attrs.get("stroke-dasharray", "solid") for p in paths}) == 4
        legend = [
            (g.find("line").attrs["stroke"], g.find("line").attrs.get("stroke-dasharray", "solid"))
            for g in svg.find_all("g", "legend-entry")
        ]
        assert legend == [(p.attrs["stroke"], p.attrs.get("stroke-dasharray", "solid")) for p in paths]


def test_one_sample_zero_range_and_missing_samples():
    for make in (histogram_svg, cdf_svg):
        text = make({"one": {"samples": [2.0]}, "none": None, "empty": {"samples": []}})
        svg = _svg(text)
        assert "nan" not in text.lower() and "inf" not in text.lower()
        ticks = _axis(svg, "x-tick")
        assert ticks[0] < 2.0 < ticks[-1]  # the axis is widened around the single value
        legend = [g.text for g in svg.find_all("g", "legend-entry")]
        assert legend == ["one (n=1)", "none (no samples)", "empty (no samples)"]
    empty = _svg(cdf_svg({"x": {}}))
    assert empty.find("text", "empty").text == "no latency samples" and not empty.find_all("path")


def test_svg_text_is_escaped():
    text = histogram_svg({"<b>&x": {"samples": [1.0, 2.0]}}, title="<script>t</script>")
    assert "&lt;b&gt;&amp;x" in text and "&lt;script&gt;" in text and "<b>" not in text
    assert _svg(text).children[0].text == "<script>t</script>"


# --- the command --------------------------------------------------------------------------------------
