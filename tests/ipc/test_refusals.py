"""Refusals are logged in aggregate (one full line, then one summary a window), and token guesses are
braked per user. A fake clock makes every timing exact."""

from __future__ import annotations

import logging

import pytest

from mlts.ipc.peer import Peer
from mlts.ipc.service.memory_trim import Trimmer
from mlts.ipc.service.refusals import GuessBrake, RefusalLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def records():
    logger = logging.getLogger("test.refusals")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    yield logger, got
    logger.removeHandler(handler)


def test_thousands_of_refusals_write_two_lines_a_minute(records):
    logger, lines = records
    clock = Clock()
    log = RefusalLog(clock=clock, logger=logger)
    peer = Peer(4242, 1000, 1000, "/usr/bin/python3")
    assert log.note(peer, "bufferCopyTo: INVALID_ARGUMENT: buffer token 1 is not a live buffer") is True
    for n in range(4229):
        clock.now += 0.01
        assert log.note(peer, f"bufferCopyTo: INVALID_ARGUMENT: buffer token {n + 2} is not ...") is False
    assert lines == [
        "refused a call of client pid 4242 uid 1000: bufferCopyTo: INVALID_ARGUMENT: buffer token 1 is not a live buffer"
    ]
    clock.now += 30.0  # the window (a minute from the first refusal) is over
    log.flush()
    assert len(lines) == 2
    assert lines[1] == (
        "4230 refusals from pid 4242 uid 1000 in the last minute "
        "(last: bufferCopyTo: INVALID_ARGUMENT: buffer token 4230 is not ...)"
    )
    assert log.total == 4230
    log.flush()
    assert len(lines) == 2  # nothing more to say


def test_each_process_has_its_own_window_and_a_leaving_client_is_summed_up_at_once(records):
    logger, lines = records
    clock = Clock()
    log = RefusalLog(clock=clock, logger=logger)
    a, b = Peer(1, 1000), Peer(2, 1000)
    for _ in range(3):
        log.note(a, "x")
        log.note(b, "y")
    assert len(lines) == 2  # the first of each
    log.flush(pid=1)  # client 1 disconnected
    assert lines[2] == "3 refusals from pid 1 uid 1000 in the last minute (last: x)"
    log.flush(pid=2)
    assert len(lines) == 4
    log.note(a, "z")  # a new window
    assert lines[4].endswith(": z") and len(lines) == 5


def test_a_single_refusal_is_not_repeated_in_a_summary(records):
    logger, lines = records
    clock = Clock()
    log = RefusalLog(clock=clock, logger=logger)
    log.note(Peer(7, 0), "only one")
    clock.now += 61
    log.flush()
    assert lines == ["refused a call of client pid 7 uid 0: only one"]


def test_guesses_are_braked_to_the_rate_after_a_burst():
    clock = Clock()
    brake = GuessBrake(burst=4, rate=2.0, clock=clock)
    assert [brake.charge(1000) for _ in range(4)] == [0.0, 0.0, 0.0, 0.0]
    assert brake.charge(1000) == pytest.approx(0.5)  # one token short: half a second at 2 a second
    clock.now += 0.5  # the guesser waited as told
    assert brake.charge(1000) == pytest.approx(0.5)
    assert brake.charge(0) == 0.0  # another user has a bucket of its own
    clock.now += 100.0
    assert brake.charge(1000) == 0.0  # refilled, up to the burst only
    assert [brake.charge(1000) > 0 for _ in range(4)] == [False, False, False, True]


def test_a_guess_never_waits_longer_than_the_cap():
    clock = Clock()
    brake = GuessBrake(burst=1, rate=1.0, clock=clock)
    waits = [brake.charge(5) for _ in range(100)]  # a hundred connections guessing at once
    assert max(waits) == pytest.approx(5.0)


def test_the_trimmer_trims_when_the_last_client_leaves_and_at_most_once_a_second_before():
    clock = Clock()
    trimmer = Trimmer(clock=clock)
    trimmer.client_left(3)
    assert trimmer.trims == 1
    clock.now += 0.2
    trimmer.client_left(2)
    assert trimmer.trims == 1
    trimmer.client_left(0)  # nobody left: always
    assert trimmer.trims == 2
    clock.now += 1.5
    trimmer.client_left(1)
    assert trimmer.trims == 3
