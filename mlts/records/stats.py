"""Statistics over per-call samples (the output of mlts.bench.stats.describe) as a record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.records import _json as j

# Latency histograms have 32 equal buckets (mlts.bench.stats.histogram); a different count is a new schema.
HISTOGRAM_BUCKETS = 32
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Histogram(j.Record):
    """32 equal buckets over [min, max]: 33 edges and 32 counts summing to n."""

    edges: tuple[float, ...] = j.value(j.fixed_numbers(HISTOGRAM_BUCKETS + 1))
    counts: tuple[int, ...] = j.value(j.anything)
    extra: dict = j.extra()

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Histogram:
        rec = j.decode(cls, data, where)
        counts = j.lst(rec.counts, j.at(where, "counts"))
        if len(counts) != HISTOGRAM_BUCKETS:
            j.fail(j.at(where, "counts"), f"expected {HISTOGRAM_BUCKETS} counts, got {len(counts)}")
        for i, c in enumerate(counts):
            j.count(c, f"{j.at(where, 'counts')}[{i}]")
        return cls(rec.edges, tuple(counts), rec.extra)

    def to_json(self) -> dict:
        return j.encode_fields(self)


@dataclass(frozen=True)
class Stats(j.Record):
    """n, mean, std, median, MAD, nearest-rank percentiles, the median's 95% interval, histogram, warnings."""

    n: int = j.value(j.positive)
    mean: float = j.value(j.number)
    std: float = j.value(j.number)
    median: float = j.value(j.number)
    mad: float = j.value(j.number)
    p50: float = j.value(j.number)
    p90: float = j.value(j.number)
    p95: float = j.value(j.number)
    p99: float = j.value(j.number)
    min: float = j.value(j.number)
    max: float = j.value(j.number)
    percentile_estimator: str = j.value(j.text)
    median_ci95: tuple[float, float] = j.value(j.fixed_numbers(2))
    median_ci95_ranks: tuple[int, int] = j.value(j.anything)
    median_ci95_note: str | None = j.value(j.nullable(j.text))
    histogram: Histogram = j.value(j.record_check(Histogram))
    warnings: tuple[str, ...] = j.value(j.texts)
    samples: tuple[float, ...] | None = j.value(j.numbers, default=None, omit=True)
    # Compilation timings: what ended the calls, "bound" or "precise" (mlts.bench.stopping).
    stopped: str | None = j.value(j.one_of(("bound", "precise")), default=None, omit=True)
    extra: dict = j.extra()

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Stats:
        rec = j.decode(cls, data, where)
        ranks_at = j.at(where, "median_ci95_ranks")
        ranks = j.lst(rec.median_ci95_ranks, ranks_at)
        if len(ranks) != 2:
            j.fail(ranks_at, f"expected 2 ranks, got {len(ranks)}")
        for i, rank in enumerate(ranks):
            j.count(rank, f"{ranks_at}[{i}]", minimum=1)
        if sum(rec.histogram.counts) != rec.n:
            j.fail(
                j.at(j.at(where, "histogram"), "counts"),
                f"counts sum to {sum(rec.histogram.counts)}, expected n = {rec.n}",
            )
        if rec.samples is not None and len(rec.samples) != rec.n:
            j.fail(j.at(where, "samples"), f"expected {rec.n} numbers, got {len(rec.samples)}")
        rec._check_order(where)
        return rec

    def _check_order(self, where: str) -> None:
        """min <= p50 <= p90 <= p95 <= p99 <= max, and min <= ci95 lo <= median <= ci95 hi <= max."""
        chain = ("min", "p50", "p90", "p95", "p99", "max")
        for lower, upper in zip(chain, chain[1:], strict=False):
            lo_v, up_v = getattr(self, lower), getattr(self, upper)
            if lo_v > up_v:
                j.fail(j.at(where, upper), f"expected >= {lower} ({lo_v!r}), got {up_v!r}")
        lo, hi = self.median_ci95
        if not self.min <= lo <= self.median <= hi <= self.max:
            j.fail(
                j.at(where, "median_ci95"),
                f"[{lo!r}, {hi!r}] must satisfy min <= lo <= median <= hi <= max "
                f"(min {self.min!r}, median {self.median!r}, max {self.max!r})",
            )

    def to_json(self) -> dict:
        return j.encode_fields(self)

    @classmethod
    def of(cls, data: dict) -> Stats:
        """The record of a describe() result (validated like any other JSON)."""
        return cls.from_json(data)


def stats_or_not_measured(value: Any, where: str) -> Stats | str:
    """A driver Timing field: statistics (µs), or "not measured" when the driver gave none."""
    if value == NOT_MEASURED:
        return NOT_MEASURED
    if not isinstance(value, dict):
        j.fail(where, f"expected statistics or {NOT_MEASURED!r}, got {j.got(value)}")
    return Stats.from_json(value, where)
