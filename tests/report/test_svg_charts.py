"""The report's SVG charts (histogram and CDF), checked by hand: bar heights, steps, axes, series styles."""

from __future__ import annotations

import math
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


# --- busy machines: a few very slow calls ----------------------------------------------------------------


def _x_title(svg: Node) -> str:
    return svg.find_all("text", "axis-title")[0].text


def _bars_by_share(svg: Node) -> list[float]:
    area = svg.find("rect", "plot-area")
    top = _axis(svg, "y-tick")[-1]
    return [float(b.attrs["height"]) / float(area.attrs["height"]) * top for b in svg.find_all("rect", "bar")]


def test_a_few_spikes_are_cut_at_p99_and_counted_not_drawn():
    # 300 calls at 1.000-1.299 ms and 2 at 250 ms: p99 is the nearest rank ceil(0.99 * 302) = 299, 1.298 ms,
    # so 3 samples lie beyond the axis: 1.299, 250 and 260 ms.
    samples = [1.0 + 0.001 * i for i in range(300)] + [250.0, 260.0]
    svg = _svg(histogram_svg({"drv": {"samples": samples}}))
    ticks = _axis(svg, "x-tick")
    assert ticks[-1] < 2.0 and _x_title(svg) == "latency (ms)"
    note = svg.find("text", "clip-note").text
    assert note == "The axis ends at p99, 1.3 ms: 3 slower samples lie beyond it."
    assert svg.find("g", "legend-entry").text == "drv (n=302, 3 beyond the axis)"
    shares = _bars_by_share(svg)
    assert max(shares) < 10 and sum(shares) == pytest.approx(
        100 * 299 / 302, abs=0.5
    )  # spread, not one spike
    cdf = _svg(cdf_svg({"drv": {"samples": samples}}))
    area = cdf.find("rect", "plot-area")
    bottom, height = float(area.attrs["y"]) + float(area.attrs["height"]), float(area.attrs["height"])
    last_share = (bottom - _path_points(cdf.find("path", "series"))[-1][1]) / height
    assert last_share == pytest.approx(299 / 302, abs=1e-3)  # the curve ends below 100%: 3 samples beyond
    assert "3 slower samples" in cdf.find("text", "clip-note").text


def test_a_range_still_wide_after_the_cut_is_drawn_on_a_log_axis():
    # Two backends 30x apart, plus 5% of spikes: p99 lies in the spikes, so the axis is logarithmic.
    fast = [0.1 + 0.001 * (i % 10) for i in range(200)]
    slow = [3.0 + 0.01 * (i % 10) for i in range(190)] + [90.0 + i for i in range(10)]
    for make in (histogram_svg, cdf_svg):
        svg = _svg(make({"ort": {"samples": fast}, "drv": {"samples": slow}}))
        assert _x_title(svg) == "latency (ms, log scale)"
        ticks = _axis(svg, "x-tick")
        assert ticks[0] <= 0.1 and ticks[-1] >= 99.0
        mantissas = {round(t / 10 ** math.floor(math.log10(t) + 1e-9), 6) for t in ticks}
        assert mantissas <= {1.0, 2.0, 5.0}
        # Equal steps in log10: 1 and 10 are as far apart as 0.1 and 1.
        one, ten, tenth = (_log_x_px(svg, v) for v in (1.0, 10.0, 0.1))
        assert ten - one == pytest.approx(one - tenth, abs=0.05)
    # drv's p99 is its rank-198 sample, 97 ms: 98 and 99 ms lie beyond the axis; ort has none beyond.
    hist = _svg(histogram_svg({"ort": {"samples": fast}, "drv": {"samples": slow}}))
    note = hist.find("text", "clip-note").text
    assert note == "The axis ends at the largest p99 of the series, 97 ms: 2 slower samples lie beyond it."
    legend = [g.text for g in hist.find_all("g", "legend-entry")]
    assert legend == ["ort (n=200)", "drv (n=200, 2 beyond the axis)"]


def _log_x_px(svg: Node, value: float) -> float:
    area = svg.find("rect", "plot-area")
    ticks = _axis(svg, "x-tick")
    left, width = float(area.attrs["x"]), float(area.attrs["width"])
    lo, hi = math.log10(ticks[0]), math.log10(ticks[-1])
    return left + (math.log10(value) - lo) / (hi - lo) * width


def test_quiet_samples_are_drawn_whole_without_a_note():
    svg = _svg(histogram_svg({"drv": {"samples": [1.0, 1.1, 1.2, 1.5, 2.0]}}))
    assert not svg.find_all("text", "clip-note") and svg.find("g", "legend-entry").text == "drv (n=5)"
