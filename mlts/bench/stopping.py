"""Sequential stopping rules: end a timed run once its median is precise, a warm-up once it is stable.

`PrecisionRule` (timed runs and compilation timings): once at least `min_calls` calls were made and
`min_seconds` have passed, the distribution-free 95% confidence interval of the median (the order
statistics of `mlts.bench.stats.median_ci95_ranks`, the interval every row reports) is computed at
checkpoints spaced geometrically (each when the calls have grown by `growth`, so a run of n calls is
checked about log(n)/log(growth) times and the sorting costs a few milliseconds in all, always between
calls, never inside a sample); the run stops at the first checkpoint where both ends of the interval lie
within +-`within` of the median ("precise"). Otherwise the caller's bound ends it ("bound"). This is
the Chow-Robbins scheme (sample until a fixed-width interval is reached): the stop depends on the
interval's width, not on where the median lies, so it does not select favourable medians; the reported
interval's coverage is close to 95%, exactly so as the width shrinks.

`StableRule` (warm-ups): after at least `min_calls` calls, the warm-up ends once the median of the
last `window` calls is within +-`within` of the median of the `window` before them (the calls have
stopped getting faster or slower); else at the warm-up's time bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mlts.bench.stats import median, median_ci95_ranks

PRECISE = "precise"
BOUND = "bound"
STABLE = "stable"


def ci_halfwidth(samples: Sequence[float]) -> tuple[float, float, float, float | None]:
    """(median, CI low, CI high, the larger distance of an end from the median as a fraction of it).

    The fraction is None when the median is 0 and the interval is not the single point 0.
    """
    ordered = sorted(samples)
    mid = median(ordered)
    lo_rank, hi_rank, _ = median_ci95_ranks(len(ordered))
    lo, hi = ordered[lo_rank - 1], ordered[hi_rank - 1]
    spread = max(mid - lo, hi - mid)
    if mid > 0:
        return mid, lo, hi, spread / mid
    return mid, lo, hi, (0.0 if spread == 0 else None)


@dataclass(frozen=True, slots=True)
class PrecisionRule:
    """Stop when the median's 95% interval is within +-`within` (a fraction) of the median."""

    within: float
    min_calls: int
    min_seconds: float = 0.0
    growth: float = 1.25

    def __post_init__(self) -> None:
        if not (0 < self.within < 1):
            raise ValueError(f"the precision must be a fraction in (0, 1), got {self.within}")
        if self.min_calls < 6:
            # Below 6 calls no pair of order statistics covers the median with 95%.
            raise ValueError(f"the precision rule needs at least 6 calls, got {self.min_calls}")
        if not (self.min_seconds >= 0 and math.isfinite(self.min_seconds)):
            raise ValueError(f"the precision rule's minimum time must be >= 0 s, got {self.min_seconds}")
        if not self.growth > 1:
            raise ValueError(f"checkpoints must grow by a factor > 1, got {self.growth}")

    def next_check(self, calls: int) -> int:
        """The call count of the checkpoint after one at `calls` calls."""
        return max(calls + 1, math.ceil(calls * self.growth))

    def precise(self, samples: Sequence[float]) -> bool:
        """Whether the median of `samples` is known to within +-`within` (at least min_calls of them)."""
        if len(samples) < self.min_calls:
            return False
        spread = ci_halfwidth(samples)[3]
        return spread is not None and spread <= self.within

    def to_json(self) -> dict:
        return {
            "rule": "median 95% CI within +-percent",
            "ci95_within_percent": 100.0 * self.within,
            "min_iterations": self.min_calls,
            "min_seconds": self.min_seconds,
        }


class PrecisionWatch:
    """A PrecisionRule applied to a growing list of samples: `due(n, elapsed)` says when to check."""

    def __init__(self, rule: PrecisionRule) -> None:
        self.rule = rule
        self.checkpoint = rule.min_calls
        self.checks = 0

    def stop(self, samples: Sequence[float], elapsed: float) -> bool:
        """True once a checkpoint finds the median precise; checks only at checkpoints after min_seconds."""
        n = len(samples)
        if n < self.checkpoint or elapsed < self.rule.min_seconds:
            return False
        self.checks += 1
        self.checkpoint = self.rule.next_check(n)
        return self.rule.precise(samples)


@dataclass(frozen=True, slots=True)
class StableRule:
    """End a warm-up when the last `window` calls' median is within +-`within` of the previous window's."""

    within: float = 0.05
    window: int = 10
    min_calls: int = 20

    def __post_init__(self) -> None:
        if not (0 < self.within < 1):
            raise ValueError(f"the stability margin must be a fraction in (0, 1), got {self.within}")
        if self.window < 1 or self.min_calls < 2 * self.window:
            raise ValueError(
                f"the warm-up rule needs a window >= 1 and at least two windows of calls "
                f"(window {self.window}, minimum {self.min_calls})"
            )

    def stable(self, durations: Sequence[float]) -> bool:
        """Whether the calls timed so far (seconds each, oldest first) have settled."""
        if len(durations) < self.min_calls:
            return False
        last = median(sorted(durations[-self.window :]))
        before = median(sorted(durations[-2 * self.window : -self.window]))
        return abs(last - before) <= self.within * before

    def to_json(self) -> dict:
        return {
            "rule": "median of the last calls within +-percent of the calls before",
            "window": self.window,
            "within_percent": 100.0 * self.within,
            "min_iterations": self.min_calls,
        }


@dataclass(frozen=True, slots=True)
class EarlyStop:
    """The rules of a run that stops early: the timed run's, the warm-up's and the compilation timings'."""

    timed: PrecisionRule
    warmup: StableRule
    compilation: PrecisionRule

    def to_json(self) -> dict:
        return {
            "timed": self.timed.to_json(),
            "warmup": self.warmup.to_json(),
            "compilation": self.compilation.to_json(),
        }


#: Timed runs: +-2% after the 20 calls MLTS asks for and 0.1 s of calls. Why 2%: the quick run is for
#: failures and regressions of several percent; +-2% on each median keeps a driver / onnxruntime ratio
#: within about +-3%. At +-1% the rule would fire only on the fast models: a 15 ms model with 3%
#: call-to-call noise needs about 100 calls (1.5 s, past the 1 s bound) for +-1%, about 25 for +-2%.
TIMED_WITHIN = 0.02
TIMED_MIN_SECONDS = 0.1
#: Compilation timings: +-5% after 6 compilations (the fewest whose [min, max] covers the median with
#: 95%); a cache hit differs from a compilation by multiples, so 5% resolves every comparison made.
COMPILATION_WITHIN = 0.05
COMPILATION_MIN_CALLS = 6


def default_early_stop(min_iterations: int) -> EarlyStop:
    """The rules --quick uses: timed runs +-2% after --iterations calls (20; at least 6) and 0.1 s; warm-ups
    when the last 10 calls' median is within 5% of the 10 before (>= 20 calls); compilation timings
    +-5% after 6 calls."""
    return EarlyStop(
        timed=PrecisionRule(TIMED_WITHIN, max(6, min_iterations), TIMED_MIN_SECONDS),
        warmup=StableRule(),
        compilation=PrecisionRule(COMPILATION_WITHIN, COMPILATION_MIN_CALLS),
    )
