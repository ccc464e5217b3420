"""Latency charts as inline SVG strings: a histogram and an empirical CDF with one series per backend.

A series is a backend's latency statistics (results.json `latency_ms`): its raw `samples` (ms) when
present, else its 32-bucket `histogram` {edges, counts}, whose counts are placed at the bucket
centres. Several series share one x axis. Series differ in colour and in dash pattern, so the charts
still read when printed in grey. Every piece of text is escaped; no script is needed to view them.

The x axis is chosen so that a busy machine's few very slow calls do not squeeze every series into
the first bucket: it ends at the largest of the series' 99th percentiles (nearest rank), and the
samples beyond it are counted, not drawn (the plot and the legend say how many). When the range left
still spans more than LOG_AXIS_RATIO times its low end, the axis is logarithmic (and says so).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape

import numpy as np

# Colour-blind-safe colours (Okabe & Ito) paired with dash patterns that tell the series apart in grey.
PALETTE: tuple[tuple[str, str], ...] = (
    ("#0072B2", ""),
    ("#D55E00", "7 3"),
    ("#009E73", "2 2"),
    ("#CC79A7", "9 3 2 3"),
    ("#E69F00", "4 4"),
    ("#56B4E9", "1 3"),
    ("#000000", "12 3 3 3"),
)
WIDTH = 640
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP = 64, 20, 14
PLOT_HEIGHT = 200
AXIS_BELOW = 46  # x tick labels and the x axis title
LEGEND_ROW = 18
BUCKETS = 32
CDF_MAX_STEPS = 1000  # a CDF of more samples is drawn through 1000 evenly spaced ranks
CLIP_PERCENTILE = 99.0  # the x axis ends at the largest of the series' 99th percentiles
LOG_AXIS_RATIO = 10.0  # a range whose high end is more than 10x its low end is drawn on a log axis
# Integers this large are a "no measurement" sentinel (the HAL's UINT64_MAX), never a latency.
SENTINEL_MIN = 2**63

Series = Mapping[str, Mapping | None]


@dataclass(frozen=True)
class _Points:
    """One series as weighted latencies (ms): samples with weight 1, or bucket centres with counts."""

    label: str
    values: np.ndarray
    weights: np.ndarray
    stored: tuple[np.ndarray, np.ndarray] | None = None  # the stored (edges, counts) it came from

    @property
    def from_histogram(self) -> bool:
        return self.stored is not None

    @property
    def empty(self) -> bool:
        return self.values.size == 0


@dataclass(frozen=True)
class _Axis:
    """A linear (or log10) map from [lo, hi] (data) to [start, end] (pixels), round ticks at both ends."""

    ticks: np.ndarray
    start: float
    end: float
    log: bool = False

    def px(self, v: np.ndarray | float) -> np.ndarray:
        f = np.log10 if self.log else (lambda a: a)
        lo, hi = float(f(self.ticks[0])), float(f(self.ticks[-1]))
        data = f(np.asarray(v, dtype=np.float64))
        return self.start + (data - lo) * (self.end - self.start) / (hi - lo)


@dataclass(frozen=True)
class _View:
    """The latencies a chart shows: [lo, hi], on a log axis or not, and per series the weight beyond hi."""

    lo: float
    hi: float
    log: bool
    clipped: tuple[float, ...]  # per drawn series: how many samples lie above hi (not drawn)

    @property
    def clipped_total(self) -> int:
        return int(round(sum(self.clipped)))


def histogram_svg(series: Series, title: str = "Latency histogram") -> str:
    """Each series' share of samples (%) per bucket over a common axis of 32 equal buckets.

    One series with only a stored histogram is drawn from its own edges and counts when they fit the
    view; otherwise the samples (or stored bucket centres) of every series are rebinned onto 32
    buckets (equal, or equal in log10 on a log axis) spanning the view (see the module's docstring).
    A share is of all the series' samples, those beyond the axis included. One series is drawn as
    bars, several as outlined step curves. All samples equal: the buckets span the value +- 5%, so
    nothing divides by zero.
    """
    points = _points(series)
    drawn = [p for p in points if not p.empty]
    if not drawn:
        return _empty_chart(title, points)
    view = _view(drawn)
    edges, shares = _bucket_shares(drawn, view)
    x = _x_axis(float(edges[0]), float(edges[-1]), view.log)
    y = _Axis(_nice_ticks(0.0, max(float(np.max(shares)), 1e-9)), MARGIN_TOP + PLOT_HEIGHT, MARGIN_TOP)
    indices = [i for i, p in enumerate(points) if not p.empty]  # colours follow the legend's order
    if len(drawn) == 1:
        marks = [_bars(edges, shares[0], x, y, indices[0])]
    else:
        marks = [_step_outline(edges, s, x, y, i) for i, s in zip(indices, shares, strict=True)]
    body = _frame(x, y, _x_title(view), "share of samples (%)", y_percent=True) + marks
    return _svg(title, "histogram", body, _legend(points, view))


def cdf_svg(series: Series, title: str = "Latency CDF") -> str:
    """The empirical CDF per series: F(x) = (weight of latencies <= x) / (total weight), in %.

    Drawn as a step curve from 0% at the axis start to F(axis end) at the axis end: 100% unless
    samples lie beyond the axis (see the module's docstring). More than 1000 distinct steps are
    thinned to 1000 evenly spaced ranks (at most 0.1% of the height off).
    """
    points = _points(series)
    drawn = [p for p in points if not p.empty]
    if not drawn:
        return _empty_chart(title, points)
    view = _view(drawn)
    x = _x_axis(*_padded(view.lo, view.hi), view.log)
    y = _Axis(np.linspace(0.0, 1.0, 6), MARGIN_TOP + PLOT_HEIGHT, MARGIN_TOP)
    marks = [_cdf_path(p, x, y, i, view.hi) for i, p in enumerate(points) if not p.empty]
    body = _frame(x, y, _x_title(view), "share at or below (%)", y_percent=True, y_scale=100.0) + marks
    return _svg(title, "cdf", body, _legend(points, view))


# --- data ------------------------------------------------------------------------------------------


def _points(series: Series) -> list[_Points]:
    return [_series_points(str(label), stats) for label, stats in series.items()]


def _series_points(label: str, stats: Mapping | None) -> _Points:
    """Finite, non-negative samples with weight 1; else non-empty histogram buckets at their centres."""
    stats = stats if isinstance(stats, Mapping) else {}
    samples = _finite(stats.get("samples"))
    if samples.size:
        return _Points(label, samples, np.ones_like(samples))
    hist = stats.get("histogram")
    if not isinstance(hist, Mapping):
        hist = {}
    edges, counts = _finite(hist.get("edges")), _finite(hist.get("counts"))
    if edges.size >= 2 and counts.size == edges.size - 1 and counts.sum() > 0 and np.all(np.diff(edges) >= 0):
        keep = counts > 0
        centres = (edges[:-1] + edges[1:]) / 2.0
        return _Points(label, centres[keep], counts[keep], (edges, counts))
    return _Points(label, np.zeros(0), np.zeros(0))


def _finite(values) -> np.ndarray:
    """A flat float64 array of the finite, non-negative, non-sentinel numbers in `values` (else empty)."""
    if not isinstance(values, (list, tuple, np.ndarray)):
        return np.zeros(0)
    try:
        arr = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return np.zeros(0)
    return arr[np.isfinite(arr) & (arr >= 0) & (arr < SENTINEL_MIN)]


def _padded(lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi], or lo +- 5% (at least 0.001 ms) when the range is zero; never below 0."""
    if hi > lo:
        return lo, hi
    pad = max(abs(lo) * 0.05, 1e-3)
    return max(0.0, lo - pad), hi + pad


def _percentile(p: _Points, q: float) -> float:
    """The weighted nearest-rank q-th percentile: the smallest value with >= q% of the weight at or below it."""
    order = np.argsort(p.values, kind="stable")
    cum = np.cumsum(p.weights[order])
    rank = int(np.searchsorted(cum, q / 100.0 * cum[-1] * (1 - 1e-12), side="left"))
    return float(p.values[order][min(rank, cum.size - 1)])


def _view(drawn: list[_Points]) -> _View:
    """From the smallest latency to the largest of the series' p99s, on a log axis when that is wide."""
    lo = min(float(p.values.min()) for p in drawn)
    hi = max(_percentile(p, CLIP_PERCENTILE) for p in drawn)
    clipped = tuple(float(p.weights[p.values > hi].sum()) for p in drawn)
    log = lo > 0 and hi > LOG_AXIS_RATIO * lo
    return _View(lo, hi, log, clipped)


def _bucket_shares(drawn: list[_Points], view: _View) -> tuple[np.ndarray, np.ndarray]:
    """(edges, shares[series, bucket]) in % of each series' whole weight (beyond the axis included)."""
    stored = drawn[0].stored
    own = stored is not None and stored[0][-1] > stored[0][0] and not view.log and not view.clipped_total
    if len(drawn) == 1 and stored is not None and own:
        edges, counts = stored
        totals = np.atleast_2d(counts).sum(axis=1, keepdims=True)
    else:
        lo, hi = _padded(view.lo, view.hi)
        edges = np.geomspace(lo, hi, BUCKETS + 1) if view.log else np.linspace(lo, hi, BUCKETS + 1)
        counts = np.stack([np.histogram(p.values, bins=edges, weights=p.weights)[0] for p in drawn])
        totals = np.array([[p.weights.sum()] for p in drawn])
    counts = np.atleast_2d(counts).astype(np.float64)
    return edges, 100.0 * counts / totals


def _ecdf(p: _Points) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, F just before x, F at x) at each step of the weighted empirical CDF, thinned to 1000 steps."""
    order = np.argsort(p.values, kind="stable")
    xs, w = p.values[order], p.weights[order]
    cum = np.cumsum(w) / w.sum()
    last = np.r_[xs[1:] != xs[:-1], True]  # one step per distinct value, at its last copy
    xs, cum = xs[last], cum[last]
    if xs.size > CDF_MAX_STEPS:
        keep = np.unique(np.linspace(0, xs.size - 1, CDF_MAX_STEPS).round().astype(np.int64))
        xs, cum = xs[keep], cum[keep]
    before = np.r_[0.0, cum[:-1]]
    return xs, before, cum


# --- axes -------------------------------------------------------------------------------------------


def _nice_ticks(lo: float, hi: float, target: int = 5) -> np.ndarray:
    """Ticks step apart with step = 1, 2 or 5 x 10^k, the first <= lo and the last >= hi (hi > lo)."""
    raw = (hi - lo) / target
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 5.0, 10.0) if raw <= m * magnitude * (1 + 1e-9))
    first = math.floor(lo / step + 1e-9) * step
    count = max(1, math.ceil((hi - first) / step - 1e-9))
    return first + step * np.arange(count + 1)


def _log_ticks(lo: float, hi: float, most: int = 9) -> np.ndarray:
    """1, 2, 5 x 10^k ticks from the largest at or below lo to the smallest at or above hi (0 < lo < hi);
    only the powers of ten (and both ends) when that makes more than `most`."""
    first_exp, last_exp = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    grid = [(m * 10.0**e, m == 1) for e in range(first_exp, last_exp + 1) for m in (1, 2, 5)]
    start = max(v for v, _ in grid if v <= lo * (1 + 1e-9))
    end = min(v for v, _ in grid if v >= hi * (1 - 1e-9))
    ticks = [(v, power) for v, power in grid if start <= v <= end]
    if len(ticks) > most:
        ticks = [(v, power) for v, power in ticks if power or v in (start, end)]
    return np.array([v for v, _ in ticks])


def _x_axis(lo: float, hi: float, log: bool = False) -> _Axis:
    lo, hi = _padded(lo, hi)
    if log:
        return _Axis(_log_ticks(lo, hi), MARGIN_LEFT, WIDTH - MARGIN_RIGHT, log=True)
    return _Axis(_nice_ticks(lo, hi), MARGIN_LEFT, WIDTH - MARGIN_RIGHT)


def _x_title(view: _View) -> str:
    return "latency (ms, log scale)" if view.log else "latency (ms)"


def _latency_text(ms: float) -> str:
    return f"{ms:.3g}" if ms < 1000 else f"{ms:.0f}"


def _clip_note(view: _View, y: float) -> list[str]:
    """A line under the legend: where the axis ends (the largest p99) and how many samples lie beyond."""
    n = view.clipped_total
    if not n:
        return []
    samples = "sample lies" if n == 1 else "samples lie"
    where = (
        f"p{CLIP_PERCENTILE:g}"
        if len(view.clipped) == 1
        else f"the largest p{CLIP_PERCENTILE:g} of the series"
    )
    text = f"The axis ends at {where}, {_latency_text(view.hi)} ms: {n} slower {samples} beyond it."
    return [f'<text class="clip-note" x="{MARGIN_LEFT}" y="{y + 4:.1f}" fill="#7a5600">{escape(text)}</text>']


def _tick_text(values: np.ndarray, log: bool = False) -> list[str]:
    """Tick labels with as many decimals as the step needs (step 0.05 -> 2 decimals); log ticks as %g."""
    if log:
        return [f"{v:g}" for v in values]
    step = float(values[1] - values[0]) if values.size > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{v:.{decimals}f}" for v in values]


def _frame(
    x: _Axis, y: _Axis, x_title: str, y_title: str, *, y_percent: bool, y_scale: float = 1.0
) -> list[str]:
    """Plot area, grid lines, both axes with their ticks and tick labels, and the axis titles."""
    bottom, top = MARGIN_TOP + PLOT_HEIGHT, MARGIN_TOP
    out = [
        f'<rect class="plot-area" x="{MARGIN_LEFT}" y="{top}" width="{WIDTH - MARGIN_LEFT - MARGIN_RIGHT}" '
        f'height="{PLOT_HEIGHT}" fill="#ffffff" stroke="#999999"/>'
    ]
    for px, text in zip(x.px(x.ticks), _tick_text(x.ticks, x.log), strict=True):
        out.append(
            f'<line class="tick" x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" y2="{bottom + 5}" stroke="#555555"/>'
        )
        out.append(
            f'<text class="x-tick" x="{px:.1f}" y="{bottom + 18}" text-anchor="middle">{escape(text)}</text>'
        )
    for py, text in zip(y.px(y.ticks), _tick_text(y.ticks * y_scale), strict=True):
        out.append(
            f'<line class="grid" x1="{MARGIN_LEFT}" y1="{py:.1f}" x2="{WIDTH - MARGIN_RIGHT}" y2="{py:.1f}" '
            'stroke="#e3e3e3"/>'
        )
        out.append(
            f'<text class="y-tick" x="{MARGIN_LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{escape(text)}</text>'
        )
    mid_x = (MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2
    mid_y = MARGIN_TOP + PLOT_HEIGHT / 2
    out.append(
        f'<text class="axis-title" x="{mid_x:.0f}" y="{bottom + 38}" text-anchor="middle">{escape(x_title)}</text>'
    )
    out.append(
        f'<text class="axis-title" x="14" y="{mid_y:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {mid_y:.0f})">{escape(y_title)}</text>'
    )
    return out


# --- marks ------------------------------------------------------------------------------------------


def _bars(edges: np.ndarray, shares: np.ndarray, x: _Axis, y: _Axis, index: int) -> str:
    """One rect per non-empty bucket, one pixel narrower than the bucket so neighbours stay apart."""
    left, right = x.px(edges[:-1]), x.px(edges[1:])
    top, base = y.px(shares), y.px(0.0)
    rects = [
        f'<rect class="bar" x="{lx:.2f}" y="{ty:.2f}" width="{max(rx - lx - 1.0, 0.5):.2f}" '
        f'height="{float(base) - ty:.2f}"/>'
        for lx, rx, ty, s in zip(left, right, top, shares, strict=True)
        if s > 0
    ]
    colour = PALETTE[index % len(PALETTE)][0]
    return f'<g class="series" data-series="{index}" fill="{colour}" fill-opacity="0.8">{"".join(rects)}</g>'


def _step_outline(edges: np.ndarray, shares: np.ndarray, x: _Axis, y: _Axis, index: int) -> str:
    """The histogram outline: up and along each bucket's top, closed along the base, lightly filled."""
    xs = np.repeat(x.px(edges), 2)[1:-1]
    ys = np.repeat(y.px(shares), 2)
    base = float(y.px(0.0))
    d = f"M{xs[0]:.2f},{base:.2f} " + _polyline(xs, ys) + f" L{xs[-1]:.2f},{base:.2f} Z"
    return _path(d, index, fill_opacity=0.12)


def _cdf_path(p: _Points, x: _Axis, y: _Axis, index: int, hi: float) -> str:
    """Flat at 0 from the axis start, a vertical step at each latency up to `hi`, then flat to the axis
    end at the share at or below `hi` (below 1 when samples lie beyond the axis)."""
    xs, before, at = _ecdf(p)
    keep = xs <= hi
    xs, before, at = xs[keep], before[keep], at[keep]
    last = float(at[-1]) if at.size else 0.0
    px = np.r_[x.start, np.repeat(x.px(xs), 2), x.end]
    py = y.px(np.r_[0.0, np.column_stack([before, at]).ravel(), last])
    return _path("M" + _polyline(px, py).removeprefix("L"), index, fill_opacity=0.0)


def _polyline(xs: np.ndarray, ys: np.ndarray) -> str:
    return " ".join(f"L{a:.2f},{b:.2f}" for a, b in zip(xs, ys, strict=True))


def _path(d: str, index: int, *, fill_opacity: float) -> str:
    colour, dash = PALETTE[index % len(PALETTE)]
    fill = f'fill="{colour}" fill-opacity="{fill_opacity}"' if fill_opacity else 'fill="none"'
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<path class="series" data-series="{index}" d="{d}" {fill} stroke="{colour}" stroke-width="2"'
        f"{dash_attr}/>"
    )


def _legend(points: list[_Points], view: _View | None = None) -> list[str]:
    """One row per series: a line in its colour and dash, its label, how many samples it has and how
    many of them lie beyond the axis."""
    out = []
    top = MARGIN_TOP + PLOT_HEIGHT + AXIS_BELOW
    beyond = iter(view.clipped if view is not None else ())
    for i, p in enumerate(points):
        colour, dash = PALETTE[i % len(PALETTE)]
        y = top + LEGEND_ROW * i + LEGEND_ROW / 2
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        if p.empty:
            note = "no samples"
        else:
            note = f"n={int(round(p.weights.sum()))}" + (", from its histogram" if p.from_histogram else "")
            clipped = int(round(next(beyond, 0.0)))
            if clipped:
                note += f", {clipped} beyond the axis"
        out.append(
            f'<g class="legend-entry"><line x1="{MARGIN_LEFT}" y1="{y:.1f}" x2="{MARGIN_LEFT + 30}" y2="{y:.1f}" '
            f'stroke="{colour}" stroke-width="3"{dash_attr}/>'
            f'<text x="{MARGIN_LEFT + 38}" y="{y + 4:.1f}">{escape(p.label)} ({escape(note)})</text></g>'
        )
    if view is not None:
        out += _clip_note(view, top + LEGEND_ROW * len(points) + LEGEND_ROW / 2)
    return out


def _empty_chart(title: str, points: list[_Points]) -> str:
    text = (
        f'<text class="empty" x="{WIDTH / 2:.0f}" y="{MARGIN_TOP + PLOT_HEIGHT / 2:.0f}" text-anchor="middle">'
        "no latency samples</text>"
    )
    return _svg(title, "empty", [text], _legend(points))


def _svg(title: str, kind: str, body: list[str], legend: list[str]) -> str:
    height = MARGIN_TOP + PLOT_HEIGHT + AXIS_BELOW + LEGEND_ROW * len(legend) + 6
    return (
        f'<svg class="chart chart-{kind}" role="img" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
        f'height="{height}" font-family="sans-serif" font-size="11">'
        f"<title>{escape(title)}</title>" + "".join(body) + "".join(legend) + "</svg>"
    )
