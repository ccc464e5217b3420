"""The run lengths of a full and a quick benchmark, and options that override them."""

from __future__ import annotations

from mlts.bench.runner import BenchmarkConfig, run_lengths


def test_full_run_lengths_are_mltss_defaults():
    assert run_lengths(False) == {
        "warmup_s": 2.0,
        "duration_s": 10.0,
        "compile_max_seconds": 10.0,
        "sequences": 50,
        "early_stop": False,
    }


def test_quick_run_is_shorter_in_every_length():
    full, quick = run_lengths(False), run_lengths(True)
    assert quick == {
        "warmup_s": 0.3,
        "duration_s": 1.0,
        "compile_max_seconds": 0.3,
        "sequences": 10,
        "early_stop": True,
    }
    assert all(quick[k] < full[k] for k in full if k != "early_stop")


def test_given_lengths_win_over_quick_and_zero_is_given():
    got = run_lengths(True, warmup_s=0.0, duration_s=5.0, compile_seconds=2.0, sequences=50)
    assert got == {
        "warmup_s": 0.0,
        "duration_s": 5.0,
        "compile_max_seconds": 2.0,
        "sequences": 50,
        "early_stop": True,
    }
    assert BenchmarkConfig(quick=True, **got).sequences == 50
