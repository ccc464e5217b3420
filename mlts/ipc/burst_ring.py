"""Burst message queues: a single-producer single-consumer ring of messages in a memfd, and its eventfd.

Layout of the memfd (little-endian, see docs/burst-protocol.md):

    offset   0  u64 write counter  (bytes ever published; written by the producer only)
    offset  64  u64 read counter   (bytes ever consumed; written by the consumer only)
    offset  72  u32 awake flag     (1: the consumer will look at the write counter before it blocks;
                                    written by the consumer only)
    offset 128  u32 closed flag    (set by the producer when it will publish nothing more)
    offset 192  data, `capacity` bytes, used as a circular buffer

A message is a u32 length followed by that many payload bytes, possibly
wrapping round the end of the data area. The producer copies the whole
message, then stores the new write counter, then signals the eventfd unless
the consumer's awake flag says it will look anyway (a full barrier between
the counter's store and the flag's load, and between the consumer's clearing
of the flag and its last look, keep every wake-up); the consumer reads the
write counter, then the message, then stores its read counter. The counters
are on separate cache lines and only grow; each side keeps its own copy of
the counter it owns and never trusts the other side's values: a counter
that moves backwards, a fill level past the capacity or a length past what
was published is reported as a `RingError`, never read.

The creator seals the memfd against shrinking and growing (`F_SEAL_SHRINK|F_SEAL_GROW`, as request
pools are, mlts.hal.memory), and a side that adopts a ring refuses one without those seals: a peer
that could truncate the file under the mapping would kill the adopting process with SIGBUS at its
next access.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import select
import stat
import struct
import sys
import threading
import time

from mlts.hal.fence import is_eventfd
from mlts.hal.files import describe_mode
from mlts.hal.memory import seal_names
from mlts.ipc import expected_wait

HEADER_BYTES = 192
_WRITE_AT = 0
_READ_AT = 64
_AWAKE_AT = 72
_CLOSED_AT = 128
# Word indexes of the header fields (counters as u64 words, flags as u32 words).
_W = _WRITE_AT // 8
_R = _READ_AT // 8
_AWAKE = _AWAKE_AT // 4
_CLOSED = _CLOSED_AT // 4
_U32 = struct.Struct("<I")
_pack_u32 = _U32.pack_into
_unpack_u32 = _U32.unpack_from
#: The smallest and largest data areas accepted from the other side.
MIN_CAPACITY = 256
MAX_CAPACITY = 16 << 20
DEFAULT_CAPACITY = 64 << 10
#: The polling window before a blocking wait (NNAPI's sample driver polls for 50 µs).
DEFAULT_POLLING_US = 50
#: The first blocking wait after a polling window re-checks the ring after this long (s): a bound on
#: the delay a wake-up lost to a memory-ordering fault could cause (none is expected, see `_fence`).
RECHECK_S = 0.001
#: After this many polling windows in a row ended with nothing, a consumer polls only on every
#: PROBE_EVERY-th wait (and blocks at once on the others) until a window finds a message again: a
#: peer that answers later than the window (a long execution, a busy machine) costs no polling.
EMPTY_WINDOWS_BEFORE_PROBING = 2
PROBE_EVERY = 4
#: The seals a ring's memfd must carry: its size can never change under a mapping of it.
RING_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class RingError(Exception):
    """The ring's shared state is inconsistent (a hostile or broken peer); the burst cannot go on."""


class MessageTooLarge(ValueError):
    """A message does not fit in the ring at all; it is refused, never truncated."""


def ring_bytes(capacity: int) -> int:
    """The memfd size of a ring with `capacity` data bytes."""
    return HEADER_BYTES + capacity


class Ring:
    """One direction of a burst: this process is either its producer or its consumer."""

    def __init__(self, fd: int, size: int, event_fd: int, *, owner: bool) -> None:
        if sys.byteorder != "little":  # the counters are native words; the layout is little-endian
            raise OSError("burst rings need a little-endian machine")
        self.fd = fd
        self.event_fd = event_fd
        self.size = size
        self.capacity = size - HEADER_BYTES
        self._map = mmap.mmap(fd, size)
        self._view = memoryview(self._map)
        self._data = self._view[HEADER_BYTES:]
        # The counters and the flags as aligned 8- and 4-byte words, read and written whole: struct's
        # pack_into zeroes its destination before writing it, so a peer could read a counter as 0.
        self._words = self._view[:HEADER_BYTES].cast("Q")
        self._flags = self._view[:HEADER_BYTES].cast("I")
        self._owner = owner
        # Each side's private copy of the counter it owns; the shared one is only ever written.
        self._write = 0
        self._read = 0
        self._awake = False  # the consumer's copy of its awake flag
        self._empty_windows = 0  # polling windows in a row that ended with nothing
        self._skipped = 0  # waits without a window since the last probing one
        self._barrier = threading.Lock()
        self._closed = False
        self._poller: select.poll | None = None  # made at the first blocking wait
        #: Signals the producer left out because the consumer was awake (a statistic).
        self.signals_saved = 0
        #: Messages found by the re-check after a blocking wait's first RECHECK_S (a wake-up that
        #: the eventfd did not deliver; expected to stay 0).
        self.rechecks_found = 0

    def _fence(self) -> None:
        """A full memory barrier (stores before it are visible before loads after it).

        Acquiring and releasing an uncontended lock is a locked read-modify-write instruction in
        CPython (glibc semaphores, atomics), which orders stores before later loads on x86-64.
        """
        self._barrier.acquire()
        self._barrier.release()

    # ------------------------------------------------------------ creating and adopting

    @classmethod
    def create(cls, capacity: int = DEFAULT_CAPACITY, name: str = "mlts-burst") -> Ring:
        """A new zeroed ring and its eventfd (both owned by the returned object)."""
        if not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
            raise ValueError(f"ring capacity {capacity} is outside {MIN_CAPACITY}..{MAX_CAPACITY}")
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        event = -1
        try:
            os.ftruncate(fd, ring_bytes(capacity))
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, RING_SEALS)
            event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            return cls(fd, ring_bytes(capacity), event, owner=True)
        except BaseException:
            os.close(fd)
            if event >= 0:
                os.close(event)
            raise

    @classmethod
    def adopt(cls, fd: int, size: object, event_fd: int, what: str) -> Ring:
        """Map a ring received from another process; takes ownership of both fds.

        Raises ValueError naming `what` when the size, the file, its seals or the eventfd is wrong:
        the ring must be a memfd sealed with RING_SEALS, so its peer can never shrink it under the
        mapping (SIGBUS).
        """
        try:
            if type(size) is not int or not MIN_CAPACITY <= size - HEADER_BYTES <= MAX_CAPACITY:
                raise ValueError(
                    f"{what}: size {size!r} must be {HEADER_BYTES} + {MIN_CAPACITY}..{MAX_CAPACITY} bytes"
                )
            try:
                info = os.fstat(fd)
            except OSError as e:
                raise ValueError(f"{what}: cannot inspect the ring's fd: {e}") from None
            if not stat.S_ISREG(info.st_mode):
                raise ValueError(f"{what}: the ring's fd is {describe_mode(info.st_mode)}, not a memfd")
            try:
                present = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                present = 0  # a file without sealing support (a file on disk, which anyone may truncate)
            missing = RING_SEALS & ~present
            if missing:
                raise ValueError(
                    f"{what}: the ring's memfd is not sealed as required: it lacks {seal_names(missing)} "
                    f"(it has {seal_names(present)}); create it with MFD_ALLOW_SEALING and seal it with "
                    "F_SEAL_SHRINK|F_SEAL_GROW"
                )
            actual = info.st_size
            if actual < size:
                raise ValueError(f"{what}: the ring claims {size} bytes but its memory holds {actual}")
            if not is_eventfd(event_fd):
                raise ValueError(f"{what}: its event fd is not an eventfd")
            os.set_blocking(event_fd, False)
            try:
                return cls(fd, size, event_fd, owner=True)
            except OSError as e:
                raise ValueError(f"{what}: cannot map the ring: {e}") from None
        except BaseException:
            os.close(fd)
            os.close(event_fd)
            raise

    # ------------------------------------------------------------ producer

    def write(self, payload: bytes | bytearray | memoryview, timeout: float | None = 0.0) -> bool:
        """Publish one message and signal the consumer unless it is awake and will look anyway.

        Non-blocking with `timeout` 0 (False when the ring has no room now); otherwise waits up to
        `timeout` seconds (None: for ever) for room. MessageTooLarge if it could never fit.
        """
        need = len(payload) + 4
        capacity = self.capacity
        w = self._write
        used = w - self._words[_R]
        if used < 0 or capacity - used < need:  # no room now, too large, or an inconsistent counter
            if need > capacity:
                raise MessageTooLarge(
                    f"a burst message of {need - 4} bytes does not fit in a ring of {capacity} bytes"
                )
            limit = None if timeout is None else time.monotonic() + timeout
            while capacity - self._used_by_consumer() < need:
                if limit is not None and time.monotonic() >= limit:
                    return False
                time.sleep(0.0001)
        start = w % capacity
        if start + need <= capacity:
            at = HEADER_BYTES + start
            m = self._map
            _pack_u32(m, at, need - 4)
            m[at + 4 : at + need] = payload
        else:
            self._put(w, _U32.pack(need - 4))
            self._put(w + 4, payload)
        self._write = w = w + need
        # The message is complete before the counter that publishes it.
        self._words[_W] = w
        # Store the counter, then load the consumer's awake flag: with the consumer's own barrier
        # between clearing the flag and its last look, one of the two sees the other's store.
        barrier = self._barrier  # `_fence`, inline
        barrier.acquire()
        barrier.release()
        if self._flags[_AWAKE]:
            self.signals_saved += 1
        else:
            self.signal()
        return True

    def _used_by_consumer(self) -> int:
        read = self._words[_R]
        used = self._write - read
        if not 0 <= used <= self.capacity:
            raise RingError(f"the consumer's read counter {read} is inconsistent with {self._write} written")
        return used

    def _put(self, at: int, data: bytes | bytearray | memoryview) -> None:
        start = at % self.capacity
        first = min(len(data), self.capacity - start)
        self._data[start : start + first] = data[:first]
        if first < len(data):
            self._data[: len(data) - first] = data[first:]

    def signal(self) -> None:
        try:
            os.eventfd_write(self.event_fd, 1)
        except BlockingIOError:
            pass  # the counter is saturated: the consumer is woken anyway

    def mark_closed(self) -> None:
        """Tell the consumer nothing more will come (and wake it, awake or not)."""
        self._flags[_CLOSED] = 1
        self.signal()

    # ------------------------------------------------------------ consumer

    def peer_closed(self) -> bool:
        return self._flags[_CLOSED] != 0

    def pending(self) -> bool:
        """Whether a message (or an inconsistency to report) waits to be read."""
        return self._words[_W] != self._read

    def read(self, max_message: int | None = None) -> bytes | None:
        """The next message's payload, or None when the ring is empty; RingError when it is inconsistent."""
        r = self._read
        available = self._words[_W] - r
        if available == 0:
            return None
        capacity = self.capacity
        if not 4 <= available <= capacity:
            if available < 0:
                raise RingError(f"the write counter moved backwards ({r + available} after {r} were read)")
            if available > capacity:
                raise RingError(f"the write counter claims {available} unread bytes in a ring of {capacity}")
            raise RingError(f"{available} bytes were published, less than a message header")
        start = r % capacity
        begin = start + 4
        if begin <= capacity:
            length = _unpack_u32(self._map, HEADER_BYTES + start)[0]
        else:
            length = _U32.unpack_from(self._get(r, 4))[0]
        # `available` is at most the capacity, so a length within it is within the data area too.
        if length > available - 4 or (max_message is not None and length > max_message):
            raise RingError(f"a message claims {length} bytes but {available - 4} were published")
        end = begin + length
        if end <= capacity:
            payload = self._map[HEADER_BYTES + begin : HEADER_BYTES + end]
        else:
            payload = self._get(r + 4, length)
        self._read = r = r + 4 + length
        self._words[_R] = r
        return payload

    def _get(self, at: int, n: int) -> bytes:
        start = at % self.capacity
        first = min(n, self.capacity - start)
        if first == n:
            return bytes(self._data[start : start + n])
        return bytes(self._data[start:]) + bytes(self._data[: n - first])

    def wait(
        self,
        timeout: float | None,
        polling_us: int = DEFAULT_POLLING_US,
        answered: Ring | None = None,
        expected: expected_wait.ExpectedWait | None = None,
    ) -> bool:
        """Poll for `polling_us`, then block on the eventfd; True once a message (or closing) is pending
        or the eventfd was signalled (the caller checks what happened).

        `answered`: the ring this side answers into. While the peer has not read all of it yet (it is
        being woken by the signal that came with the answer), this side polls for up to `polling_us`
        more, and the polling window starts when the peer has read it: a peer that had to be woken
        still finds this side polling when its next message comes.

        After EMPTY_WINDOWS_BEFORE_PROBING windows in a row that found nothing, only every
        PROBE_EVERY-th wait polls its window, until one finds a message (a stretch `expected` plans
        runs on every wait). While polling the awake flag is set, so
        the producer need not signal; it is cleared (then a barrier, then a last look) before
        blocking. Returns False after `timeout` seconds (None: no limit) with nothing pending.

        `expected` (mlts.ipc.expected_wait): when it plans a stretch, (sleep until, poll until) in
        seconds after the wait began, a window that ended with nothing is followed by a blocking wait
        on the eventfd until the first (a message wakes it), then polling until the second; when the
        last two waits both outlasted the window, it is not polled (`ExpectedWait.expects_after`).
        """
        words = self._words
        r = self._read
        if words[_W] != r or self._flags[_CLOSED]:
            return True
        window = polling_us
        plan = None
        if polling_us > 0:
            # Asked on every wait that may poll, so a back-off after a crowded stretch lasts its count
            # of waits, not of windows.
            plan = None if expected is None else expected.stretch()
            if self._empty_windows >= EMPTY_WINDOWS_BEFORE_PROBING:
                # The last windows all ended with nothing: the window only on every PROBE_EVERY-th
                # wait (a planned stretch has its own rules, and runs on every wait).
                self._skipped += 1
                if self._skipped < PROBE_EVERY:
                    window = 0
                else:
                    self._skipped = 0
        if window > 0 or plan is not None:
            if not self._awake:
                self._flags[_AWAKE] = 1
                self._awake = True
            clock = time.perf_counter_ns
            began = clock()
            if window > 0:
                until = began + window * 1000
                if answered is not None:
                    peer_read, written = answered._words, answered._write
                    while peer_read[_R] != written:  # the peer has not read the answer yet
                        if words[_W] != r:
                            self._empty_windows = 0
                            return True
                        if clock() >= until:
                            break
                    until = clock() + window * 1000
                # A window that cannot meet the message is not polled (ExpectedWait.expects_after): it
                # would only spin while the peer works.
                if expected is None or not expected.expects_after(window / 1e6):
                    while clock() < until:
                        if words[_W] != r:
                            self._empty_windows = 0
                            return True  # still awake: the flag stays set until this side blocks
            if plan is not None and expected is not None and self._stretched(began, plan, expected):
                self._empty_windows = 0
                return True
            self._empty_windows += 1
        recheck = False
        if self._awake:
            self._flags[_AWAKE] = 0
            self._awake = False
            self._fence()
            recheck = True
        limit = None if timeout is None else time.monotonic() + timeout
        poller = self._poller
        if poller is None:
            poller = self._poller = select.poll()
            poller.register(self.event_fd, select.POLLIN)
        while True:
            # A signal sent after the check above leaves the eventfd readable, so none is missed.
            if words[_W] != r or self._flags[_CLOSED]:
                return True
            if limit is None:
                wait_ms = -1
            else:
                remaining = limit - time.monotonic()
                if remaining <= 0:
                    return False
                wait_ms = max(1, int(remaining * 1000))
            if recheck:
                wait_ms = int(RECHECK_S * 1000) if wait_ms < 0 else min(wait_ms, int(RECHECK_S * 1000))
            if poller.poll(wait_ms):
                try:
                    os.eventfd_read(self.event_fd)
                except BlockingIOError:
                    pass
                # Woken: a message, or a signal meant for this side itself (a burst being released).
                return True
            if recheck:
                recheck = False
                if words[_W] != r:
                    self.rechecks_found += 1
                    return True

    def _event_ready(self, timeout: float) -> bool:
        return bool(expected_wait.readable_within(self.event_fd, timeout))

    def _stretched(
        self, began: int, stretch: tuple[float, float], expected: expected_wait.ExpectedWait
    ) -> bool:
        """The stretch `expected` planned (`stretch`) for a polling window begun at `began` (ns):
        asleep, then polling; True once a message is pending or the eventfd was signalled (the awake
        flag is then clear or set as the blocking wait and the polling leave it). It polls only while a
        CPU is to spare (`expected_wait.cpu_to_spare`), and a turn more than PREEMPTED_GAP_US after
        the one before ends it; both make `expected` back off."""
        words, r = self._words, self._read
        napped = time.perf_counter_ns()
        nap = (began + stretch[0] * 1e9 - napped) / 1e9
        if nap > 0 and self.event_fd < expected_wait.SELECT_FDS:  # else no sleep: it polls on
            self._flags[_AWAKE] = 0
            self._awake = False
            self._fence()
            if words[_W] != r:
                return True
            if expected_wait.nap(self._event_ready, nap):
                try:
                    os.eventfd_read(self.event_fd)
                except BlockingIOError:
                    pass
                return True
            expected.overslept(nap, (time.perf_counter_ns() - napped) / 1e9)
            self._flags[_AWAKE] = 1
            self._awake = True
        if not expected_wait.cpu_to_spare():
            expected.back_off()
            return False  # every CPU has a thread to run: block (the caller clears the flag)
        clock = time.perf_counter_ns
        until = began + int(stretch[1] * 1e9)
        gap = expected_wait.PREEMPTED_GAP_US * 1000
        turn = clock()
        while True:
            if words[_W] != r:
                return True
            t = clock()
            if t >= until:
                return False
            if t - turn > gap and expected.lost_cpu():
                return False
            turn = t

    # ------------------------------------------------------------ whole images (fuzzing)

    def image(self) -> bytes:
        """A copy of the ring's shared memory, header included, as a peer would map it."""
        return bytes(self._view)

    def load_image(self, data: bytes) -> None:
        """Overwrite the ring's shared memory, header included, with `data` (exactly its size): what a
        hostile peer can do, for testing a consumer against it."""
        if len(data) != len(self._view):
            raise ValueError(f"a ring image of {len(data)} bytes for a ring of {len(self._view)}")
        self._view[:] = data

    # ------------------------------------------------------------ ending

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._data.release()
        self._words.release()
        self._flags.release()
        self._view.release()
        self._map.close()
        if self._owner:
            os.close(self.fd)
            os.close(self.event_fd)
