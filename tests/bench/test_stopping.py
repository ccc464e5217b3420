"""The early-stop rules on synthetic sample streams and fake clocks: a stable stream stops early, a noisy
one runs to its bound, nothing stops before the minimum calls, and results carry what stopped them.

The fake clock moves only inside the timed function, by scripted durations, so counts are exact.
"""

from __future__ import annotations

import itertools
import random

import pytest

from mlts.bench import stopping, timing
from mlts.bench.backends import BenchmarkConfig, timed_fields
from mlts.bench.stopping import PrecisionRule, PrecisionWatch, StableRule


class FakeClock:
    def __init__(self, durations) -> None:
        self.now = 50.0
        self._durations = iter(durations)
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def fn(self, _index: int) -> None:
        self.calls += 1
        self.now += next(self._durations)


def _noisy(seed: int, centre: float, spread: float):
    """Durations uniform in centre * (1 +- spread): the median's interval stays about +-spread/2 wide."""
    rng = random.Random(seed)
    while True:
        yield centre * (1.0 + spread * (2.0 * rng.random() - 1.0))


# --- the rules on their own -------------------------------------------------------------------------


def test_ci_halfwidth_uses_the_reported_interval():
    # n = 20: the exact 95% ranks are (6, 15) (mlts.bench.stats), median (x10 + x11) / 2.
    samples = [float(v) for v in range(1, 21)]
    mid, lo, hi, spread = stopping.ci_halfwidth(samples)
    assert (mid, lo, hi) == (10.5, 6.0, 15.0)
    assert spread == pytest.approx(4.5 / 10.5)
    assert stopping.ci_halfwidth([0.0] * 10)[3] == 0.0
    assert stopping.ci_halfwidth([0.0] * 6 + [1.0] * 4)[3] is None  # median 0, interval not a point


def test_precision_rule_needs_its_minimum_calls_and_a_narrow_interval():
    rule = PrecisionRule(0.01, 20)
    assert not rule.precise([1.0] * 19)  # identical, but fewer than the minimum
    assert rule.precise([1.0] * 20)
    # 20 calls within +-0.5% of 1.0: the interval's ends are inside +-1%
    assert rule.precise([1.0 + 0.005 * ((-1) ** k) * (k % 3) / 2 for k in range(20)])
    # half the calls 3% slower: the upper end of the interval is 3% above the median
    assert not rule.precise([1.0] * 10 + [1.03] * 10)


def test_precision_watch_checks_only_at_geometric_checkpoints_after_the_minimum_time():
    watch = PrecisionWatch(PrecisionRule(0.01, 20, min_seconds=0.1, growth=1.25))
    noisy = [1.0, 2.0] * 200
    assert not watch.stop(noisy[:20], 0.05) and watch.checks == 0  # before the minimum time
    looked = []
    for n in range(20, 201):
        before = watch.checks
        assert not watch.stop(noisy[:n], 1.0)  # half the calls twice as slow: never precise
        if watch.checks > before:
            looked.append(n)
    # checked at 20, then each time the calls grew by a quarter: 25, 32, 40, 50, 63, 79, 99, 124, 155, 194
    assert looked == [20, 25, 32, 40, 50, 63, 79, 99, 124, 155, 194]
    assert watch.checks == len(looked)


def test_rules_refuse_settings_that_cannot_work():
    for bad in (
        dict(within=0.0, min_calls=20),
        dict(within=0.01, min_calls=5),
        dict(within=1.5, min_calls=20),
    ):
        with pytest.raises(ValueError):
            PrecisionRule(**bad)
    with pytest.raises(ValueError):
        PrecisionRule(0.01, 20, growth=1.0)
    with pytest.raises(ValueError):
        StableRule(window=10, min_calls=15)  # two windows of calls are needed


def test_stable_rule_compares_the_last_window_with_the_one_before():
    rule = StableRule(within=0.05, window=10, min_calls=20)
    settling = [3.0, 2.0] + [1.0] * 18
    assert not rule.stable(settling[:19])
    assert rule.stable(settling)  # medians 1.0 and 1.0: the slow first calls are outvoted
    assert not rule.stable([2.0] * 10 + [1.0] * 10)  # still getting faster
    assert rule.stable([1.0] * 10 + [1.04] * 10)
    assert not rule.stable([1.0] * 10 + [1.06] * 10)


# --- the timed run with the rules -------------------------------------------------------------------


def test_a_stable_stream_stops_precise_long_before_its_bound():
    clock = FakeClock(_noisy(1, 0.001, 0.004))  # 1 ms +- 0.4%
    t = timing.run_timed(
        clock.fn,
        warmup_s=0.3,
        min_duration_s=1.0,
        min_iterations=20,
        clock=clock,
        precision=PrecisionRule(0.01, 20, min_seconds=0.1),
        warmup_rule=StableRule(),
    )
    assert t.warmup_stopped == timing.STABLE and t.warmup_iterations == 20
    assert t.stopped == stopping.PRECISE
    # the first checkpoint after 0.1 s of calls (about 100 calls of 1 ms) is already precise
    assert 100 <= t.iterations <= 125 and t.duration_seconds < 0.15 and t.checks == 1
    assert PrecisionRule(0.01, 20).precise(t.samples)


def test_a_noisy_stream_runs_to_its_bound():
    clock = FakeClock(_noisy(2, 0.001, 0.8))  # 1 ms +- 80%: the median's interval stays wider than 1%
    rule = PrecisionRule(0.01, 20, min_seconds=0.1)
    t = timing.run_timed(
        clock.fn,
        warmup_s=0.3,
        min_duration_s=1.0,
        min_iterations=20,
        clock=clock,
        precision=rule,
        warmup_rule=StableRule(),
    )
    assert t.stopped == stopping.BOUND and t.duration_seconds >= 1.0
    assert t.checks > 5 and not rule.precise(t.samples)


def test_a_warm_up_ends_only_once_the_calls_stop_getting_faster():
    # 8 ms calls getting 5% faster each call, down to 1 ms after 41 calls, then flat.
    durations = [max(0.001, 0.008 * 0.95**k) for k in range(200)]
    floor_at = next(k for k, d in enumerate(durations) if d == 0.001)
    clock = FakeClock(itertools.chain(durations, itertools.repeat(0.001)))
    t = timing.run_timed(
        clock.fn, warmup_s=1.0, min_duration_s=0, min_iterations=1, clock=clock, warmup_rule=StableRule()
    )
    assert t.warmup_stopped == timing.STABLE
    # stable once the window before the last is mostly on the floor too: (41 + 15) calls here, within
    # two windows of the floor and never before it
    assert floor_at < t.warmup_iterations <= floor_at + 20
    # the same stream with a warm-up bound shorter than the settling: the bound ends it
    clock = FakeClock(itertools.chain(durations, itertools.repeat(0.001)))
    t = timing.run_timed(
        clock.fn, warmup_s=0.05, min_duration_s=0, min_iterations=1, clock=clock, warmup_rule=StableRule()
    )
    assert t.warmup_stopped == stopping.BOUND and t.warmup_seconds >= 0.05 and t.warmup_iterations < floor_at


def test_never_stops_before_the_minimum_calls_or_the_minimum_time():
    # Identical calls are precise at once; the rule still waits for 20 calls and 0.1 s: 26 calls of
    # 2**-8 s (dyadic, so the fake clock's sums are exact) are the first to reach 0.1 s.
    clock = FakeClock(itertools.repeat(2.0**-8))
    t = timing.run_timed(
        clock.fn,
        warmup_s=0,
        min_duration_s=10.0,
        min_iterations=20,
        clock=clock,
        precision=PrecisionRule(0.01, 20, min_seconds=0.1),
    )
    assert t.stopped == stopping.PRECISE and t.iterations == 26
    # Slow calls: 0.1 s passes after 2 calls, the minimum of 30 calls still holds.
    clock = FakeClock(itertools.repeat(2.0**-4))
    t = timing.run_timed(
        clock.fn,
        warmup_s=0,
        min_duration_s=10.0,
        min_iterations=30,
        clock=clock,
        precision=PrecisionRule(0.01, 30, min_seconds=0.1),
    )
    assert t.stopped == stopping.PRECISE and t.iterations == 30


def test_the_bound_still_waits_for_the_minimum_calls_and_max_iterations_caps_everything():
    clock = FakeClock(_noisy(3, 0.2, 0.8))  # 0.2 s calls: the 1 s bound passes after about 5
    t = timing.run_timed(
        clock.fn,
        warmup_s=0,
        min_duration_s=1.0,
        min_iterations=20,
        clock=clock,
        precision=PrecisionRule(0.01, 20),
    )
    assert t.stopped == stopping.BOUND and t.iterations == 20
    clock = FakeClock(itertools.repeat(0.001))
    t = timing.run_timed(
        clock.fn,
        warmup_s=0,
        min_duration_s=1.0,
        min_iterations=20,
        max_iterations=10,
        clock=clock,
        precision=PrecisionRule(0.01, 20),
    )
    assert t.stopped == stopping.BOUND and t.iterations == 10


def test_without_rules_the_run_is_the_fixed_one():
    clock = FakeClock(itertools.repeat(0.125))
    t = timing.run_timed(clock.fn, warmup_s=0.5, min_duration_s=1.0, min_iterations=3, clock=clock)
    assert (t.warmup_iterations, t.iterations, t.stopped, t.warmup_stopped, t.checks) == (
        4,
        8,
        stopping.BOUND,
        stopping.BOUND,
        0,
    )


# --- what the rows record ---------------------------------------------------------------------------


def test_quick_config_rows_carry_what_stopped_them_and_the_interval():
    config = BenchmarkConfig(warmup_s=0.3, duration_s=1.0, early_stop=True)
    clock = FakeClock(_noisy(4, 0.001, 0.004))
    fields = timed_fields(config.control.run(clock.fn, clock=clock), config)
    run, warmup = fields["run"].to_json(), fields["warmup"].to_json()
    assert run["stopped"] == "precise" and warmup["stopped"] == "stable"
    assert run["stop_rule"]["ci95_within_percent"] == 2.0 and run["stop_rule"]["min_iterations"] == 20
    assert 0 <= run["ci95_percent"] <= 2.0 and run["checks"] >= 1
    assert warmup["stop_rule"]["window"] == 10
    lo, hi = fields["latency_ms"].median_ci95
    med = fields["latency_ms"].median
    assert max(med - lo, hi - med) / med * 100 == pytest.approx(run["ci95_percent"], abs=1e-3)

    fixed = BenchmarkConfig(warmup_s=0.5, duration_s=1.0, min_iterations=3)
    clock = FakeClock(itertools.repeat(0.125))
    run = timed_fields(fixed.control.run(clock.fn, clock=clock), fixed)["run"].to_json()
    assert run["stopped"] == "bound" and "stop_rule" not in run and run["checks"] == 0


def test_quick_run_lengths_turn_early_stop_on_and_full_ones_off():
    from mlts.bench.runner import run_lengths

    assert run_lengths(True)["early_stop"] is True
    assert run_lengths(False)["early_stop"] is False
    assert run_lengths(True, early_stop=False)["early_stop"] is False
    assert run_lengths(False, early_stop=True)["early_stop"] is True
    assert BenchmarkConfig.from_json({}).early_stop is False  # older results documents


def test_the_reports_run_settings_say_the_rule_and_how_many_runs_it_ended():
    from mlts.records import BenchmarkRow
    from mlts.report._html_sections import config_items

    config = BenchmarkConfig(warmup_s=0.3, duration_s=1.0, early_stop=True)
    rows = []
    for seed, spread in ((5, 0.004), (6, 0.8), (7, 0.8)):  # one stable stream, two noisy ones
        clock = FakeClock(_noisy(seed, 0.001, spread))
        fields = timed_fields(config.control.run(clock.fn, clock=clock), config)
        rows.append(BenchmarkRow(model=f"m{seed}", backend="cpu:onnxruntime", status="ok", **fields))
    items = dict(config_items({"early_stop": True}, rows))
    assert "within ±2% of it" in items["early stop"]
    assert items["early stop"].endswith("1 of 3 timed runs stopped precise, 2 at the bound")
    assert dict(config_items({"early_stop": False}, rows))["early stop"] == "off (fixed durations)"
