"""Burst rings and messages: round trips, wrap-around, refusal of oversize messages, hostile contents."""

from __future__ import annotations

import mmap
import os
import random
import struct
import threading
import time

import pytest

from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.types import UINT64_MAX, DataLocation, OutputShape, RequestArgument, Timing
from mlts.ipc import burst_messages as msg
from mlts.ipc import expected_wait
from mlts.ipc.burst_ring import HEADER_BYTES, MessageTooLarge, Ring, RingError


@pytest.fixture
def ring():
    r = Ring.create(256)
    yield r
    r.close()


def _request(seq: int = 7) -> msg.BurstRequest:
    return msg.BurstRequest(
        seq,
        (msg.PoolRef.slot(3), msg.PoolRef.token(0xFFFF_FFFF)),
        (RequestArgument(False, DataLocation(0, 0, 24), (2, 3)), RequestArgument(True)),
        (RequestArgument(False, DataLocation(1, 64, 24), ()),),
        MeasureTiming.YES,
        123_456_789,
        None,
    )


def test_request_and_result_round_trip():
    request = _request()
    assert msg.decode_request(msg.encode_request(request)) == request
    result = msg.BurstResult(
        7, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, (OutputShape((2, 5), False),), Timing(3, 9), "too small"
    )
    assert msg.decode_result(msg.encode_result(result)) == result
    ok = msg.BurstResult(1, ErrorStatus.NONE, (OutputShape(()),), Timing())
    decoded = msg.decode_result(msg.encode_result(ok))
    assert decoded.timing.time_on_device == UINT64_MAX and decoded.output_shapes == ((OutputShape(())),)
    seq, slots = msg.decode_get_memories(msg.encode_get_memories(4, (1, 2, 3)))
    assert (seq, slots) == (4, (1, 2, 3))


@pytest.mark.parametrize(
    "mutate, text",
    [
        (lambda b: b[:-1], "ends at byte"),  # one byte short
        (lambda b: b + b"\0", "follow the end"),
        (lambda b: struct.pack("<I", 2) + b[4:], "kind 2"),
        (lambda b: b[:8] + b"\x05" + b[9:], "measure timing 5"),
        (lambda b: b[:32] + struct.pack("<I", 5000) + b[36:], "exceed the limits"),  # inputs
        (lambda b: b[:40] + b"\x02" + b[41:], "pool 0: kind 2 is not"),
        (lambda b: b[:52] + struct.pack("<I", 0) + b[56:], "pool 1: buffer token 0"),
        (lambda b: b[:28] + struct.pack("<I", 200) + b[32:], "200 pools do not fit"),
    ],
)
def test_bad_request_messages_are_value_errors(mutate, text):
    with pytest.raises(ValueError, match=text):
        msg.decode_request(mutate(msg.encode_request(_request())))


def test_pool_kinds_round_trip():
    pools = (msg.PoolRef.token(5), msg.PoolRef.slot(0), msg.PoolRef.slot(5), msg.PoolRef.token(5))
    decoded = msg.decode_request(msg.encode_request(msg.BurstRequest(2, pools, (), ())))
    assert decoded.pools == pools
    assert [p.kind for p in decoded.pools] == [msg.POOL_TOKEN, msg.POOL_SLOT, msg.POOL_SLOT, msg.POOL_TOKEN]


def test_mutated_requests_decode_or_are_value_errors():
    """Random byte changes to a valid request with slot and token pools: a request whose every pool
    has a known kind (and a non-zero token), or a ValueError; nothing else."""
    rng = random.Random(5)
    good = msg.encode_request(_request())
    refused = 0
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            request = msg.decode_request(bytes(data))
        except ValueError:
            refused += 1
            continue
        assert all(k in (msg.POOL_SLOT, msg.POOL_TOKEN) for k, _ in request.pools)
        assert all(v != 0 for k, v in request.pools if k == msg.POOL_TOKEN)
    assert refused > 100


def test_pool_index_past_the_pools_is_refused():
    bad = msg.BurstRequest(
        1, (msg.PoolRef.slot(1),), (RequestArgument(False, DataLocation(4, 0, 4), ()),), ()
    )
    with pytest.raises(ValueError, match="pool index 4 but the request has 1 pools"):
        msg.decode_request(msg.encode_request(bad))


def test_messages_wrap_round_the_ring(ring):
    # 256 data bytes; messages of 4 + 61 bytes cross the end repeatedly.
    for n in range(50):
        payload = bytes((n + i) % 256 for i in range(61))
        assert ring.write(payload)
        assert ring.pending()
        assert ring.read() == payload
        assert ring.read() is None


def test_full_ring_non_blocking_write_fails_then_succeeds(ring):
    assert ring.write(b"x" * 120) and ring.write(b"y" * 120)
    assert not ring.write(b"z" * 20)  # 8 bytes left
    assert not ring.write(b"z" * 20, timeout=0.01)
    assert ring.read() == b"x" * 120
    assert ring.write(b"z" * 20)
    assert ring.read() == b"y" * 120 and ring.read() == b"z" * 20


def test_oversize_message_is_refused_not_truncated(ring):
    with pytest.raises(MessageTooLarge, match="does not fit"):
        ring.write(b"a" * 253)
    assert ring.read() is None  # nothing was published


def test_wait_times_out_then_sees_a_message(ring):
    assert not ring.wait(0.01, polling_us=0)
    ring.write(b"hello")
    assert ring.wait(0.01, polling_us=0)
    assert ring.read() == b"hello"


def test_counter_moving_backwards_is_an_error(ring):
    ring.write(b"abc")
    assert ring.read() == b"abc"
    struct.pack_into("<Q", ring._view, 0, 2)  # the write counter goes back
    with pytest.raises(RingError, match="backwards"):
        ring.read()


def test_adopt_refuses_wrong_sizes_and_fds():
    r = Ring.create(256)
    try:
        for size, text in ((HEADER_BYTES + 100, "must be"), (HEADER_BYTES + 4096, "claims")):
            with pytest.raises(ValueError, match=text):
                Ring.adopt(os.dup(r.fd), size, os.dup(r.event_fd), "ring")
        with pytest.raises(ValueError, match="not an eventfd"):
            Ring.adopt(os.dup(r.fd), r.size, os.dup(r.fd), "ring")
    finally:
        r.close()


def test_random_ring_contents_never_read_out_of_bounds():
    """10 000 random headers and data: read() returns a message, None or RingError; decoding a message
    gives a request or a ValueError; nothing else is ever raised."""
    rng = random.Random(17)
    r = Ring.create(256)
    outcomes = {"none": 0, "ring": 0, "value": 0, "ok": 0}
    try:
        for _ in range(10_000):
            r._read = rng.choice((0, rng.randrange(1 << 20), rng.randrange(1 << 64)))
            base = r._read
            written = rng.choice(
                (base, base + rng.randrange(300), max(0, base - rng.randrange(1, 50)), rng.randrange(1 << 64))
            )
            struct.pack_into("<Q", r._view, 0, written)
            data = bytearray(rng.randbytes(256))
            if rng.random() < 0.5:  # a plausible length word at the read position
                struct.pack_into("<I", data, base % 256 if base % 256 <= 252 else 0, rng.randrange(300))
            if rng.random() < 0.3:  # a plausible request header
                data[(base + 4) % 256 : (base + 4) % 256 + 4] = struct.pack("<I", 1)[: 256 - (base + 4) % 256]
            r._data[:] = data
            try:
                payload = r.read()
            except RingError:
                outcomes["ring"] += 1
                continue
            if payload is None:
                outcomes["none"] += 1
                continue
            assert len(payload) <= 252
            try:
                msg.decode_request(payload)
                outcomes["ok"] += 1
            except ValueError:
                outcomes["value"] += 1
    finally:
        r.close()
    assert outcomes["ring"] > 1000 and outcomes["value"] > 100 and outcomes["none"] > 100, outcomes


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


#: Where the consumer's awake flag lives in a ring's memfd (docs/burst-protocol.md: u32 at offset 72).
AWAKE_AT = 72
#: Polling windows and stretches the tests wait within: a wait ends as soon as its message comes, so
#: only a thread that gets no CPU for this long could make it miss one.
LONG_WINDOW_US = 30_000_000


class Observer:
    """The ring's header as a third party sees it (its own mapping of the memfd)."""

    def __init__(self, ring: Ring) -> None:
        self._map = mmap.mmap(ring.fd, ring.size)

    def awake(self) -> bool:
        return struct.unpack_from("<I", self._map, AWAKE_AT)[0] == 1

    def close(self) -> None:
        self._map.close()


class WriteWhen(threading.Thread):
    """A producer thread that publishes `payload` once `ready()` holds (checked in a loop that yields the
    GIL), not after a guessed delay: the consumer is then certainly in the state the test is about.
    `in_time` is False when `ready()` did not hold within `limit` seconds (it writes anyway, so the
    consumer's wait ends)."""

    def __init__(self, producer: Ring, payload: bytes, ready, limit: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.producer, self.payload, self.ready, self.limit = producer, payload, ready, limit
        self.in_time = False

    def run(self) -> None:
        end = time.monotonic() + self.limit
        while not self.ready():
            if time.monotonic() > end:
                break
            time.sleep(0)
        else:
            self.in_time = True
        self.producer.write(self.payload)


def test_producer_signals_only_a_consumer_that_may_block():
    consumer = Ring.create(256)
    producer = Ring(consumer.fd, consumer.size, consumer.event_fd, owner=False)
    header = Observer(consumer)
    try:
        # Never polled: the awake flag is 0 and every message is signalled.
        producer.write(b"a")
        assert _readable(consumer.event_fd) and producer.signals_saved == 0
        assert consumer.wait(1.0, polling_us=0) and consumer.read() == b"a"
        os.eventfd_read(consumer.event_fd)  # the message was pending: the wait left the signal
        # A message published while the consumer polls (its awake flag seen set) is not signalled,
        # nor one after it (the consumer stays awake until it blocks).
        assert not header.awake()
        late = WriteWhen(producer, b"b", header.awake)
        late.start()
        assert consumer.wait(60.0, polling_us=LONG_WINDOW_US) and consumer.read() == b"b"
        late.join()
        assert late.in_time
        producer.write(b"c")
        assert not _readable(consumer.event_fd) and producer.signals_saved == 2
        assert consumer.wait(1.0, polling_us=10_000) and consumer.read() == b"c"
        # A consumer whose window ended with nothing cleared the flag before blocking: signalled again.
        assert not consumer.wait(0.01, polling_us=20)
        assert not header.awake()
        producer.write(b"d")
        assert _readable(consumer.event_fd) and producer.signals_saved == 2
        assert consumer.wait(1.0, polling_us=20) and consumer.read() == b"d"
    finally:
        header.close()
        producer.close()
        consumer.close()


def test_a_consumer_whose_windows_stay_empty_polls_only_on_every_fourth_wait():
    consumer = Ring.create(256)
    producer = Ring(consumer.fd, consumer.size, consumer.event_fd, owner=False)
    header = Observer(consumer)
    try:
        for _ in range(2):  # two windows in a row find nothing
            assert not consumer.wait(0.001, polling_us=20)
        assert consumer._empty_windows == 2
        for skipped in range(1, 4):  # the next three waits block at once: no window, nothing counted
            assert not consumer.wait(0.001, polling_us=20)
            assert consumer._skipped == skipped and consumer._empty_windows == 2
        assert not consumer.wait(0.001, polling_us=20)  # the fourth polls, and finds nothing either
        assert consumer._skipped == 0 and consumer._empty_windows == 3
        for _ in range(3):
            assert not consumer.wait(0.001, polling_us=20)
        # A polling window that finds a message ends the probing: the message is written once the
        # fourth wait is seen polling (its awake flag set).
        assert not header.awake()
        late = WriteWhen(producer, b"x", header.awake)
        late.start()
        assert consumer.wait(60.0, polling_us=LONG_WINDOW_US) and consumer.read() == b"x"
        late.join()
        assert late.in_time and producer.signals_saved == 1
        assert consumer._empty_windows == 0
    finally:
        header.close()
        producer.close()
        consumer.close()


class Plan:
    """An ExpectedWait that always plans the same stretch (seconds after the wait began); `asked` is
    set when a wait asks for it, which it does once its polling window has ended with nothing. Its
    waits were as long as the stretch's sleep says (`expects_after`)."""

    def __init__(self, sleep: float, poll: float) -> None:
        self.plan = (sleep, poll)
        self.back_offs = 0
        self.asked = threading.Event()
        self.naps: list[tuple[float, float]] = []  # (asked, took) of each nap that ended at its time

    def overslept(self, asked: float, took: float) -> None:
        self.naps.append((asked, took))

    def stretch(self) -> tuple[float, float]:
        self.asked.set()
        return self.plan

    def back_off(self) -> None:
        self.back_offs += 1

    def lost_cpu(self) -> bool:
        return expected_wait.ExpectedWait.lost_cpu(self)  # type: ignore[arg-type]

    def expects_after(self, window: float) -> bool:
        return self.plan[0] >= window


class Naps:
    """expected_wait.nap, recording each nap: `started` once one began, `woken` whether each ended
    because the eventfd became readable (a message) rather than at its time."""

    def __init__(self, nap) -> None:
        self._nap = nap
        self.started = threading.Event()
        self.ended = threading.Event()
        self.woken: list[bool] = []

    def __call__(self, wait, seconds: float) -> bool:
        self.started.set()
        woken = self._nap(wait, seconds)
        self.woken.append(woken)
        self.ended.set()
        return woken


def test_a_stretched_window_finds_a_later_message_without_a_signal(monkeypatch):
    # The messages come from a thread of this process: waiting for the GIL is no lost CPU here.
    monkeypatch.setattr(expected_wait, "PREEMPTED_GAP_US", 10**9)
    monkeypatch.setattr(expected_wait, "cpu_to_spare", lambda: True)  # whatever else runs meanwhile
    naps = Naps(expected_wait.nap)
    monkeypatch.setattr(expected_wait, "nap", naps)
    consumer = Ring.create(256)
    producer = Ring(consumer.fd, consumer.size, consumer.event_fd, owner=False)
    header = Observer(consumer)
    try:
        # A 20 µs window alone ends before a message that comes after it (the consumer cleared its
        # flag and blocked): the producer has to signal.
        assert not consumer.wait(0.01, polling_us=20) and not header.awake()
        producer.write(b"a")
        assert _readable(consumer.event_fd) and producer.signals_saved == 0
        assert consumer.wait(60.0, polling_us=20) and consumer.read() == b"a"
        os.eventfd_read(consumer.event_fd)  # the message was pending: the wait left the signal
        # Stretched to poll over a long time, the consumer is still polling (awake) when the message
        # comes: it is written once the wait has asked for its stretch, i.e. its window is over.
        plan = Plan(0.0, LONG_WINDOW_US / 1e6)
        late = WriteWhen(producer, b"b", plan.asked.is_set)
        late.start()
        assert consumer.wait(60.0, polling_us=20, expected=plan) and consumer.read() == b"b"
        late.join()
        assert late.in_time and producer.signals_saved == 1 and consumer._empty_windows == 0
        assert not naps.woken  # it never slept: the plan's sleep ends as the wait begins
        # Asleep first (for 30 s): a message then signals and wakes it at once.
        late = WriteWhen(producer, b"c", naps.started.is_set)
        late.start()
        assert consumer.wait(60.0, polling_us=20, expected=Plan(30.0, 31.0)) and consumer.read() == b"c"
        late.join()
        assert late.in_time and naps.woken == [True]  # the nap ended on the signal, not at its time
        assert producer.signals_saved == 1 and not _readable(consumer.event_fd)
        # Asleep until 3 ms, then polling for a long time: a message after the nap is found polling,
        # unsignalled.
        naps.ended.clear()
        late = WriteWhen(producer, b"d", lambda: naps.ended.is_set() and header.awake())
        late.start()
        plan = Plan(0.003, 30.0)
        assert consumer.wait(60.0, polling_us=20, expected=plan) and consumer.read() == b"d"
        late.join()
        assert late.in_time and naps.woken == [True, False] and producer.signals_saved == 2
        # The nap that ended at its time told the plan how long it asked for and how long it took.
        ((asked, took),) = plan.naps
        assert 0 < asked <= 0.003 and took >= asked * 0.999
        # The stretch is bounded: with nothing coming the wait blocks after it.
        t0 = time.perf_counter()
        assert not consumer.wait(0.05, polling_us=20, expected=Plan(0.001, 0.003))
        assert time.perf_counter() - t0 >= 0.003 and consumer._empty_windows == 1
        # A wait without a window (low-power) does not stretch either.
        assert not consumer.wait(0.001, polling_us=0, expected=Plan(0.0, 2.0))
    finally:
        header.close()
        producer.close()
        consumer.close()


def test_a_stretched_poll_that_loses_its_cpu_ends(monkeypatch):
    consumer = Ring.create(256)
    try:
        clock = iter(range(0, 10**12, 10_000))  # ns; every reading 10 µs after the one before
        jumps = {5}  # the 5th reading of the stretch comes 1 ms late: the CPU was taken

        def fake_clock() -> int:
            n = next(clock)
            return n + (1_000_000 if n // 10_000 in jumps else 0)

        monkeypatch.setattr(time, "perf_counter_ns", fake_clock)
        # A CPU to spare when the stretch starts, none when the jump is seen: a thread took the CPU and
        # still runs.
        looks = iter([True, False])
        monkeypatch.setattr(expected_wait, "cpu_to_spare", lambda: next(looks))
        plan = Plan(0.0, 1.0)
        assert not consumer.wait(0.001, polling_us=1, expected=plan)
        assert plan.back_offs == 1
        # The same jump while no more threads than CPUs are runnable (the hypervisor or an interrupt
        # took the CPU): the stretch polls on to its end.
        clock = iter(range(0, 10**12, 10_000))
        jumps.clear()
        jumps.add(5)
        monkeypatch.setattr(expected_wait, "cpu_to_spare", lambda: True)
        plan = Plan(0.0, 0.01)
        assert not consumer.wait(0.001, polling_us=1, expected=plan)
        assert plan.back_offs == 0
    finally:
        consumer.close()


def test_a_stretch_that_sleeps_past_the_window_skips_the_window(monkeypatch):
    """The window cannot meet an answer expected after it: the wait sleeps at once instead of
    spinning through it (ExpectedWait.expects_after). Counted in clock readings, not time."""
    readings = [0]
    write_at: list[int] = []  # the reading at which the producer writes (during a window)

    def fake_clock() -> int:  # every reading 1 µs after the one before
        readings[0] += 1
        if write_at and readings[0] == write_at[0]:
            producer.write(b"m")
        return readings[0] * 1000

    at_nap: list[int] = []

    def nap(wait, seconds: float) -> bool:
        at_nap.append(readings[0])
        return True  # woken by a message

    consumer = Ring.create(256)
    producer = Ring(consumer.fd, consumer.size, consumer.event_fd, owner=False)
    monkeypatch.setattr(time, "perf_counter_ns", fake_clock)
    monkeypatch.setattr(expected_wait, "nap", nap)
    try:
        # A 1000 µs window and a stretch that sleeps until 2 ms: asleep after a handful of readings.
        assert consumer.wait(60.0, polling_us=1000, expected=Plan(0.002, 0.003))
        assert len(at_nap) == 1 and at_nap[0] < 10
        # A stretch that sleeps from 0.5 ms, within the 1000 µs window: the window is polled, and finds
        # the message written 0.3 ms into it; no nap.
        readings[0] = 0
        at_nap.clear()
        write_at.append(300)
        assert consumer.wait(60.0, polling_us=1000, expected=Plan(0.0005, 0.003))
        assert consumer.read() == b"m" and at_nap == [] and 300 <= readings[0] < 310
    finally:
        producer.close()
        consumer.close()
