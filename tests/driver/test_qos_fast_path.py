"""The priority gate's fast path: an execution alone in its scope enters and leaves without the scope's
dictionaries, and the next one to enter makes it an ordinary running execution first (mlts.hal.qos).

Every interleaving here is forced by explicit synchronisation (events, the gate's public pause count),
not by sleeping and hoping."""

from __future__ import annotations

import ctypes
import sys
import threading

from mlts.hal import qos
from mlts.hal.enums import Priority


def _word(ticket: qos.Ticket) -> int:
    return ctypes.c_int64.from_address(ticket.word_address).value


def _wait_for_pauses(gate: qos.PriorityGate, n: int) -> None:
    """Block until `n` executions have started waiting at the gate (bounded: fails after 5 s)."""
    for _ in range(5000):
        if gate.pauses >= n:
            return
        threading.Event().wait(0.001)
    raise AssertionError(f"no execution paused at the gate ({gate.pauses} of {n})")


def _checkpoint_in_thread(ticket: qos.Ticket, index: int) -> tuple[threading.Thread, threading.Event]:
    passed = threading.Event()

    def run() -> None:
        ticket(index)  # the checkpoint of an execution without a deadline
        passed.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, passed


def test_an_execution_alone_holds_the_word_and_counts_as_running() -> None:
    gate = qos.PriorityGate()
    ticket = gate.enter(Priority.MEDIUM, client=3)
    assert (ticket.client, ticket.priority, ticket.paused) == (3, int(Priority.MEDIUM), 0)
    assert _word(ticket) == Priority.MEDIUM and gate.running_count() == 1
    assert qos.watch(ticket) == (ticket.word_address, int(Priority.MEDIUM), -1)
    assert not ticket.outranked()
    ticket(0)  # nothing outranks it: returns at once
    gate.leave(ticket)
    assert _word(ticket) == qos.NOTHING_RUNNING and gate.running_count() == 0 and gate.pauses == 0


def test_a_higher_execution_entering_beside_one_alone_pauses_it_until_it_leaves() -> None:
    gate = qos.PriorityGate()
    low = gate.enter(Priority.LOW, client=1)  # alone: the fast path
    high = gate.enter(Priority.HIGH, client=2)  # makes `low` an ordinary running execution first
    assert gate.running_count() == 2 and _word(low) == Priority.HIGH and low.outranked()
    thread, passed = _checkpoint_in_thread(low, 7)
    _wait_for_pauses(gate, 1)
    assert not passed.is_set() and low.paused == 1
    gate.leave(high)
    assert passed.wait(5)
    thread.join(5)
    assert _word(low) == Priority.LOW
    gate.leave(low)
    assert gate.running_count() == 0 and _word(low) == qos.NOTHING_RUNNING


def test_a_lower_execution_entering_beside_one_alone_waits_for_it_to_leave() -> None:
    gate = qos.PriorityGate()
    high = gate.enter(Priority.HIGH, client=1)  # alone
    low = gate.enter(Priority.LOW, client=2)
    assert low.outranked() and not high.outranked() and _word(high) == Priority.HIGH
    thread, passed = _checkpoint_in_thread(low, 0)
    _wait_for_pauses(gate, 1)
    assert not passed.is_set()
    gate.leave(high)  # the once-alone execution leaves by the ordinary path and wakes the waiter
    assert passed.wait(5)
    thread.join(5)
    gate.leave(low)
    assert gate.running_count() == 0 and _word(low) == qos.NOTHING_RUNNING


def test_a_left_ticket_is_filled_in_again_for_the_next_execution_alone() -> None:
    gate = qos.PriorityGate()
    first = gate.enter(Priority.HIGH, client=1)
    other = gate.enter(Priority.LOW, client=1)
    thread, passed = _checkpoint_in_thread(other, 0)
    _wait_for_pauses(gate, 1)
    gate.leave(first)
    assert passed.wait(5)
    thread.join(5)
    gate.leave(other)  # `other` paused once; it left by the ordinary path
    alone = gate.enter(Priority.MEDIUM, client=4)
    gate.leave(alone)
    again = gate.enter(Priority.LOW, client=5)
    # The same object may come back, but it describes the new execution only.
    assert (again.client, again.priority, again.paused) == (5, int(Priority.LOW), 0)
    assert again.serial > alone.serial or again is alone
    assert _word(again) == Priority.LOW
    gate.leave(again)


def test_a_held_leave_of_an_execution_alone_keeps_it_running_until_the_block_ends() -> None:
    gate = qos.PriorityGate()
    with qos.holding_tickets():
        alone = gate.enter(Priority.HIGH, client=1)
        gate.leave(alone)  # held: still running
        assert gate.running_count() == 1 and _word(alone) == Priority.HIGH
        low = gate.enter(Priority.LOW, client=1)  # makes it ordinary: `low` is outranked
        assert low.outranked()
        thread, passed = _checkpoint_in_thread(low, 2)
        _wait_for_pauses(gate, 1)
        assert not passed.is_set()
    assert passed.wait(5)  # the block's end left the HIGH ticket
    thread.join(5)
    assert gate.running_count() == 1 and _word(low) == Priority.LOW
    gate.leave(low)
    with qos.holding_tickets():
        alone = gate.enter(Priority.MEDIUM, client=2)
        gate.leave(alone)
        assert gate.running_count() == 1
    assert gate.running_count() == 0 and _word(alone) == qos.NOTHING_RUNNING


def test_a_client_scoped_gate_keeps_its_ordinary_path() -> None:
    gate = qos.PriorityGate(qos.SCOPE_CLIENT)
    a = gate.enter(Priority.LOW, client=1)
    b = gate.enter(Priority.HIGH, client=2)
    assert not a.outranked() and a.word_address != b.word_address
    gate.leave(a)
    gate.leave(b)
    assert gate.running_count() == 0


def test_threads_entering_and_leaving_together_never_share_a_ticket_and_leave_nothing_behind() -> None:
    gate = qos.PriorityGate()
    rounds, threads = 1500, 3
    live: set[int] = set()
    live_lock = threading.Lock()
    errors: list[str] = []
    start = threading.Barrier(threads)
    priorities = (Priority.LOW, Priority.MEDIUM, Priority.HIGH)

    def worker(n: int) -> None:
        start.wait()
        for i in range(rounds):
            priority = priorities[(n + i) % 3]
            ticket = gate.enter(priority, client=n)
            with live_lock:
                if id(ticket) in live:
                    errors.append("a ticket handed to two running executions")
                live.add(id(ticket))
            if ticket.priority != priority or ticket.client != n:
                errors.append("a ticket describing another execution")
            if _word(ticket) < ticket.priority:
                errors.append("the word below a running execution's priority")
            ticket(i)  # may wait for a higher one: every higher one leaves
            with live_lock:
                live.discard(id(ticket))
            gate.leave(ticket)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        workers = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
    finally:
        sys.setswitchinterval(before)
    assert not any(w.is_alive() for w in workers)
    assert errors == []
    assert gate.running_count() == 0
    final = gate.enter(Priority.LOW)
    assert _word(final) == Priority.LOW
    gate.leave(final)
    assert _word(final) == qos.NOTHING_RUNNING
