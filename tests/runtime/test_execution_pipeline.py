"""The service's one execution pipeline and its one request cache, seen from a service in this process:
every path shares admission (a request decoded and validated once serves the others), a hit still checks
the per-call fields, and the one invalidation point drops the records of a freed memory id or burst slot
whichever path made them."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal.deadlines import TimePoint
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.types import ExecutionResult
from mlts.ipc.service import pipeline
from mlts.ipc.service.host import ServiceHost
from mlts.ipc.service.request_cache import RequestCache
from mlts.runtime.execution import EXECUTION_MODES, burst_for, execute
from mlts.runtime.remote import RemoteDevice
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request

X = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture
def served(tmp_path, monkeypatch):
    """(device, the request caches the service made, counts of decodes and validations)."""
    caches: list[RequestCache] = []
    real_init = RequestCache.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        caches.append(self)

    monkeypatch.setattr(RequestCache, "__init__", init)
    # The service's decodes, and its validations (each kept: the requests here are all cacheable).
    counts = {"decoded": 0, "validated": 0}
    real_decode, real_keep = pipeline.decode_request, RequestCache.keep

    def decode(data):
        counts["decoded"] += 1
        return real_decode(data)

    def keep(self, *args, **kwargs):
        counts["validated"] += 1
        return real_keep(self, *args, **kwargs)

    monkeypatch.setattr(pipeline, "decode_request", decode)
    monkeypatch.setattr(RequestCache, "keep", keep)
    host = ServiceHost(SampleAll(), name="sample-all")
    path = str(tmp_path / "svc.sock")
    thread = threading.Thread(target=host.listen, args=(path,), daemon=True)
    thread.start()
    for _ in range(500):
        try:
            device = RemoteDevice.connect(path)
            break
        except (OSError, HalError):
            time.sleep(0.01)
    else:
        raise AssertionError("the service did not listen")
    try:
        yield device, caches, counts
    finally:
        device.close()
        host.stop()
        thread.join(5)


def _records(caches: list[RequestCache]) -> int:
    return sum(len(c) for c in caches)


def _hits(device: RemoteDevice) -> int:
    return device.service_status()["you"]["request_cache_hits"]


def _run(prepared, request, pool, mode, a: np.ndarray, b: np.ndarray, **kw) -> ExecutionResult:
    np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = a.ravel()
    np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = b.ravel()
    np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
    result = execute(prepared, request, mode=mode, **kw)
    np.testing.assert_array_equal(_out(pool), a + b)
    return result


def test_a_json_call_and_a_compact_call_share_admission(served):
    device, caches, counts = served
    prepared = device.prepareModel(add_model())
    pool = _pool(X, X)
    request = _request(pool)
    device.compact_calls = False  # a client of protocol 1.3: JSON calls
    json_result = _run(prepared, request, pool, "sync", X, 2 * X)
    # Converted at the door: nothing to decode, validated once, kept.
    assert counts == {"decoded": 0, "validated": 1} and _records(caches) == 1
    device.compact_calls = True
    hits = _hits(device)
    compact_result = _run(prepared, request, pool, "sync", 3 * X, X)
    # The compact call of the same request on the same mapping finds the JSON call's record.
    assert counts == {"decoded": 0, "validated": 1} and _hits(device) == hits + 1
    assert compact_result.output_shapes == json_result.output_shapes
    for mode in ("async", "fenced"):
        _run(prepared, request, pool, mode, X, X)
    assert counts == {"decoded": 0, "validated": 1} and _records(caches) == 1
    assert _hits(device) == hits + 3
    pool.close()


def test_a_hit_still_checks_the_per_call_fields(served):
    device, caches, counts = served
    prepared = device.prepareModel(add_model())
    pool = _pool(X, X)
    request = _request(pool)
    for mode in EXECUTION_MODES:
        _run(prepared, request, pool, mode, X, X)
        validated = counts["validated"]
        measured = _run(prepared, request, pool, mode, X, X, measure=MeasureTiming.YES)
        assert measured.timing.time_in_driver != 2**64 - 1, mode  # measured on a reused record
        with pytest.raises(HalError) as info:
            execute(prepared, request, mode=mode, deadline=TimePoint(time.monotonic_ns() - 1_000_000))
        assert info.value.status in (
            ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            ErrorStatus.MISSED_DEADLINE_PERSISTENT,
        ), mode
        assert counts["validated"] == validated, mode  # every one a hit
    pool.close()


@pytest.mark.parametrize("first", ["memory", "slot"])
def test_a_freed_memory_id_or_burst_slot_drops_the_records_of_every_path(served, first):
    device, caches, counts = served
    prepared = device.prepareModel(add_model())
    pool = _pool(X, X)
    request = _request(pool)
    for mode in EXECUTION_MODES:
        _run(prepared, request, pool, mode, X, 2 * X)
    # One message, two mappings of the pool: the client's memory id (sync, async, fenced) and the
    # burst's slot.
    assert counts["decoded"] <= 1 and counts["validated"] == 2 and _records(caches) == 2
    burst = burst_for(prepared)
    if first == "memory":
        device.freeMemory([pool])
    else:
        burst.freeMemory(pool)
    deadline = time.monotonic() + 5
    while _records(caches) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # a burst slot is freed by a call on the socket, answered before the drop ends
    assert _records(caches) == 1
    if first == "memory":
        burst.freeMemory(pool)
    else:
        device.freeMemory([pool])
    assert _records(caches) == 0
    # Mapped again on the next call of each path, and checked again: fresh results.
    for mode in EXECUTION_MODES:
        _run(prepared, request, pool, mode, 2 * X, X)
    assert counts["validated"] == 4 and _records(caches) == 2
    pool.close()


def test_map_memories_over_a_mapped_id_makes_the_old_mapping_unreachable(served, monkeypatch):
    """mapMemories naming an id the client mapped already replaces the mapping: the old one goes through
    the one invalidation point (its records could never match again, but they would keep it mapped)."""
    from mlts.hal.memory import SharedMemory

    device, caches, counts = served
    dropped: list[object] = []
    real = pipeline.unreachable

    def unreachable(handles, memory):
        dropped.append(memory)
        real(handles, memory)

    monkeypatch.setattr(pipeline, "unreachable", unreachable)
    a, b = SharedMemory.create(4096), SharedMemory.create(4096)
    try:
        assert device.call("mapMemories", {"memories": [{"memory": 77, "fd": 0, "size": 4096}]}, [a.fd]) == {
            "mapped": 1
        }
        assert dropped == []
        assert device.call("mapMemories", {"memories": [{"memory": 77, "fd": 0, "size": 4096}]}, [b.fd]) == {
            "mapped": 1
        }
        assert len(dropped) == 1 and dropped[0].size == 4096
        assert device.call("freeMemory", {"ids": [77]}) == {"freed": 1}
        assert len(dropped) == 2 and dropped[1] is not dropped[0]
    finally:
        a.close()
        b.close()
