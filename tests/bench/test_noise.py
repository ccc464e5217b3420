"""Noise decided from the load record and from the reference's own spread, with hand-made figures."""

from __future__ import annotations

import copy

import pytest

from mlts.bench.noise import USUAL_SPREAD_PCT, decide, reference_spread
from mlts.bench.stats import describe
from mlts.records import ResultsDocument
from tests.report._sample import sample_doc


def _sample(load1: float, steal: float | None = 0.0) -> dict:
    return {
        "t_s": 0.0,
        "loadavg": [load1, 1.0, 1.0],
        "procs_running": 2,
        "steal_pct": steal,
        "busy_pct": 50.0,
    }


def _load(*samples: dict) -> dict:
    return {"before": samples[0], "during": list(samples[1:-1]), "after": samples[-1], "interval_s": 5.0}


def _rows_with_reference_samples(samples_ms: list[float]):
    """The sample document with every reference row's latency made of `samples_ms`."""
    doc = copy.deepcopy(sample_doc())
    for row in doc["results"]:
        if row["backend"] == "cpu:onnxruntime" and row["status"] == "ok":
            stats = describe([s / 1000 for s in samples_ms], p99_wanted=False)
            stats["samples"] = list(samples_ms)
            row["latency_ms"] = stats
    return ResultsDocument.from_json(doc).rows


def test_a_quiet_run_is_not_noisy_and_says_why():
    noise = decide(_load(_sample(1.2), _sample(1.9), _sample(1.4)), usable_cores=2, own_load=2)
    assert noise["noisy"] is False and noise["reasons"] == []
    assert (
        noise["headline"] == "this run was quiet: load average at most 1.9 on 2 cores, CPU steal at most 0.0%"
    )


@pytest.mark.parametrize(
    ("peak", "cores", "own", "noisy"),
    [
        (3.0, 2, 2, False),  # exactly the limit: max(2 cores, 2 own + 1)
        (3.1, 2, 2, True),
        (3.9, 4, 1, False),  # more cores than the demand: nothing waited
        (4.1, 4, 1, True),
        (4.5, 2, 4, False),  # the run's own threads make the load
    ],
)
def test_load_is_noise_above_the_cores_and_the_runs_own_load(peak, cores, own, noisy):
    noise = decide(_load(_sample(1.0), _sample(peak), _sample(1.0)), usable_cores=cores, own_load=own)
    assert noise["noisy"] is noisy
    if noisy:
        assert noise["reasons"][0].startswith(f"load average up to {peak:.1f} on {cores} cores")


def test_steal_is_noise_on_average_or_in_one_interval():
    steady = decide(_load(_sample(1, 1.0), _sample(1, 1.5), _sample(1, 2.0)), 2, 2)
    assert steady["noisy"] is False
    mean = decide(_load(_sample(1, 3.0), _sample(1, 2.5), _sample(1, 3.0)), 2, 2)
    assert mean["reasons"] == ["CPU steal 2.8% on average, up to 3.0% (the hypervisor's other guests)"]
    burst = decide(_load(_sample(1, 0.0), _sample(1, 12.0), _sample(1, 0.0)), 2, 2)
    assert burst["noisy"] and "up to 12.0%" in burst["reasons"][0]


def test_reference_spread_from_mad_and_from_drift_between_halves():
    # 40 samples alternating 1.0 and 1.2 ms: median 1.1, MAD 0.1 (9.1% of the median), no drift.
    wobbly = _rows_with_reference_samples([1.0, 1.2] * 20)
    spread = reference_spread(wobbly)
    assert spread["rows"] == 3 and spread["mad_pct_median"] == pytest.approx(100 * 0.1 / 1.1, abs=0.01)
    assert spread["drift_pct_median"] == pytest.approx(0.0)
    noise = decide(None, 2, 2, wobbly)
    assert noise["noisy"] and noise["reasons"][0].startswith("onnxruntime's own latency varied: MAD 9.1%")
    # Steady halves at 1.0 then 1.1 ms: MAD 0.05 of 1.05 (4.8%, within), drift 1/1.1 - 1 (9.1%).
    drifting = _rows_with_reference_samples([1.0] * 20 + [1.1] * 20)
    noise = decide(None, 2, 2, drifting)
    assert noise["reference_spread"]["mad_pct_median"] < USUAL_SPREAD_PCT
    assert noise["reasons"] == [
        "onnxruntime's median moved 9.1% between the halves of its runs (median of the rows; quiet runs "
        "stay within 5%)"
    ]
    steady = _rows_with_reference_samples([1.0, 1.01] * 20)
    assert decide(None, 2, 2, steady)["noisy"] is False


def test_nothing_measured_says_so():
    noise = decide(None, 2, 2, [])
    assert noise == {
        "noisy": False,
        "reasons": [],
        "reference_spread": None,
        "headline": "noise not measured (no /proc load figures and no reference rows)",
        "thresholds": noise["thresholds"],
    }
