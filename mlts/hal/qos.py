"""Quality of service shared by drivers and the service: deadlines, client identity and priority preemption.

NNAPI's priority is relative to the same client's other prepared models. A driver served by
`mlts.ipc.service` learns which connection a call comes from through `current_client()` (the service
sets it around every call it hands to the driver; in-process callers are client 0).

`PriorityGate` is how a driver preempts: every running execution holds a ticket, and at each
checkpoint (between operations) an execution waits while an execution of the same client with a
higher priority is running. The paused execution keeps its operation index and intermediate values
where they are and resumes from there: nothing done is lost, and a low-priority execution that is
preempted again and again still finishes once the high-priority work stops (a restart would throw
its work away each time). Executions of other clients are never paused by this client's priorities.
Inside `holding_tickets()` (the service wraps it around an execution and its reply) a ticket is left
only when the block ends.

`checkpoint()` builds the callable an executor calls before every operation: it answers
MISSED_DEADLINE_TRANSIENT once the deadline has passed (mlts.hal.deadlines), and waits out preemption
(a paused execution still ends at its deadline). Burst and other execution paths call the same function.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mlts.hal import deadlines
from mlts.hal.deadlines import TimePoint

_CLIENT: contextvars.ContextVar[int] = contextvars.ContextVar("mlts_client", default=0)

Checkpoint = Callable[[int], None]


def current_client() -> int:
    """The identity of the connection the current call came from (0: an in-process caller)."""
    return _CLIENT.get()


@contextlib.contextmanager
def serving_client(client: int) -> Iterator[None]:
    """Calls made inside this block act for `client` (what the service wraps around driver calls)."""
    token = _CLIENT.set(client)
    try:
        yield
    finally:
        _CLIENT.reset(token)


@dataclass(eq=False, slots=True)
class Ticket:
    """One running execution, as the gate knows it; called with an operation index, it is the
    checkpoint of an execution without a deadline (`checkpoint(None, gate, ticket)`)."""

    client: int
    priority: int
    serial: int
    paused: int = 0  # how often it waited for a higher-priority execution
    gate: PriorityGate | None = None  # the gate that issued it

    def __call__(self, index: int) -> None:
        gate = self.gate
        # `wait_turn`'s lock-free test, inlined: it runs before every operation.
        if gate is not None and gate.enabled and gate._top.get(self.client, self.priority) > self.priority:
            gate.wait_turn(self, None, index)


_HELD: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "mlts_held_tickets", default=None
)


@contextlib.contextmanager
def holding_tickets() -> Iterator[list[Callable[[], None]]]:
    """Tickets left inside this block are left only when it ends (the service wraps it around an
    execution and the write of its reply, so the client's lower-priority executions stay paused until
    the reply is on its way instead of competing with its encoding and sending).

    The block gets the list of the leaves held so far: a thread that answers one execution after
    another inside one block (a burst's listener) leaves them with `leave_held` after each reply.
    """
    held: list[Callable[[], None]] = []
    token = _HELD.set(held)
    try:
        yield held
    finally:
        _HELD.reset(token)
        leave_held(held)


def leave_held(held: list[Callable[[], None]]) -> None:
    """Leave the tickets held in `held` (from `holding_tickets`) now, in the order they were left."""
    pending = held.copy()
    held.clear()
    for release in pending:
        release()


class PriorityGate:
    """Lets a running execution wait at its checkpoints while a higher-priority one of its client runs.

    `_top[client]` is the highest priority among the client's running executions. A checkpoint reads
    it without the lock (one dict lookup): only an execution that is outranked takes the lock and waits.
    `leave` wakes waiters only when there are some and the client's highest priority went down.
    """

    def __init__(self) -> None:
        # A plain lock under the condition: `with self._lock` is one C call, where entering the
        # Condition itself goes through Python code (enter and leave run once per execution).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._running: dict[int, dict[int, int]] = {}  # client -> priority -> count
        self._top: dict[int, int] = {}  # client -> highest running priority
        self._waiting = 0  # executions waiting in wait_turn
        self._serial = itertools.count(1)
        self.enabled = True
        self.pauses = 0  # how often an execution waited for a higher-priority one

    def enter(self, priority: int, client: int | None = None) -> Ticket:
        if client is None:
            client = _CLIENT.get()
        if type(priority) is not int:
            priority = int(priority)
        ticket = Ticket(client, priority, next(self._serial), 0, self)
        # acquire/release rather than `with`: one execution enters and leaves once, and the `with`
        # statement's method lookups cost more than the dictionary work it guards.
        lock = self._lock
        lock.acquire()
        try:
            counts = self._running.get(client)
            if counts is None:
                self._running[client] = {priority: 1}
                self._top[client] = priority
            else:
                counts[priority] = counts.get(priority, 0) + 1
                if priority > self._top.get(client, priority - 1):
                    self._top[client] = priority
        finally:
            lock.release()
        return ticket

    def leave(self, ticket: Ticket) -> None:
        held = _HELD.get()
        if held is not None:
            held.append(lambda: self._leave(ticket))
            return
        self._leave(ticket)

    def _leave(self, ticket: Ticket) -> None:
        client, priority = ticket.client, ticket.priority
        lock = self._lock
        lock.acquire()
        try:
            counts = self._running.get(client, {})
            left = counts[priority] - 1
            if left:
                counts[priority] = left
                return  # another execution of this priority still runs: the top stays
            del counts[priority]
            top = self._top.get(client)
            if not counts:
                del self._running[client]
                self._top.pop(client, None)
            elif top == priority:
                self._top[client] = max(counts)
            if self._waiting and self._top.get(client) != top:
                self._cond.notify_all()
        finally:
            lock.release()

    @contextlib.contextmanager
    def running(self, priority: int) -> Iterator[Ticket]:
        ticket = self.enter(priority)
        try:
            yield ticket
        finally:
            self.leave(ticket)

    def _outranked(self, ticket: Ticket) -> bool:
        return self._top.get(ticket.client, ticket.priority) > ticket.priority

    def wait_turn(self, ticket: Ticket, deadline: TimePoint | None, index: int) -> None:
        """Return once no higher-priority execution of the ticket's client runs (or fail at the deadline)."""
        # The lock-free fast path (`_outranked` inlined: it runs before every operation).
        if not self.enabled or self._top.get(ticket.client, ticket.priority) <= ticket.priority:
            return
        with self._cond:
            if not self._outranked(ticket):
                return
            ticket.paused += 1
            self.pauses += 1
            self._waiting += 1
            try:
                while self._outranked(ticket):
                    if deadline is None:
                        self._cond.wait(1.0)
                        continue
                    left = (deadline - time.monotonic_ns()) / 1e9
                    if left <= 0:
                        raise deadlines.missed(
                            f"before operation {index} while a higher-priority execution ran"
                        )
                    self._cond.wait(left)
            finally:
                self._waiting -= 1

    def running_count(self) -> int:
        with self._cond:
            return sum(sum(c.values()) for c in self._running.values())


def checkpoint(
    deadline: TimePoint | None, gate: PriorityGate | None = None, ticket: Ticket | None = None
) -> Checkpoint | None:
    """What an executor calls before every operation: deadline check, then preemption."""
    if gate is not None and ticket is not None and not gate.enabled:
        gate = None
    if deadline is None and (gate is None or ticket is None):
        return None
    if deadline is None:
        assert gate is not None and ticket is not None
        return ticket if ticket.gate is gate else functools.partial(gate.wait_turn, ticket, None)

    def check(index: int) -> None:
        if time.monotonic_ns() > deadline:
            raise deadlines.missed(f"before operation {index}")
        if gate is not None and ticket is not None:
            gate.wait_turn(ticket, deadline, index)

    return check
