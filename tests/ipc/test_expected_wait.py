"""Stretching a polling window over the expected answer (mlts.ipc.expected_wait)."""

from __future__ import annotations

import os
import time

import pytest

from mlts.ipc import expected_wait, socket_polling
from mlts.ipc.expected_wait import (
    BACK_OFF,
    LATE_EASING,
    MAX_LATE_US,
    POLL_PAST_US,
    STRETCH_FACTOR,
    WAKE_LEAD_US,
    ExpectedWait,
)
from mlts.ipc.socket_polling import PollingWindow
from tests.hal.clockkit import FakeClock


def test_stretch_needs_two_waits_within_the_maximum() -> None:
    e = ExpectedWait(1000)
    assert e.stretch() is None  # nothing known yet
    e.record(0.00004)
    assert e.stretch() is None  # one wait is not a pattern
    e.record(0.0003)
    # No sleep (the shorter is within the lead), polling until the longer of the two.
    assert e.stretch() == pytest.approx((0.0, 0.0003))
    e.record(0.005)  # one long wait (a large model, a client thinking) ends it
    assert e.stretch() is None
    e.record(0.0009)
    assert e.stretch() is None
    e.record(0.0008)
    assert e.stretch() == pytest.approx((0.0008 - WAKE_LEAD_US / 1e6, 0.0008 * STRETCH_FACTOR))


def test_naps_that_end_late_lengthen_the_lead() -> None:
    e = ExpectedWait(1000)
    e.record(0.0008)
    e.record(0.0008)
    assert e.stretch() == pytest.approx((0.0008 - WAKE_LEAD_US / 1e6, 0.0008 * STRETCH_FACTOR))
    e.overslept(0.0005, 0.0006)  # a nap 100 µs late: taken at once
    assert e.late == pytest.approx(0.0001)
    # Asleep 100 µs less; polling until the same time.
    assert e.stretch() == pytest.approx((0.0008 - WAKE_LEAD_US / 1e6 - 0.0001, 0.0008 * STRETCH_FACTOR))
    e.overslept(0.0005, 0.00052)  # 20 µs late: an eighth of the way down
    assert e.late == pytest.approx(0.0001 + (0.00002 - 0.0001) * LATE_EASING)
    held = e.late
    e.overslept(0.0005, 0.0004)  # a clock that says it ended early counts as on time
    assert e.late == pytest.approx(held * (1 - LATE_EASING))
    e.overslept(0.0005, 2.0)  # a nap descheduled for seconds adds at most MAX_LATE_US
    assert e.late == pytest.approx(MAX_LATE_US / 1e6)
    assert e.stretch()[0] == pytest.approx(0.0008 - WAKE_LEAD_US / 1e6 - MAX_LATE_US / 1e6)
    e.record(0.0002)
    e.record(0.0002)
    assert e.stretch() == pytest.approx((0.0, 0.0002 * STRETCH_FACTOR))  # never a negative sleep
    assert e.stretches == 4


def test_a_crowded_stretch_backs_off() -> None:
    e = ExpectedWait(1000)
    e.record(0.0002)
    e.record(0.0002)
    assert e.stretch() is not None
    e.back_off()
    assert [e.stretch() for _ in range(BACK_OFF)] == [None] * BACK_OFF
    assert e.stretch() is not None and e.back_offs == 1


def test_zero_maximum_never_stretches() -> None:
    e = ExpectedWait(0)
    for _ in range(3):
        e.record(0.0)
    assert e.stretch() is None


@pytest.mark.parametrize(
    ("raw", "want"),
    [("", 100_000), ("0", 0), ("250", 250), ("x", 100_000), ("99999", 99_999), ("9999999", 1_000_000)],
)
def test_maximum_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, want: int) -> None:
    monkeypatch.setenv(expected_wait.ENV, raw)
    assert expected_wait.stretch_max_us() == want
    # A service's readers stretch over their client's turn, 1 ms by default; the variable sets it too.
    assert expected_wait.stretch_max_us(expected_wait.SERVICE_STRETCH_MAX_US) == (
        1000 if not raw.isdigit() else want
    )


def test_a_long_answer_is_polled_for_a_bounded_time() -> None:
    e = ExpectedWait(100_000)
    e.record(0.030)
    e.record(0.031)  # a large model's calls: 30 ms
    sleep, poll = e.stretch()
    assert sleep == pytest.approx(0.030 - WAKE_LEAD_US / 1e6)
    assert poll == pytest.approx(0.030 + POLL_PAST_US / 1e6)  # not 1.25 x 30 ms
    e.record(0.0004)
    e.record(0.0004)
    assert e.stretch()[1] == pytest.approx(0.0004 * STRETCH_FACTOR)  # a short one: 1.25 times it


class Never:
    """Never readable; records how long each call was allowed to sleep (and sleeps it on `clock`)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.timeouts: list[float] = []

    def __call__(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        if timeout > 0:
            self.clock.sleep(timeout)
        return False


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The windows' clock, 1 µs a reading: how long a wait took is what the test makes it, whatever the
    machine's load."""
    fake = FakeClock(step=1e-6)
    monkeypatch.setattr(socket_polling, "time", fake)
    return fake


@pytest.fixture
def quiet_machine(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> FakeClock:
    """A CPU always to spare and no poll counted as preempted, on the fake clock."""
    monkeypatch.setattr(socket_polling, "cpu_to_spare", lambda: True)
    monkeypatch.setattr(socket_polling, "PREEMPTED_GAP_US", 10**9)
    return clock


def test_socket_window_is_stretched_over_the_expected_answer(quiet_machine: FakeClock) -> None:
    clock = quiet_machine
    w = PollingWindow(100, stretch_max_us=50_000)
    for _ in range(2):  # two answers found after 10 ms of blocking
        w.poll(lambda timeout: False)
        clock.sleep(0.01)
        w.waited()
    never = Never(clock)
    t0 = clock.now
    assert w.poll(never) is False
    # Went on past its 100 µs window, to POLL_PAST_US past the expected answer.
    assert clock.now - t0 >= 0.01 + POLL_PAST_US / 1e6
    # It slept once, at once (its 100 µs window cannot meet a 10 ms answer: no poll first), until
    # shortly before the expected answer, and polled after.
    naps = [t for t in never.timeouts if t > 0]
    assert len(naps) == 1 and naps[0] == pytest.approx(0.01 - WAKE_LEAD_US / 1e6, abs=0.00001)
    assert never.timeouts[0] == naps[0] and never.timeouts[-1] == 0
    # Without a maximum the same history turns polling off (those waits were long for a 100 µs window).
    plain = PollingWindow(100)
    for _ in range(2):
        plain.poll(lambda timeout: False)
        clock.sleep(0.01)
        plain.waited()
    never = Never(clock)
    assert plain.poll(never) is False and never.timeouts == []


class LateTimer(Never):
    """Each sleep ends `late` seconds after it was asked to (a virtual machine's timer); the answer is
    there at the first look after a sleep."""

    def __init__(self, clock: FakeClock, late: float) -> None:
        super().__init__(clock)
        self.late = late

    def __call__(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        if timeout > 0:
            self.clock.sleep(timeout + self.late)
            return False
        return any(t > 0 for t in self.timeouts)


def test_a_socket_window_wakes_earlier_when_its_naps_end_late(quiet_machine: FakeClock) -> None:
    clock = quiet_machine
    w = PollingWindow(100, stretch_max_us=50_000)
    for _ in range(2):  # two answers after 10 ms
        w.poll(lambda timeout: False)
        clock.sleep(0.01)
        w.waited()
    timer = LateTimer(clock, 0.00008)
    assert w.poll(timer) is True  # found by the poll after the nap
    first = [t for t in timer.timeouts if t > 0]
    assert len(first) == 1 and first[0] == pytest.approx(0.01 - WAKE_LEAD_US / 1e6, abs=0.00001)
    assert w.expected.late == pytest.approx(0.00008, abs=0.000005)
    timer.timeouts.clear()
    assert w.poll(timer) is True
    # The next nap ends the 80 µs the timer added earlier, so it wakes WAKE_LEAD_US before the answer.
    second = [t for t in timer.timeouts if t > 0]
    assert len(second) == 1 and second[0] == pytest.approx(first[0] - 0.00008, abs=0.00001)


def test_an_answer_during_the_sleep_ends_the_wait(quiet_machine: FakeClock) -> None:
    w = PollingWindow(100, stretch_max_us=50_000)
    for _ in range(2):
        w.poll(lambda timeout: False)
        quiet_machine.sleep(0.01)
        w.waited()
    calls: list[float] = []

    def wakes(timeout: float) -> bool:
        calls.append(timeout)
        return timeout > 0  # the answer comes while asleep

    assert w.poll(wakes) is True and calls[-1] > 0


def test_an_answer_found_while_polling_is_remembered(clock: FakeClock) -> None:
    w = PollingWindow(200_000, stretch_max_us=1000)
    calls = iter([False] * 3 + [True] + [False] * 3 + [True])
    for _ in range(2):
        assert w.poll(lambda timeout: next(calls)) is True
    stretch = w.expected.stretch()
    assert stretch is not None and 0 < stretch[1] < 0.001 * STRETCH_FACTOR


def test_nap_sleeps_with_a_fine_timer_and_restores_the_slack() -> None:
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    before = prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK
    seen: list[int] = []

    def wait(timeout: float) -> bool:
        seen.append(prctl(30, 0, 0, 0, 0))
        time.sleep(timeout)
        return False

    assert expected_wait.nap(wait, 0.0002) is False
    assert seen == [1000]  # 1 µs while asleep
    assert prctl(30, 0, 0, 0, 0) == before


@pytest.mark.parametrize(
    ("text", "spare"),
    [(b"0.5 0.4 0.3 1/80 99\n", True), (b"2.0 1.0 1.0 3/80 99\n", False), (b"garbage", True)],
)
def test_cpu_to_spare_reads_the_runnable_threads(monkeypatch, tmp_path, text: bytes, spare: bool) -> None:
    path = tmp_path / "loadavg"
    path.write_bytes(text)
    fd = os.open(path, os.O_RDONLY)
    try:
        monkeypatch.setattr(expected_wait, "_LOADAVG", fd)
        monkeypatch.setattr(expected_wait, "_CPUS", 2)
        assert expected_wait.cpu_to_spare() is spare
    finally:
        os.close(fd)


def test_a_crowded_machine_ends_the_stretch(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    monkeypatch.setattr(socket_polling, "cpu_to_spare", lambda: False)
    w = PollingWindow(100, stretch_max_us=50_000)
    for _ in range(2):
        w.poll(lambda timeout: False)
        clock.sleep(0.005)
        w.waited()
    never = Never(clock)
    assert w.poll(never) is False
    assert w.expected.back_offs == 1 and never.timeouts[-1] > 0  # slept, then found no CPU to spare
    never = Never(clock)
    assert w.poll(never) is False and not [t for t in never.timeouts if t > 0]  # backing off: no sleep


def test_a_window_is_skipped_only_after_two_waits_that_outlasted_it() -> None:
    e = ExpectedWait(1000)
    assert not e.expects_after(0.0001)  # nothing known yet
    e.record(0.0009)
    assert not e.expects_after(0.0001)  # one wait is not a pattern
    e.record(0.00016)  # both at least the 100 µs window plus the 50 µs lead
    assert e.expects_after(0.0001)
    e.record(0.00014)
    assert not e.expects_after(0.0001)  # within window + lead: the window may meet it
    assert ExpectedWait(0).expects_after(0.0) is False  # nothing recorded


def test_a_reader_without_a_stretch_skips_a_window_its_answers_outlast(quiet_machine: FakeClock) -> None:
    clock = quiet_machine
    w = PollingWindow(100)  # no stretch
    for _ in range(2):  # two answers after 200 µs of blocking: short waits for rule 1 (<= 3 windows)
        w.poll(lambda timeout: False)
        clock.sleep(0.0002)
        w.waited()
    never = Never(clock)
    assert w.poll(never) is False and never.timeouts == []  # blocks at once: no poll at all


def test_an_answer_expected_within_the_window_is_polled_for_from_the_start(quiet_machine: FakeClock) -> None:
    clock = quiet_machine
    w = PollingWindow(100, stretch_max_us=1000)
    for _ in range(2):  # two answers found by the window after 80 µs
        assert w.poll(lambda timeout: clock.sleep(0.00008) is None)
    never = Never(clock)
    t0 = clock.now
    assert w.poll(never) is False
    # The window was polled (no sleep: the stretch's sleep would begin within the window), then the
    # stretch polled on to 1.25 times the expected answer; nothing ever slept.
    assert never.timeouts and all(t == 0 for t in never.timeouts)
    assert clock.now - t0 >= 0.0001


def test_a_nap_shorter_than_the_lead_is_not_taken_and_the_poll_covers_the_longer_wait() -> None:
    e = ExpectedWait(1000)
    e.record(0.00015)
    e.record(0.00015)
    assert e.stretch() == pytest.approx((0.00015 - WAKE_LEAD_US / 1e6, 0.00015 * STRETCH_FACTOR))
    e.overslept(0.0001, 0.0002)  # naps end 100 µs late: the lead is 150 µs, as long as the wait
    assert e.stretch() == pytest.approx((0.0, 0.00015 * STRETCH_FACTOR))  # polls from the start
    # A peer whose turn is sometimes 200 µs, sometimes 500 µs: polled for until the longer.
    e.record(0.0002)
    e.record(0.0005)
    assert e.stretch() == pytest.approx((0.0, 0.0005))
