"""Burst rings between two processes: every counter and payload of a long stream arrives intact, and
the producer's skipped signals never leave a blocked consumer asleep."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import time

import pytest

from mlts.ipc import burst_ring
from mlts.ipc.burst_ring import Ring

MESSAGES = 100_000
CAPACITY = 4096  # small: the ring wraps every few hundred messages and often fills

# The producer: message i is 4 + i % 29 bytes derived from i. Every 2 000 messages it pauses long
# enough for the consumer's polling window to end, so the consumer blocks and must be signalled. Every
# 100 messages it lets the consumer catch up (up to 10 ms), then waits 5 µs (busy, well within a 20 µs
# window): a consumer slower than the producer is then polling when the next message comes.
PRODUCER = textwrap.dedent(
    """
    import struct, sys, time
    from mlts.ipc.burst_ring import Ring
    fd, size, event, n = (int(a) for a in sys.argv[1:5])
    ring = Ring.adopt(fd, size, event, "stream")
    for i in range(n):
        payload = (struct.pack("<I", i) * 9)[: 4 + i % 29]
        if not ring.write(payload, timeout=30.0):
            sys.exit("the consumer stopped reading")
        if i % 2000 == 1999:
            time.sleep(0.002)
        elif i % 100 == 99:
            limit = time.monotonic() + 0.01
            while ring._used_by_consumer() and time.monotonic() < limit:
                pass
            until = time.perf_counter() + 5e-6
            while time.perf_counter() < until:
                pass
    print(ring.signals_saved, flush=True)
    """
)


def _expected(i: int) -> bytes:
    return (struct.pack("<I", i) * 9)[: 4 + i % 29]


@pytest.mark.parametrize("polling_us", [20, 0])
def test_stream_of_small_messages_from_another_process(polling_us, monkeypatch):
    # Re-checking after a blocking wait's first millisecond would hide a lost wake-up: wait longer
    # than the test, so a lost one shows as a wait that times out.
    monkeypatch.setattr(burst_ring, "RECHECK_S", 3600.0)
    ring = Ring.create(CAPACITY, "stream-test")
    n = MESSAGES if polling_us else MESSAGES // 5  # the blocking path costs two system calls a message
    child = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, str(ring.fd), str(ring.size), str(ring.event_fd), str(n)],
        pass_fds=(ring.fd, ring.event_fd),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        got = 0
        # Bounds for a busy machine, far above a quiet one's (a few seconds in all): a lost wake-up
        # shows as a wait that ends with nothing, however long it is.
        limit = time.monotonic() + 600
        while got < n:
            assert ring.wait(60.0, polling_us), f"no message {got} within 60 s: a lost wake-up"
            while (payload := ring.read()) is not None:
                assert payload == _expected(got), f"message {got}"
                got += 1
            assert time.monotonic() < limit
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        assert ring.read() is None
        saved = int(out)
        if polling_us:
            assert saved > 0  # the consumer was polling: most messages needed no signal
        else:
            assert saved == 0  # a consumer that never polls is always signalled
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        ring.close()
