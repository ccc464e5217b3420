"""Quality of service shared by drivers and the service: deadlines, client identity and priority preemption.

A driver served by `mlts.ipc.service` learns who a call comes from through `current_client()` (the
connection: what its buffers and quotas are counted against) and `current_app()` (the program behind
it, as the kernel reports it: uid and executable, so two connections of one program are one app); the
service sets both around every call it hands to the driver; in-process callers are client and app 0.

`PriorityGate` is how a driver preempts: every running execution holds a ticket, and at each
checkpoint (between operations) an execution waits while an execution with a higher priority is
running, whichever client it came from (seed 002: higher-priority executions may preempt or starve
lower-priority ones; clients of equal priority are not paused for each other). A gate made with
`scope="client"` compares an execution only with its own connection's (what a driver that ignores
other clients' priorities does). The paused execution keeps its operation index and intermediate
values where they are and resumes from there: nothing done is lost, and a low-priority execution
that is preempted again and again still finishes once the high-priority work stops (a restart would
throw its work away each time). Inside `holding_tickets()` (the service wraps it around an execution
and its reply) a ticket is left only when the block ends.

Each ticket also names a machine word (`Ticket.word_address`) holding the highest priority running
in its scope, kept current by the gate: compiled code may compare it with the ticket's priority
between calls and stop early when it is outranked (driver.bound_steps), so preemption needs no
Python checkpoint call inside a compiled run. While executions of different priorities run in one
scope, the gate holds the interpreter's short switch interval (mlts.hal.switch_interval): a higher-
priority execution then gets the interpreter lock within a fifth of a millisecond of asking, not after
the 5 ms a lower one running Python code between its checkpoints could otherwise keep it.

`checkpoint()` builds the callable an executor calls before every operation: it answers
MISSED_DEADLINE_TRANSIENT once the deadline has passed (mlts.hal.deadlines), and waits out preemption (a paused execution
still ends at its deadline). Burst and other execution paths call the same function.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mlts.hal import deadlines
from mlts.hal.deadlines import TimePoint
from mlts.hal.switch_interval import SHORT_SWITCH_INTERVAL

_CLIENT: contextvars.ContextVar[int] = contextvars.ContextVar("mlts_client", default=0)
_APP: contextvars.ContextVar[int] = contextvars.ContextVar("mlts_app", default=0)

Checkpoint = Callable[[int], None]

#: Gate scopes: every running execution is compared with every other, or only with its connection's.
SCOPE_ALL = "all"
SCOPE_CLIENT = "client"
SCOPES = (SCOPE_ALL, SCOPE_CLIENT)
# The gate key of every ticket in scope "all" (connection keys are >= 0).
_ALL_KEY = -1
#: What a gate's word holds while nothing runs in its scope: below every priority.
NOTHING_RUNNING = -1


def current_client() -> int:
    """The identity of the connection the current call came from (0: an in-process caller)."""
    return _CLIENT.get()


def current_app() -> int:
    """The identity of the program the current call came from (its uid and executable, as the kernel
    reports them; 0: an in-process caller). Connections of one program share it."""
    return _APP.get()


@contextlib.contextmanager
def serving_client(client: int, app: int | None = None) -> Iterator[None]:
    """Calls made inside this block act for connection `client` of program `app` (default: an app of its
    own); what the service wraps around driver calls."""
    token = _CLIENT.set(client)
    app_token = _APP.set(client if app is None else app)
    try:
        yield
    finally:
        _APP.reset(app_token)
        _CLIENT.reset(token)


@dataclass(eq=False, slots=True)
class Ticket:
    """One running execution, as the gate knows it; called with an operation index, it is the
    checkpoint of an execution without a deadline (`checkpoint(None, gate, ticket)`).

    A ticket describes its execution until it is left: the gate may fill the same object in again for
    a later execution (its fast path, `PriorityGate.enter`)."""

    client: int
    priority: int
    serial: int
    paused: int = 0  # how often it waited for a higher-priority execution
    gate: PriorityGate | None = None  # the gate that issued it
    key: int = _ALL_KEY  # whose executions it is compared with (the gate's scope)
    #: The address of the int64 holding the highest priority running in the ticket's scope (0: none).
    word_address: int = 0

    def __call__(self, index: int) -> None:
        gate = self.gate
        # `wait_turn`'s lock-free test, inlined: it runs before every operation.
        if gate is not None and gate.enabled and gate._top.get(self.key, self.priority) > self.priority:
            gate.wait_turn(self, None, index)

    def outranked(self) -> bool:
        """Whether a higher-priority execution in the ticket's scope runs now (a hint: read without lock)."""
        gate = self.gate
        return gate is not None and gate.enabled and gate._top.get(self.key, self.priority) > self.priority


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
    """Lets a running execution wait at its checkpoints while a higher-priority one runs.

    Executions are compared within a scope: every running execution (`scope="all"`, the default) or
    those of one connection (`scope="client"`). `_top[key]` is the highest priority among the running
    executions of a scope. A checkpoint reads it without the lock (one dict lookup): only an execution
    that is outranked takes the lock and waits. `leave` wakes waiters only when there are some and a
    scope's highest priority went down. `_words[key]` mirrors `_top[key]` in memory compiled code can
    read (NOTHING_RUNNING when the scope has no execution).

    In scope "all", an execution that enters while nothing else runs is only `_solo` (and the word):
    entering and leaving alone, the common case, touch no dictionary and build no ticket. The next
    execution to enter makes it an ordinary running execution first, so every decision between two
    executions is the ordinary path's.
    """

    def __init__(self, scope: str = SCOPE_ALL) -> None:
        if scope not in SCOPES:
            raise ValueError(f"priority gate scope {scope!r} is not one of {', '.join(SCOPES)}")
        self.scope = scope
        # A plain lock under the condition: `with self._lock` is one C call, where entering the
        # Condition itself goes through Python code (enter and leave run once per execution).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._running: dict[int, dict[int, int]] = {}  # key -> priority -> count
        self._top: dict[int, int] = {}  # key -> highest running priority
        self._words: dict[int, ctypes.c_int64] = {}  # key -> _top[key] for compiled code
        self._addresses: dict[int, int] = {}  # key -> the address of `_words[key]` (what tickets carry)
        self._scope_all = scope == SCOPE_ALL
        # Scope "all": its word lives as long as the gate, and the execution running alone in it, if
        # any, is `_solo` (entered and left without the scope's dictionaries; see `enter`).
        self._solo: Ticket | None = None
        self._spare: Ticket | None = None  # a left ticket of the fast path, for the next one
        if self._scope_all:
            word = self._words[_ALL_KEY] = ctypes.c_int64(NOTHING_RUNNING)
            self._all_word = word
            self._all_address = self._addresses[_ALL_KEY] = ctypes.addressof(word)
        self._waiting = 0  # executions waiting in wait_turn
        self._serial = itertools.count(1)
        self.enabled = True
        self.pauses = 0  # how often an execution waited for a higher-priority one
        # Scopes running executions of more than one priority: while any, the short switch interval is held.
        self._mixed: set[int] = set()

    def enter(self, priority: int, client: int | None = None) -> Ticket:
        if client is None:
            client = _CLIENT.get()
        if type(priority) is not int:
            priority = int(priority)
        # acquire/release rather than `with`: one execution enters and leaves once, and the `with`
        # statement's method lookups cost more than the dictionary work it guards.
        lock = self._lock
        if self._scope_all:
            # The fast path: nothing else runs in the scope. The execution is the scope's `_solo` and its
            # priority goes into the word (compiled code reads it); `_running` and `_top` stay empty, which
            # reads as "not outranked" to its own checkpoints, the truth while it runs alone. The next
            # execution to enter moves it into `_running` first (`_promote_solo`), under the lock. Its
            # ticket is the one the last execution that ran alone left (`_spare`), filled in again.
            lock.acquire()
            if self._solo is None and _ALL_KEY not in self._running:
                ticket = self._spare
                if ticket is None:
                    ticket = Ticket(
                        client, priority, next(self._serial), 0, self, _ALL_KEY, self._all_address
                    )
                else:
                    self._spare = None
                    ticket.client = client
                    ticket.priority = priority
                    ticket.serial = next(self._serial)
                    ticket.paused = 0
                self._solo = ticket
                self._all_word.value = priority
                lock.release()
                return ticket
            key = _ALL_KEY
        else:
            key = client
            lock.acquire()
        try:
            if self._solo is not None:
                self._promote_solo()
            counts = self._running.get(key)
            if counts is None:
                self._running[key] = {priority: 1}
                self._top[key] = priority
                word = self._words.get(key)
                if word is None:
                    word = self._words[key] = ctypes.c_int64(priority)
                    self._addresses[key] = ctypes.addressof(word)
                else:
                    word.value = priority
            else:
                word = self._words[key]
                n = counts.get(priority, 0)
                if not n and len(counts) == 1 and self.enabled:  # a second priority in this scope
                    if not self._mixed:
                        SHORT_SWITCH_INTERVAL.enter()
                    self._mixed.add(key)
                counts[priority] = n + 1
                if priority > self._top.get(key, priority - 1):
                    self._top[key] = priority
                    word.value = priority
            address = self._addresses[key]
        finally:
            lock.release()
        return Ticket(client, priority, next(self._serial), 0, self, key, address)

    def _promote_solo(self) -> None:
        """Move the execution running alone into the scope's dictionaries (under the lock): another one
        is entering. The word already holds its priority."""
        solo = self._solo
        assert solo is not None
        self._solo = None
        self._running[_ALL_KEY] = {solo.priority: 1}
        self._top[_ALL_KEY] = solo.priority

    def leave(self, ticket: Ticket) -> None:
        held = _HELD.get()
        if held is not None:
            held.append(lambda: self._leave(ticket))
            return
        # `_leave`'s fast path, inlined: the execution ran alone and still does (no one waits on it:
        # only an outranked execution waits, and one ranked below the solo one would have promoted it).
        if self._solo is ticket:
            lock = self._lock
            lock.acquire()
            if self._solo is ticket:
                self._solo = None
                self._all_word.value = NOTHING_RUNNING
                self._spare = ticket  # the next execution that runs alone takes it again
                lock.release()
                return
            lock.release()
        self._leave(ticket)

    def _leave(self, ticket: Ticket) -> None:
        key, priority = ticket.key, ticket.priority
        lock = self._lock
        lock.acquire()
        try:
            if self._solo is not None:
                if self._solo is ticket:  # (a held leave) still alone in its scope
                    self._solo = None
                    self._all_word.value = NOTHING_RUNNING
                    return
                self._promote_solo()
            counts = self._running[key]
            left = counts[priority] - 1
            if left:
                counts[priority] = left
                return  # another execution of this priority still runs: the top stays
            del counts[priority]
            if len(counts) == 1 and key in self._mixed:  # back to one priority in this scope
                self._mixed.discard(key)
                if not self._mixed:
                    SHORT_SWITCH_INTERVAL.leave()
            top = self._top.get(key)
            if not counts:
                del self._running[key]
                self._top.pop(key, None)
                # A connection's word goes with its last execution (scope "client"); the scope "all"
                # one stays, reset. Tickets name a word only while they run.
                if key == _ALL_KEY:
                    word = self._words[key]
                else:
                    word = self._words.pop(key)
                    del self._addresses[key]
                word.value = NOTHING_RUNNING
            elif top == priority:
                self._top[key] = new_top = max(counts)
                self._words[key].value = new_top
            if self._waiting and self._top.get(key) != top:
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
        return self._top.get(ticket.key, ticket.priority) > ticket.priority

    def wait_turn(self, ticket: Ticket, deadline: TimePoint | None, index: int) -> None:
        """Return once no higher-priority execution runs in the ticket's scope (or fail at the deadline)."""
        # The lock-free fast path (`_outranked` inlined: it runs before every operation).
        if not self.enabled or self._top.get(ticket.key, ticket.priority) <= ticket.priority:
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
            return sum(sum(c.values()) for c in self._running.values()) + (self._solo is not None)


class DeadlineCheck:
    """The checkpoint of an execution with a deadline: MISSED_DEADLINE_TRANSIENT once it has passed,
    then preemption (waiting at most until the deadline)."""

    __slots__ = ("deadline", "gate", "ticket")

    def __init__(self, deadline: TimePoint, gate: PriorityGate | None, ticket: Ticket | None) -> None:
        self.deadline = deadline
        self.gate = gate if ticket is not None else None
        self.ticket = ticket if gate is not None else None

    def __call__(self, index: int) -> None:
        deadline = self.deadline
        if time.monotonic_ns() > deadline:
            raise deadlines.missed(f"before operation {index}")
        gate = self.gate
        if gate is not None:
            gate.wait_turn(self.ticket, deadline, index)  # type: ignore[arg-type]


def watch(check: Checkpoint | None) -> tuple[int, int, int] | None:
    """What compiled code may watch instead of calling `check` between its calls: (address of the
    int64 holding the highest priority running in the scope, or 0; the execution's priority; the
    deadline in CLOCK_MONOTONIC ns, or -1), or None when `check` is not a checkpoint of this module
    (the caller must then call it). Compiled code stops when the word exceeds the priority or the
    deadline has passed; the caller then calls `check`, which waits out the preemption or raises."""
    kind = type(check)
    if kind is Ticket:
        ticket: Ticket = check  # type: ignore[assignment]
        gate = ticket.gate
        if gate is None or not gate.enabled:
            return None
        return ticket.word_address, ticket.priority, -1
    if kind is DeadlineCheck:
        dc: DeadlineCheck = check  # type: ignore[assignment]
        ticket = dc.ticket  # type: ignore[assignment]
        if ticket is None or dc.gate is None or not dc.gate.enabled:
            return 0, 0, dc.deadline
        if ticket.gate is not dc.gate:
            return None  # a ticket of another gate: its word is not this gate's
        return ticket.word_address, ticket.priority, dc.deadline
    return None


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
    return DeadlineCheck(deadline, gate, ticket)
