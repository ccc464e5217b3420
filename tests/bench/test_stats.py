"""describe(): latency statistics against hand-computed values and a brute-force binomial in the test.

Samples are chosen so that seconds * 1000 is exact in binary (integers in ms from 1e-3 multiples that
round-trip, or dyadic fractions), so most checks are exact; where a square root or a sum of non-dyadic
values is involved the tolerance is 1e-12 relative (a few ulps of float64 arithmetic).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlts.bench import stats

REL = 1e-12  # float64 round-off only: the hand values are exact rationals or one square root


def _brute_coverage(n: int, j: int) -> float:
    """P(X(j) <= median <= X(n+1-j)) = P(j <= B <= n-j), B ~ Binomial(n, 1/2), summed term by term."""
    return sum(math.comb(n, i) for i in range(j, n - j + 1)) / 2**n


def _best_exact_rank(n: int) -> int:
    """The largest j >= 1 whose interval [X(j), X(n+1-j)] covers the median with >= 95%, by search."""
    good = [j for j in range(1, n // 2 + 1) if _brute_coverage(n, j) >= 0.95]
    return max(good)


def test_hand_computed_summary_of_1_2_3_4_100_ms():
    d = stats.describe([0.001, 0.002, 0.003, 0.004, 0.100])
    assert d["n"] == 5
    assert d["mean"] == pytest.approx(22.0, rel=REL)  # 110 / 5
    # deviations -21 -20 -19 -18 78: squares 441+400+361+324+6084 = 7610; / (n-1) = 1902.5
    assert d["std"] == pytest.approx(math.sqrt(1902.5), rel=REL)
    assert d["median"] == 3.0
    assert d["mad"] == 1.0  # |x - 3| = 2 1 0 1 97 -> sorted 0 1 1 2 97 -> 1
    # nearest rank: ceil(q/100 * 5) -> p50 rank 3, p90 rank 5, p95 rank 5, p99 rank 5
    assert (d["p50"], d["p90"], d["p95"], d["p99"]) == (3.0, 100.0, 100.0, 100.0)
    assert (d["min"], d["max"]) == (1.0, 100.0)
    assert d["percentile_estimator"] == "nearest-rank"
    assert d["median_ci95"] == [1.0, 100.0]
    assert d["median_ci95_note"] == "n=5: [min, max] covers the median with 93.8%"  # 1 - 2/32


def test_percentile_ranks_on_twenty_samples():
    d = stats.describe([k / 1000.0 for k in range(20, 0, -1)])  # 1..20 ms, given unsorted
    # ceil(0.5*20)=10, ceil(0.9*20)=18, ceil(0.95*20)=19, ceil(0.99*20)=20
    assert (d["p50"], d["p90"], d["p95"], d["p99"]) == (10.0, 18.0, 19.0, 20.0)
    assert d["median"] == pytest.approx(10.5, rel=REL)
    assert d["mad"] == pytest.approx(5.0, rel=REL)  # |x - 10.5| = 0.5..9.5 twice -> median 5.0


def test_mad_of_even_count():
    d = stats.describe([0.001, 0.002, 0.004, 0.008])  # median 3; |x-3| = 2 1 1 5 -> median (1+2)/2
    assert d["median"] == 3.0 and d["mad"] == 1.5


@pytest.mark.parametrize("n", [6, 10, 20, 51])
def test_median_ci_ranks_against_brute_force_binomial(n):
    j, k, note = stats.median_ci95_ranks(n)
    assert note is None and k == n + 1 - j
    assert _brute_coverage(n, j) >= 0.95
    if n <= 50:  # exact: the tightest symmetric interval reaching 95%
        assert j == _best_exact_rank(n)
    else:  # normal approximation, rounded outward: never tighter than exact, at most one rank wider
        assert j == math.floor(n / 2 - 1.96 * math.sqrt(n) / 2) == 18
        assert _best_exact_rank(n) - 1 <= j <= _best_exact_rank(n)


def test_median_ci_known_ranks_and_values():
    # Tables of the sign-test interval: n=6 -> (1, 6), n=10 -> (2, 9), n=20 -> (6, 15).
    assert stats.median_ci95_ranks(6)[:2] == (1, 6)
    assert stats.median_ci95_ranks(10)[:2] == (2, 9)
    assert stats.median_ci95_ranks(20)[:2] == (6, 15)
    d = stats.describe([k / 1000.0 for k in range(1, 21)])
    assert d["median_ci95"] == [6.0, 15.0] and d["median_ci95_ranks"] == [6, 15]


@pytest.mark.parametrize("n", range(51, 400, 17))
def test_normal_approximation_keeps_95_percent(n):
    j, k, _ = stats.median_ci95_ranks(n)
    assert k == n + 1 - j and _brute_coverage(n, j) >= 0.95


@pytest.mark.parametrize("n, pct", [(1, "0.0"), (2, "50.0"), (3, "75.0"), (4, "87.5")])
def test_small_samples_give_min_max_and_say_the_coverage(n, pct):
    d = stats.describe([k / 1000.0 for k in range(1, n + 1)])
    assert d["median_ci95"] == [d["min"], d["max"]]
    assert d["median_ci95_note"] == f"n={n}: [min, max] covers the median with {pct}%"


def test_histogram_over_min_max():
    d = stats.describe([k / 1000.0 for k in range(1, 33)] + [0.032])  # 1..32 ms and 32 again
    h = d["histogram"]
    assert len(h["edges"]) == 33 and len(h["counts"]) == 32
    assert h["edges"][0] == 1.0 and h["edges"][-1] == 32.0
    assert sum(h["counts"]) == 33
    assert h["counts"][-1] >= 2  # both maxima land in the last bucket
    # width 31/32 ms: values 1..32 -> bucket floor((x-1)*32/31), clipped to 31
    expected = np.zeros(32, int)
    for x in [*range(1, 33), 32]:
        expected[min(31, math.floor((x - 1) * 32 / 31))] += 1
    assert h["counts"] == expected.tolist()


@pytest.mark.parametrize("samples", [[0.005], [0.005] * 7])
def test_zero_range_histogram_is_one_bucket(samples):
    h = stats.describe(samples)["histogram"]
    assert h["edges"] == [5.0] * 33
    assert h["counts"] == [len(samples)] + [0] * 31


def test_std_warning_at_ten_percent_boundary():
    # ms = 1000/1024 * [11, 11, 9, 9, 10]: mean 10u, deviations +-u, sample var 4u^2/4 -> std exactly 10%
    u = 1 / 1024
    at = stats.describe([11 * u, 11 * u, 9 * u, 9 * u, 10 * u], p99_wanted=False)
    assert at["std"] * 10 == at["mean"]
    assert at["warnings"] == [
        "latency varies: std is 10% of the mean; close other programs, pin the CPU frequency or time more iterations"
    ]
    below = stats.describe([10.99 * u, 10.99 * u, 9.01 * u, 9.01 * u, 10 * u], p99_wanted=False)
    assert below["warnings"] == []


def test_outlier_warning_at_one_and_a_half_times_the_median():
    at = stats.describe([0.5, 0.5, 0.75], p99_wanted=False)  # max 750 = 1.5 x median 500
    assert len(at["warnings"]) == 2  # also std: 144 / 583 = 25%
    assert at["warnings"][1].startswith("outliers: max is 1.5x the median; ")
    below = stats.describe([0.5] * 98 + [0.5 + 2**-8, 0.75 - 2**-10], p99_wanted=False)
    assert not any(w.startswith("outliers") for w in below["warnings"])
    assert below["warnings"] == []  # std is small here too


def test_p99_warning_needs_one_hundred_samples():
    few = stats.describe([0.001] * 99)
    assert few["warnings"] == [
        "p99 needs >= 100 samples for its own rank; have 99: time more iterations (or sequences)"
    ]
    assert stats.describe([0.001] * 99, p99_wanted=False)["warnings"] == []
    assert stats.describe([0.001] * 100)["warnings"] == []


def test_json_round_trip_without_nan():
    for samples in (
        [0.001, 0.002, 0.003, 0.004, 0.1],
        [0.0],
        [0.002] * 3,
        list(np.linspace(0.001, 0.002, 60)),
    ):
        d = stats.describe(samples)
        assert json.loads(json.dumps(d, allow_nan=False)) == d
        assert all(type(v) is float for k, v in d.items() if k in ("mean", "std", "mad", "p99", "min"))
        assert all(type(c) is int for c in d["histogram"]["counts"])


def test_summarize_ms_unchanged_and_consistent():
    samples = [0.001, 0.002, 0.003, 0.004, 0.1]
    s = stats.summarize_ms(samples)
    assert set(s) == {"mean", "std", "median", "p90", "p99", "min", "max"}
    d = stats.describe(samples)
    assert all(d[k] == v for k, v in s.items())


@pytest.mark.parametrize(
    "samples, message",
    [
        ([], "no latency samples"),
        ([0.001, float("nan")], "sample 1 is nan"),
        ([float("inf")], "sample 0 is inf"),
        ([0.001, 0.002, -0.001], "must be >= 0 s: sample 2 is -0.001"),
        ([[0.001, 0.002]], "flat list"),
    ],
)
def test_bad_samples_are_refused_in_one_line(samples, message):
    with pytest.raises(ValueError, match=message) as err:
        stats.describe(samples)
    assert "\n" not in str(err.value)
