"""CPU cost of each side of a burst execution, without a second process, a wake-up or a driver.

usage: python benchmarks/burst_overhead.py [--runs N]

- `service`: `BurstContext._serve` of a repeated request message (decoded,
  resolved and validated before) with a prepared model that returns at once,
  plus reading the result back from the result ring: the listener's work
  between reading a request and `executeSynchronously`, and after it, on one
  thread. Printed with the client awake (no signal) and asleep (eventfd
  signalled).
- `client`: `RemoteBurst.execute` of a repeated request when its result is
  already in the result ring and the listener is awake: the client's work
  from the call to the returned ExecutionResult.

Each prints `SIDE median X us p10 Y us`. Together they are the floor of a
burst round trip beyond the driver's own executeSynchronously and the moving
of two cache lines between cores; the wall-clock round trip is in
benchmarks/execution_paths.py. These are measurements, not tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import types

from mlts.hal.enums import ErrorStatus
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, ExecutionResult, OutputShape, Request, RequestArgument, Timing
from mlts.ipc import burst_messages as msg
from mlts.ipc.burst_ring import Ring
from mlts.ipc.service.burst_calls import BurstContext
from mlts.ipc.service.device_calls import PreparedEntry
from mlts.ipc.service.handles import HandleTable, Kind, Limits, Resource
from mlts.ipc.service.scheduler import WorkerPool
from mlts.runtime.burst import RemoteBurst

_AWAKE_WORD = 72 // 4  # the ring header's awake flag, as a u32 index (docs/burst-protocol.md)
_SHAPES = (OutputShape((1, 4)),)
_ARGS = (
    (
        RequestArgument(False, DataLocation(0, 0, 16), (1, 4)),
        RequestArgument(False, DataLocation(0, 64, 16), (1, 4)),
    ),
    (RequestArgument(False, DataLocation(0, 128, 16), (1, 4)),),
)


class _Instant:
    """A prepared model whose executions return at once."""

    result = ExecutionResult(_SHAPES, Timing())

    def executeSynchronously(self, *args: object) -> ExecutionResult:
        return self.result


def _model():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from execution_paths import trivial_model

    return trivial_model()


def _report(side: str, samples: list[int]) -> None:
    s = sorted(samples[len(samples) // 5 :])  # the first fifth is warm-up
    print(
        f"{side} median {statistics.median(s) / 1000:.2f} us p10 {s[len(s) // 10] / 1000:.2f} us", flush=True
    )


def service(runs: int, client_awake: bool) -> list[int]:
    client = types.SimpleNamespace(
        key=1,
        pid=os.getpid(),
        handles=HandleTable(Limits()),
        host=types.SimpleNamespace(exec_pool=WorkerPool("bench", 2), prevalidate=True),
    )
    prepared = Resource(PreparedEntry(_Instant(), _model(), None, 0))  # type: ignore[arg-type]
    number = client.handles.add(Kind.PREPARED, prepared, "bench")
    requests, results = Ring.create(), Ring.create()
    context = BurstContext(client, number, prepared.acquire(), requests, results, 50)  # type: ignore[arg-type]
    memory = SharedMemory.create(4096, "mlts-bench")
    context.provide(1, memory)
    if client_awake:
        results._flags[_AWAKE_WORD] = 1
    message = bytearray(msg.encode_request(msg.BurstRequest(1, (msg.PoolRef.slot(1),), *_ARGS)))
    samples = []
    clock = time.perf_counter_ns
    for seq in range(runs):
        msg.set_seq(message, seq)
        data = bytes(message)
        t0 = clock()
        context._serve(data)
        context._replied([])  # what the listener does next
        results.read()
        samples.append(clock() - t0)
    if not client_awake:
        os.eventfd_read(results.event_fd)
    context.stop()
    memory.close()
    client.host.exec_pool.stop(1.0)
    return samples


def client(runs: int) -> list[int]:
    burst = object.__new__(RemoteBurst)  # no service: the rings only
    burst.device = types.SimpleNamespace(execute_timeout=10.0, name="bench")  # type: ignore[assignment]
    burst.polling_us = 50
    burst._lock = threading.Lock()
    burst._seq = 0
    burst._slots = {}
    burst._next_slot = 1
    burst._closed = False
    burst._broken = None
    burst._last = None
    burst._results = msg.ResultDecoder()
    burst.memories_sent = 0
    burst.requests, burst.results = Ring.create(), Ring.create()
    burst.requests._flags[_AWAKE_WORD] = 1  # the listener polls: no signal
    listener = Ring(burst.requests.fd, burst.requests.size, burst.requests.event_fd, owner=False)
    answers = Ring(burst.results.fd, burst.results.size, burst.results.event_fd, owner=False)
    memory = SharedMemory.create(4096, "mlts-bench")
    request = Request(*_ARGS, (memory,))
    samples = []
    clock = time.perf_counter_ns
    for seq in range(1, runs + 1):
        answers.write(msg.encode_result(msg.BurstResult(seq, ErrorStatus.NONE, _SHAPES)))
        t0 = clock()
        burst.execute(request)
        samples.append(clock() - t0)
        listener.read()
    for ring in (listener, answers, burst.requests, burst.results):
        ring.close()
    memory.close()
    return samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30_000)
    a = p.parse_args()
    _report("service (client awake)", service(a.runs, True))
    _report("service (client asleep: signalled)", service(a.runs, False))
    _report("client", client(a.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
