"""How long a reader's next answer is likely to take, to stretch its polling window over it.

A polling window (mlts.ipc.socket_polling, a burst's result ring) saves the wake-up of a halted CPU
only when the answer comes within it. A client that runs one small model call after call (an audio
model step by step, a camera frame every few hundred microseconds) waits about as long every time:
when the last two waits were both at most `max_us`, the next one, after its usual window, sleeps
until WAKE_LEAD_US before the shorter of them would end (woken at once by an earlier answer; no
sleep when that would be shorter than the lead), then polls until STRETCH_FACTOR times it, or the
longer of the two. A reader whose last two waits both took at least its window
plus WAKE_LEAD_US does not poll the window (`ExpectedWait.expects_after`): it could only end empty,
holding a CPU the other side's computation may need (a driver's kernel threads); the reader sleeps
from the start (until the stretch's poll when one is planned, else until the answer). The sleep keeps the reader off the CPU while the other side
works (it may need both cores); the lead covers the timer's slack (50 µs by default) and the CPU's
wake-up, plus how late the reader's own naps have been ending (`ExpectedWait.overslept`: a virtual
machine's timer can end a sleep 50-100 µs late). A longer wait (a large model, a client thinking between calls) leaves the window as it
is. The polling ends at STRETCH_FACTOR times the expected wait and at most POLL_PAST_US past it,
and the windows' other rules (off after long waits, probing after empty windows) still apply. A
client stretches over answers up to STRETCH_MAX_US (a large model's call too: the poll is bounded in
time, not by the call's length); a service's readers over their client's turn between calls up to
SERVICE_STRETCH_MAX_US only (a client that thinks longer is not polled for).

A polling reader holds a CPU, which other threads may need (more clients than cores, a driver
splitting its work over every core: asr_float's step at 2 threads took 15% longer beside a polling
client, and two clients' throughput on one service fell 10%). So a stretch polls only while a CPU
is to spare: when its sleep ends, the kernel's count of runnable threads (/proc/loadavg, this one
included) must not exceed the CPUs this process may use, or it blocks instead; and a turn of the
poll that finds more than PREEMPTED_GAP_US since the one before (the CPU was taken from it; on a
quiet machine the turns are a microsecond apart) ends it when more threads than CPUs are runnable
then (a thread that took the CPU still runs; a CPU taken while none waits went to the hypervisor or
an interrupt, which a virtual machine sees every few milliseconds, and the poll goes on). Either way the next BACK_OFF eligible
waits are plain (their windows only), so a reader beside a driver that uses every core does not
wake early on every call to find that out.

MLTS_POLLING_STRETCH_US sets `max_us` for every reader, client and service (0: never stretch).
"""

from __future__ import annotations

import ctypes
import math
import os
import select
from collections.abc import Callable

#: The longest expected answer a client's window is stretched over (µs), unless MLTS_POLLING_STRETCH_US
#: says otherwise: a large model's 15-50 ms call is answered to a polling client too (its wake-up
#: otherwise adds 100-150 µs here), at the cost of at most POLL_PAST_US (plus the lead) of polling.
STRETCH_MAX_US = 100_000
#: The same for a service's readers, whose waits are the client's turn between calls: a client that
#: thinks longer than this between calls is not polled for.
SERVICE_STRETCH_MAX_US = 1000
#: The stretch polls until the expected wait times this (executions of one model vary by a few
#: percent), and at most POLL_PAST_US past the expected wait.
STRETCH_FACTOR = 1.25
POLL_PAST_US = 1000
#: MLTS_POLLING_STRETCH_US's largest value (µs).
STRETCH_LIMIT_US = 1_000_000
#: A stretched wait sleeps until this long before the expected answer (the sleep's timer slack is
#: 1 µs: waking then takes about 25 µs here, against about 75 µs with Linux's default 50 µs slack),
#: plus how late this reader's own naps have been ending (`ExpectedWait.overslept`).
WAKE_LEAD_US = 50
#: The most a nap's measured lateness adds to the lead (µs): a timer later than this, the answer
#: is met by the wake-up the answer itself sends.
MAX_LATE_US = 250
#: A smaller lateness than the one held moves it this fraction of the way down (a larger one is taken
#: at once): one punctual nap among late ones does not undo the lead.
LATE_EASING = 1 / 8
ENV = "MLTS_POLLING_STRETCH_US"
#: A turn of a stretched poll this long after the one before means the CPU was taken from the reader.
PREEMPTED_GAP_US = 50
#: After that, this many eligible waits are not stretched.
BACK_OFF = 32


_PR_SET_TIMERSLACK = 29
_PR_GET_TIMERSLACK = 30
try:
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # no C library to ask: sleeps keep the default slack
    _prctl = None


def nap(wait: Callable[[float], bool], seconds: float) -> bool:
    """`wait(seconds)` (a blocking wait for an answer) with the calling thread's timer slack at 1 µs,
    restored after: the sleep of a stretched window ends when it should, not up to 50 µs later."""
    if _prctl is None:
        return wait(seconds)
    old = _prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    _prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    try:
        return wait(seconds)
    finally:
        _prctl(_PR_SET_TIMERSLACK, old if old > 0 else 0, 0, 0, 0)


#: File descriptors `select` can wait on (FD_SETSIZE).
SELECT_FDS = 1024


def readable_within(fd: int, seconds: float) -> bool | None:
    """Wait up to `seconds` (microsecond precision, `select`) for `fd` to be readable; None, at once,
    for a descriptor beyond select's reach (the caller polls on instead of sleeping)."""
    if fd >= SELECT_FDS:
        return None
    return bool(select.select((fd,), (), (), seconds)[0])


def _open_loadavg() -> int | None:
    try:
        return os.open("/proc/loadavg", os.O_RDONLY)
    except OSError:
        return None


_LOADAVG = _open_loadavg()
_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_to_spare() -> bool:
    """Whether no more threads are runnable now than this process has CPUs (counting the caller);
    True when the count cannot be read."""
    if _LOADAVG is None:
        return True
    try:
        running = os.pread(_LOADAVG, 128, 0).split()[3].split(b"/")[0]
        return int(running) <= _CPUS
    except (OSError, IndexError, ValueError):
        return True


def stretch_max_us(default: int = STRETCH_MAX_US) -> int:
    """MLTS_POLLING_STRETCH_US when set to a whole number (at most STRETCH_LIMIT_US), else `default`."""
    raw = os.environ.get(ENV, "").strip()
    if raw.isdigit():
        return min(int(raw), STRETCH_LIMIT_US)
    return default


class ExpectedWait:
    """The last two waits of one reader and the plan of the next wait's stretch (seconds)."""

    __slots__ = ("max_s", "_last", "_before", "_skip", "back_offs", "late", "stretches")

    def __init__(self, max_us: int) -> None:
        self.max_s = max(0, max_us) / 1e6
        self._last = math.inf
        self._before = math.inf
        self._skip = 0  # eligible waits left without a stretch after a crowded one
        self.back_offs = 0
        self.late = 0.0  # how late this reader's naps end (s): see `overslept`
        self.stretches = 0  # waits planned with a stretch

    def overslept(self, asked: float, took: float) -> None:
        """A stretch's nap asked to sleep `asked` seconds and came back, with nothing, after `took`.

        On a virtual machine a timed sleep ends later than asked, by 50-100 µs on some hosts even with
        a 1 µs timer slack: a lead of WAKE_LEAD_US alone then wakes the reader after the answer, which
        it meets by the wake-up the answer sent (the cost the stretch exists to avoid), and the wait it
        records grows by that lateness. The lead therefore adds the lateness measured on this reader's
        own naps (at most MAX_LATE_US): a later nap raises it at once, an earlier one lowers it by
        LATE_EASING of the difference. Input: the reader's own clock around its own sleeps; nothing
        here compares the speed of one choice with another."""
        late = min(max(0.0, took - asked), MAX_LATE_US / 1e6)
        self.late = late if late > self.late else self.late + (late - self.late) * LATE_EASING

    def lost_cpu(self) -> bool:
        """A turn of a stretched poll came more than PREEMPTED_GAP_US after the one before: True (and
        back off) when more threads than CPUs are runnable now, i.e. a thread that took the CPU still
        runs; False when none waits (the hypervisor or an interrupt took it: the poll goes on)."""
        if cpu_to_spare():
            return False
        self.back_off()
        return True

    def lead(self) -> float:
        """How long before the expected answer a stretch's nap ends (s)."""
        return WAKE_LEAD_US / 1e6 + self.late

    def record(self, seconds: float) -> None:
        """A wait ended after `seconds`."""
        self._before = self._last
        self._last = seconds

    def back_off(self) -> None:
        """A stretch found no CPU to spare, or lost its CPU while polling: the next BACK_OFF eligible
        waits are plain."""
        self._skip = BACK_OFF
        self.back_offs += 1

    def expects_after(self, window: float) -> bool:
        """Whether a polling window of `window` seconds cannot meet the next answer: the last two waits
        both took at least the window plus WAKE_LEAD_US (the stretch, when there is one, would sleep
        past the window's end). Nothing known yet: False."""
        return self._before != math.inf and min(self._last, self._before) >= window + WAKE_LEAD_US / 1e6

    def stretch(self) -> tuple[float, float] | None:
        """Plan a wait: (sleep until, poll until) in seconds after it began, or None (the last two
        waits not both within the maximum, or backing off after a crowded stretch)."""
        longer = max(self._last, self._before) if self.max_s > 0 else math.inf
        if longer > self.max_s:
            return None
        if self._skip:
            self._skip -= 1
            return None
        shorter = min(self._last, self._before)
        self.stretches += 1
        lead = self.lead()
        # A nap shorter than the lead is not taken: it would end about when it could be woken anyway,
        # at the price of a wake-up. The poll covers the longer of the two waits too (a peer whose
        # turn is sometimes longer: woken rather than found polling), at most POLL_PAST_US past the
        # shorter.
        sleep = shorter - lead if shorter >= 2 * lead else 0.0
        return sleep, shorter + min(max(shorter * (STRETCH_FACTOR - 1), longer - shorter), POLL_PAST_US / 1e6)
