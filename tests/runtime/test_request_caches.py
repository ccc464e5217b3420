"""The caches of repeated requests (driver layouts, the service's validated requests, burst messages)
give the same results as fresh checks and are exactly as strict: freed, replaced and foreign pools,
released models and other clients' handles are still refused."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from driver.request_io import RequestIo
from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus, MeasureTiming
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.execution import execute
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session
from mlts.runtime.shared import SharedService
from tests.runtime.models import add_model

SAMPLE = "driver.variants:SampleAll"


def _pool(a: np.ndarray, b: np.ndarray) -> SharedMemory:
    pool = SharedMemory.create(256)
    _fill(pool, a, b)
    return pool


def _fill(pool: SharedMemory, a: np.ndarray, b: np.ndarray) -> None:
    np.frombuffer(pool.buffer, np.float32, a.size, 0)[:] = a.ravel()
    np.frombuffer(pool.buffer, np.float32, b.size, 64)[:] = b.ravel()


def _request(pool, out_length: int = 24, pools: tuple | None = None) -> Request:
    return Request(
        (
            RequestArgument(False, DataLocation(0, 0, 24), (2, 3)),
            RequestArgument(False, DataLocation(0, 64, 24), (2, 3)),
        ),
        (RequestArgument(False, DataLocation(0, 128, out_length), ()),),
        (pool,) if pools is None else pools,
    )


def _out(pool) -> np.ndarray:
    return np.frombuffer(pool.buffer, np.float32, 6, 128).reshape(2, 3).copy()


def _wire_request(mem_id: int) -> dict:
    return {
        "inputs": [
            {
                "hasNoValue": False,
                "location": {"poolIndex": 0, "offset": 0, "length": 24},
                "dimensions": [2, 3],
            },
            {
                "hasNoValue": False,
                "location": {"poolIndex": 0, "offset": 64, "length": 24},
                "dimensions": [2, 3],
            },
        ],
        "outputs": [
            {"hasNoValue": False, "location": {"poolIndex": 0, "offset": 128, "length": 24}, "dimensions": []}
        ],
        "pools": [{"memory": mem_id}],
    }


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32))


# ------------------------------------------------------------ the driver's layouts


def test_driver_reuses_a_validated_request_and_gives_identical_results():
    prepared = SampleAll().prepareModel(add_model())
    a, b = _inputs(1)
    pool = _pool(a, b)
    request = _request(pool)
    prepared.executeSynchronously(request)
    first = _out(pool)
    assert len(prepared._io) == 1
    for seed in range(2, 6):  # new contents, the same request object: read fresh every time
        a, b = _inputs(seed)
        _fill(pool, a, b)
        prepared.executeSynchronously(request, MeasureTiming.YES)
        cached = _out(pool)
        prepared.executeSynchronously(_request(pool))  # an equal but new object: checked afresh
        np.testing.assert_array_equal(cached, _out(pool))
        # IEEE float32 addition is the exact sum rounded once.
        np.testing.assert_array_equal(cached, (a.astype(np.float64) + b).astype(np.float32))
    assert first.shape == (2, 3)
    prepared.close()
    assert len(prepared._io) == 0
    with pytest.raises(HalError) as info:
        prepared.executeSynchronously(request)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
    pool.close()


def test_driver_caches_neither_invalid_requests_nor_driver_buffers():
    prepared = SampleAll().prepareModel(add_model())
    pool = _pool(*_inputs(1))
    good = _request(pool)
    bad = Request(
        (good.inputs[0], RequestArgument(False, DataLocation(0, 64, 20), (2, 3))), good.outputs, (pool,)
    )
    for _ in range(2):  # refused every time, never remembered
        with pytest.raises(HalError, match="location.length"):
            prepared.executeSynchronously(bad)
    assert len(prepared._io) == 0
    assert RequestIo(add_model(), good).cacheable
    with_token = Request(
        _request(pool).inputs, (RequestArgument(False, DataLocation(1, 0, 0), ()),), (pool, 7)
    )
    assert not RequestIo(add_model(), with_token).cacheable
    pool.close()


def test_driver_refuses_a_cached_request_whose_pool_was_closed():
    prepared = SampleAll().prepareModel(add_model())
    pool = _pool(*_inputs(1))
    request = _request(pool)
    prepared.executeSynchronously(request)
    pool.close()
    with pytest.raises((HalError, ValueError)):
        prepared.executeSynchronously(request)


def test_too_small_output_is_reported_the_same_when_cached():
    prepared = SampleAll().prepareModel(add_model())
    pool = _pool(*_inputs(1))
    request = _request(pool, out_length=20)
    for _ in range(3):
        with pytest.raises(HalError) as info:
            prepared.executeSynchronously(request)
        assert info.value.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert info.value.output_shapes[0].dimensions == (2, 3)
        assert not info.value.output_shapes[0].is_sufficient
    pool.close()


# ------------------------------------------------------------ the service's validated requests


def _hits(device: RemoteDevice) -> int:
    return device.service_status()["you"]["request_cache_hits"]


def test_service_reuses_requests_and_refuses_freed_and_replaced_pools(tmp_path):
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "d.log"))
    try:
        prepared = device.prepareModel(add_model())
        pool = _pool(*_inputs(1))
        request = _request(pool)
        for seed in range(4):
            a, b = _inputs(seed)
            _fill(pool, a, b)
            execute(prepared, request)
            np.testing.assert_array_equal(_out(pool), a + b)
        assert _hits(device) >= 2
        mem_id = device._memories[id(pool)][0]
        args = {"prepared": prepared.handle, "request": _wire_request(mem_id)}
        device.call("executeSynchronously", args)  # the raw call names the cached mapping: a hit
        # Freed: the id is unknown now, however often it ran.
        device.freeMemory([pool])
        with pytest.raises(HalError, match="has not mapped"):
            device.call("executeSynchronously", args)
        # The same pool again is mapped anew and still gives fresh results.
        a, b = _inputs(9)
        _fill(pool, a, b)
        execute(prepared, request)
        np.testing.assert_array_equal(_out(pool), a + b)
        # The id replaced by another memory: its contents, not the cached mapping's, are used.
        mem_id = device._memories[id(pool)][0]
        other = _pool(*_inputs(10))
        replace = {"prepared": prepared.handle, "request": {**_wire_request(mem_id)}}
        replace["request"]["pools"] = [{"memory": mem_id, "fd": 0, "size": other.size}]
        device.call("executeSynchronously", replace, [other.fd])
        a, b = _inputs(10)
        np.testing.assert_array_equal(_out(other), a + b)
        args = {"prepared": prepared.handle, "request": _wire_request(mem_id)}
        device.call("executeSynchronously", args)  # now a request on the new mapping
        np.testing.assert_array_equal(_out(other), a + b)
        # A released model refuses even a request it has cached.
        prepared.close()
        with pytest.raises(HalError, match="unknown prepared model handle"):
            device.call("executeSynchronously", args)
        other.close()
        pool.close()
    finally:
        device.close()


def test_another_client_cannot_use_a_cached_request(tmp_path):
    with SharedService.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "svc.log")) as service:
        a, b = service.connect(), service.connect()
        try:
            prepared = a.prepareModel(add_model())
            pool = _pool(*_inputs(1))
            for _ in range(3):
                execute(prepared, _request(pool))
            mem_id = a._memories[id(pool)][0]
            args = {"prepared": prepared.handle, "request": _wire_request(mem_id)}
            a.call("executeSynchronously", args)
            assert _hits(a) >= 1
            # B names A's prepared model and A's memory id: both unknown to B.
            with pytest.raises(HalError, match="unknown prepared model handle|has not mapped"):
                b.call("executeSynchronously", args)
            mine = b.prepareModel(add_model())
            with pytest.raises(HalError, match="has not mapped"):
                b.call("executeSynchronously", {"prepared": mine.handle, "request": _wire_request(mem_id)})
            assert _hits(b) == 0
            pool.close()
        finally:
            a.close()
            b.close()


def test_concurrent_executions_of_one_model_never_share_buffers(tmp_path):
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "d.log"))
    try:
        prepared = device.prepareModel(add_model())
        errors: list[str] = []

        def worker(k: int) -> None:
            pool = SharedMemory.create(256)
            request = _request(pool)
            try:
                for n in range(40):
                    a, b = _inputs(1000 * k + n)
                    _fill(pool, a, b)
                    execute(prepared, request, mode="burst" if k % 2 else "sync")
                    if not np.array_equal(_out(pool), a + b):
                        errors.append(f"thread {k} run {n}: wrong result")
            except HalError as e:
                errors.append(f"thread {k}: {e}")

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        prepared.close()
    finally:
        device.close()


# ------------------------------------------------------------ bursts


def test_burst_results_equal_sync_bit_for_bit_and_a_freed_slot_is_asked_for_again(tmp_path):
    model = add_model()
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "d.log"))
    try:
        with Session(device, model, mode="sync") as sync, Session(device, model, mode="burst") as burst:
            for seed in range(5):
                x = _inputs(seed)
                expected, _ = sync.run(list(x))
                got, _ = burst.run(list(x))
                assert expected[0].tobytes() == got[0].tobytes()
        prepared = device.prepareModel(model)
        pool = _pool(*_inputs(1))
        request = _request(pool)
        with prepared.configureExecutionBurst() as b:
            for _ in range(3):
                b.execute(request)
            assert b.memories_sent == 1
            b.freeMemory(pool)
            a, c = _inputs(2)
            _fill(pool, a, c)
            b.execute(request)  # the pool under a new slot: the driver asks for it
            assert b.memories_sent == 2
            np.testing.assert_array_equal(_out(pool), a + c)
        prepared.close()
        pool.close()
    finally:
        device.close()


def test_a_burst_slot_replaced_after_validation_runs_on_the_new_memory(tmp_path):
    """The listener's fast path for a repeated message holds the mappings it validated; replacing the
    slot's memory (burstProvideMemories again) must make the next execution use the new one."""
    model = add_model()
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "d.log"))
    try:
        prepared = device.prepareModel(model)
        first = _pool(*_inputs(1))
        request = _request(first)
        a, c = _inputs(2)
        second = _pool(a, c)
        with prepared.configureExecutionBurst() as b:
            for _ in range(3):  # decoded, validated, then the fast path
                b.execute(request)
            np.testing.assert_array_equal(_out(first), sum(_inputs(1)))
            (slot,) = {s for s, _ in b._slots.values()}
            device.call(
                "burstProvideMemories",
                {"burst": b.handle, "memories": [{"slot": slot, "fd": 0, "size": second.size}]},
                [second.fd],
            )
            b.execute(request)  # the same message: slot `slot` now maps `second`
            np.testing.assert_array_equal(_out(second), a + c)
            assert b.memories_sent == 1
        prepared.close()
        first.close()
        second.close()
    finally:
        device.close()


def test_a_cached_burst_message_whose_slot_was_freed_asks_for_it_under_the_new_number(tmp_path):
    """A repeated message (decoded once) whose slot the driver dropped asks for the slot again under
    the current execution's sequence number, which the client answers."""
    model = add_model()
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "d.log"))
    try:
        prepared = device.prepareModel(model)
        pool = _pool(*_inputs(1))
        request = _request(pool)
        with prepared.configureExecutionBurst() as b:
            for _ in range(3):
                b.execute(request)
            (slot,) = {s for s, _ in b._slots.values()}
            # The driver drops the slot behind the client's back; the client resends the same message.
            assert device.call("burstFreeMemory", {"burst": b.handle, "slot": slot}) == {"freed": True}
            a, c = _inputs(3)
            _fill(pool, a, c)
            b.execute(request)  # asked under an old number, the ask would go unanswered: INVALID_ARGUMENT
            np.testing.assert_array_equal(_out(pool), a + c)
            assert b.memories_sent == 2
        prepared.close()
        pool.close()
    finally:
        device.close()


def test_a_json_request_equal_to_a_cached_one_but_for_its_types_is_checked_afresh(tmp_path):
    """`false` and `0` compare equal in Python; a JSON request that differs from the last one only by
    such a type is not the same document and gets the request's checks (hasNoValue must be a boolean)."""
    device = RemoteDevice.start(SAMPLE, name="sample-all", log_path=str(tmp_path / "d.log"))
    try:
        prepared = device.prepareModel(add_model())
        pool = _pool(*_inputs(1))
        execute(prepared, _request(pool))
        mem_id = device._memories[id(pool)][0]
        good = _wire_request(mem_id)
        device.call("executeSynchronously", {"prepared": prepared.handle, "request": good})
        for field, value in (("hasNoValue", 0), ("dimensions", [2.0, 3])):
            bad = _wire_request(mem_id)
            bad["inputs"][1][field] = value
            with pytest.raises(HalError, match=rf"request.inputs\[1\].{field}") as info:
                device.call("executeSynchronously", {"prepared": prepared.handle, "request": bad})
            assert info.value.status == ErrorStatus.INVALID_ARGUMENT
            device.call("executeSynchronously", {"prepared": prepared.handle, "request": good})
        pool.close()
    finally:
        device.close()


def test_same_document_tells_json_types_apart():
    from mlts.ipc.service.execution_calls import same_document

    assert same_document({"a": [1, {"b": False}], "c": "x"}, {"c": "x", "a": [1, {"b": False}]})
    assert not same_document({"b": False}, {"b": 0})
    assert not same_document([1], [1.0])
    assert not same_document([True], [1])
    assert not same_document({"a": 1}, {"a": 1, "b": 2})
    assert not same_document([1, 2], [1])
