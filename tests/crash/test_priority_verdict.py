"""priority-stress's verdict from its measurements: protected, or the work shifted to A within the goal.

Hand-made phases stand for what a driver does: one that ignores priorities treats A at HIGH and at
MEDIUM alike (the same latency, B's progress the same); one that honours them either protects A
outright or, when the load barely slows A even at MEDIUM, holds B back while A runs.
"""

from __future__ import annotations

import pytest

from mlts.crash.outcome import StressFailure
from mlts.crash.priority_mode import judge


def ms(value: float, n: int = 50) -> list[float]:
    return [value / 1000] * n


def progress(low: int, medium: int, seconds: float = 1.0) -> dict[str, list]:
    return {"low": [low, seconds], "medium": [medium, seconds]}


def test_a_protected_outright_passes():
    d = judge({}, ms(1.0), ms(1.2), ms(3.0), progress(400, 400))
    assert d["protected"] and d["ratio_with_priorities"] == pytest.approx(1.2)


def test_a_driver_that_treats_both_phases_alike_fails_even_within_the_goal():
    # The load on another core: A barely slowed in both phases, B's progress the same.
    with pytest.raises(StressFailure, match="priorities made no difference") as e:
        judge({"model_a": "m", "model_b": "m"}, ms(1.0), ms(1.15), ms(1.2), progress(500, 500))
    d = e.value.details
    assert d["within_goal"] and not d["protected"]
    assert d["shift_to_a"] == pytest.approx(1.2 / 1.15)
    assert "shifted 1.04x" in str(e.value)


def test_b_held_back_while_a_meets_the_goal_passes():
    # A 1.15 ms at HIGH against 1.5 ms at MEDIUM (not 30% better), B at half its MEDIUM progress.
    d = judge({}, ms(1.0), ms(1.15), ms(1.5), progress(250, 500))
    assert not d["protected"] and d["within_goal"]
    assert d["shift_to_a"] == pytest.approx((1.5 / 1.15) * 2)
    assert d["a_per_s_high"] == pytest.approx(1000 / 1.15)
    assert d["b_per_s_vs_a_high"] == 250 and d["b_per_s_vs_a_medium"] == 500


def test_b_held_back_does_not_excuse_a_missing_the_goal():
    with pytest.raises(StressFailure):
        judge({}, ms(1.0), ms(2.4), ms(3.0), progress(100, 500))


def test_a_small_shift_within_the_goal_fails():
    # 1.1x from A and 1.2x from B: 1.32x, below the 1.5x asked.
    with pytest.raises(StressFailure) as e:
        judge({}, ms(1.0), ms(1.2), ms(1.32), progress(500, 600))
    assert e.value.details["shift_to_a"] == pytest.approx(1.32, rel=1e-6)


def test_b_starved_outright_is_an_unbounded_shift():
    d = judge({}, ms(1.0), ms(1.3), ms(1.4), progress(0, 300))
    assert d["shift_to_a"] is None and not d["protected"]


def test_the_thresholds_are_parameters():
    with pytest.raises(StressFailure):
        judge({}, ms(1.0), ms(1.15), ms(1.5), progress(250, 500), min_shift=3.0)
    assert judge({}, ms(1.0), ms(1.15), ms(1.5), progress(500, 500), min_gain=0.2)["protected"]
