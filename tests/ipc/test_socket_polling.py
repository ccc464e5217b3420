"""The adaptive polling window before a blocking socket read (mlts.ipc.socket_polling)."""

from __future__ import annotations

import socket

import pytest

from mlts.ipc import socket_polling, wire
from mlts.ipc.burst_ring import EMPTY_WINDOWS_BEFORE_PROBING, PROBE_EVERY
from mlts.ipc.socket_polling import PollingWindow
from tests.hal.clockkit import FakeClock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The windows' clock, 1 µs a reading: how long a wait took is what the test makes it, whatever the
    machine's load."""
    fake = FakeClock(step=1e-6)
    monkeypatch.setattr(socket_polling, "time", fake)
    return fake


class Readable:
    """A readable check that answers True from its `ready_after`-th call on, counting calls."""

    def __init__(self, ready_after: int | None) -> None:
        self.ready_after = ready_after
        self.calls = 0

    def __call__(self, timeout: float) -> bool:
        assert timeout == 0, "the polling window never blocks"
        self.calls += 1
        return self.ready_after is not None and self.calls >= self.ready_after


def test_answer_within_the_window_is_found_without_blocking(clock: FakeClock) -> None:
    w = PollingWindow(50_000)
    ready = Readable(3)
    assert w.poll(ready) is True
    assert ready.calls == 3


def test_window_is_bounded_and_polls_repeatedly(clock: FakeClock) -> None:
    w = PollingWindow(2_000)  # 2 ms
    never = Readable(None)
    t0 = clock.now
    assert w.poll(never) is False
    elapsed = clock.now - t0
    assert 0.002 <= elapsed < 0.002 + 10e-6  # to the end of the window, and not a turn more
    assert never.calls > 1


def test_zero_window_and_not_allowed_never_poll() -> None:
    for w, allowed in ((PollingWindow(0), True), (PollingWindow(50), False)):
        ready = Readable(1)
        assert w.poll(ready, allowed) is False
        assert ready.calls == 0


def test_a_long_wait_turns_polling_off_until_a_short_one(clock: FakeClock) -> None:
    w = PollingWindow(1_000)  # 1 ms window: "long" is past 3 ms
    w.poll(Readable(None))
    clock.sleep(w.long + 0.01)
    w.waited()  # a long execution
    ready = Readable(1)
    assert w.poll(ready) is False and ready.calls == 0
    w.waited()  # this wait was short (nothing slept)
    assert w.poll(ready) is True


def test_empty_windows_in_a_row_poll_only_every_few_waits(clock: FakeClock) -> None:
    w = PollingWindow(200)
    for _ in range(EMPTY_WINDOWS_BEFORE_PROBING):
        assert w.poll(Readable(None)) is False
        w.waited()
    polled = []
    for _ in range(3 * PROBE_EVERY):
        probe = Readable(None)
        w.poll(probe)
        w.waited()
        polled.append(probe.calls > 0)
    assert polled.count(True) == 3
    # A window that finds the answer resumes polling on every wait.
    while not w.poll(Readable(1)):
        w.waited()
    for _ in range(3):
        probe = Readable(1)
        assert w.poll(probe) is True


@pytest.mark.parametrize(
    ("raw", "want"), [("", 77), ("0", 0), ("120", 120), ("abc", 77), ("-5", 77), ("99999", 10_000)]
)
def test_window_from_the_environment(monkeypatch: pytest.MonkeyPatch, raw: str, want: int) -> None:
    monkeypatch.setenv(socket_polling.ENV, raw)
    assert socket_polling.window_us(77) == want


def test_polls_a_real_socket() -> None:
    a, b = socket.socketpair()
    with a, b:
        readable = wire.Readable(a)
        w = PollingWindow(20_000)
        assert w.poll(readable) is False
        b.send(b"x")
        assert w.poll(readable) is True
