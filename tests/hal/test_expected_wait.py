"""Stretching a polling window over the expected answer (mlts.hal.expected_wait)."""

from __future__ import annotations

import time

import pytest

from mlts.hal import expected_wait
from mlts.hal.expected_wait import STRETCH_FACTOR, ExpectedWait
from mlts.hal.socket_polling import PollingWindow


def test_stretch_needs_two_waits_within_the_maximum() -> None:
    e = ExpectedWait(1000)
    assert e.stretch() == 0.0  # nothing known yet
    e.record(0.0002)
    assert e.stretch() == 0.0  # one wait is not a pattern
    e.record(0.0003)
    assert e.stretch() == pytest.approx(0.0002 * STRETCH_FACTOR)  # the shorter of the two
    e.record(0.005)  # one long wait (a large model, a client thinking) ends it
    assert e.stretch() == 0.0
    e.record(0.0001)
    assert e.stretch() == 0.0
    e.record(0.0004)
    assert e.stretch() == pytest.approx(0.0001 * STRETCH_FACTOR)


def test_zero_maximum_never_stretches() -> None:
    e = ExpectedWait(0)
    for _ in range(3):
        e.record(0.0)
    assert e.stretch() == 0.0


@pytest.mark.parametrize(
    ("raw", "want"), [("", 1000), ("0", 0), ("250", 250), ("x", 1000), ("99999", 10_000)]
)
def test_maximum_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, want: int) -> None:
    monkeypatch.setenv(expected_wait.ENV, raw)
    assert expected_wait.stretch_max_us() == want


class Never:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, timeout: float) -> bool:
        assert timeout == 0
        self.calls += 1
        return False


def test_socket_window_is_stretched_over_the_expected_answer() -> None:
    w = PollingWindow(100, stretch_max_us=50_000)
    for _ in range(2):  # two answers found after about 10 ms of blocking
        w.poll(lambda timeout: False)
        time.sleep(0.01)
        w.waited()
    t0 = time.perf_counter()
    assert w.poll(Never()) is False
    assert time.perf_counter() - t0 >= 0.01 * STRETCH_FACTOR  # polled past its 100 µs window
    # Without a maximum the same history turns polling off (those waits were long for a 100 µs window).
    plain = PollingWindow(100)
    for _ in range(2):
        plain.poll(lambda timeout: False)
        time.sleep(0.01)
        plain.waited()
    never = Never()
    assert plain.poll(never) is False and never.calls == 0


def test_an_answer_found_while_polling_is_remembered() -> None:
    w = PollingWindow(200_000, stretch_max_us=1000)
    calls = iter([False] * 3 + [True] + [False] * 3 + [True])
    for _ in range(2):
        assert w.poll(lambda timeout: next(calls)) is True
    assert 0 < w.expected.stretch() < 0.001 * STRETCH_FACTOR
