"""Memory domains through the driver service: every execution path, copies, isolation, release."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import BufferDesc, BufferRole, DataLocation, Request, RequestArgument
from mlts.runtime.discovery import discover
from mlts.runtime.execution import EXECUTION_MODES, execute
from mlts.runtime.shared import SharedService
from tests.runtime.models import add_model

F = np.float32


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("md") / "svc.log"
    svc = SharedService.start(discover()["sample-all"].factory, name="sample-all", log_path=str(log))
    svc.log_file = log
    yield svc
    assert svc.stop() == 0


def _request(a, b, out, pool: SharedMemory) -> Request:
    """ADD with each operand a token (int) or a byte offset into `pool`."""
    pools: list = [pool]
    args = []
    for value in (a, b, out):
        if isinstance(value, tuple):
            args.append(RequestArgument(False, DataLocation(0, value[0], 24), (2, 3)))
        else:
            pools.append(value)
            args.append(RequestArgument(False, DataLocation(len(pools) - 1, 0, 0), ()))
    return Request(tuple(args[:2]), (args[2],), tuple(pools))


def _pool(*arrays) -> SharedMemory:
    pool = SharedMemory.create(256)
    for n, arr in enumerate(arrays):
        np.frombuffer(pool.buffer, F, 6, 64 * n)[:] = arr.ravel()
    return pool


def _read(buf) -> np.ndarray:
    out = bytearray(24)
    buf.copyTo(memoryview(out))
    return np.frombuffer(out, F).reshape(2, 3)


def _expect(status, fn, *args, **kw):
    with pytest.raises(HalError) as e:
        fn(*args, **kw)
    assert e.value.status == status, e.value
    return e.value


@pytest.mark.parametrize("mode", EXECUTION_MODES)
def test_tokens_on_every_execution_path(service, mode):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        x = np.arange(6, dtype=F).reshape(2, 3)
        state = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        nxt = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [BufferRole(0, 0)])
        assert state.dimensions == (2, 3) and state.token != nxt.token
        state.copyFrom(x.tobytes(), (2, 3))
        pool = _pool(np.ones((2, 3), F))
        # Three steps of state += 1 with the state never leaving the driver.
        for _ in range(3):
            execute(prepared, _request(state.token, (0,), nxt.token, pool), mode=mode)
            state, nxt = nxt, state
        np.testing.assert_array_equal(_read(state), x + 3)
        # Mixed: a buffer input (the RemoteBuffer itself as the pool), a shared-memory output.
        execute(prepared, _request(state, (0,), (128,), pool), mode=mode)
        np.testing.assert_array_equal(np.frombuffer(pool.buffer, F, 6, 128).reshape(2, 3), x + 4)
        fresh = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
        _expect(
            ErrorStatus.GENERAL_FAILURE,
            execute,
            prepared,
            _request(fresh.token, (0,), (128,), pool),
            mode=mode,
        )
        _expect(
            ErrorStatus.INVALID_ARGUMENT,
            execute,
            prepared,
            _request((0,), fresh.token, (128,), pool),
            mode=mode,
        )
        for b in (state, nxt, fresh):
            b.close()
        pool.close()


def test_copies_through_memfd_and_file_mappings(service, tmp_path):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        buf = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
        x = np.arange(6, dtype=F).reshape(2, 3) * 1.5
        path = tmp_path / "in.bin"
        path.write_bytes(x.tobytes())
        src = SharedMemory.map_file(os.open(path, os.O_RDWR), 24)
        buf.copyFrom(src, ())
        src.close()
        out_path = tmp_path / "out.bin"
        out_path.write_bytes(bytes(24))
        dst = SharedMemory.map_file(os.open(out_path, os.O_RDWR), 24)
        buf.copyTo(dst)
        dst.close()
        np.testing.assert_array_equal(np.frombuffer(out_path.read_bytes(), F).reshape(2, 3), x)
        mem = SharedMemory.create(24)
        buf.copyTo(mem)
        np.testing.assert_array_equal(np.frombuffer(mem.buffer, F).reshape(2, 3), x)
        mem.close()
        _expect(ErrorStatus.INVALID_ARGUMENT, buf.copyFrom, bytes(20), ())
        _expect(ErrorStatus.INVALID_ARGUMENT, buf.copyFrom, bytes(24), (3, 2))
        _expect(ErrorStatus.INVALID_ARGUMENT, buf.copyTo, bytearray(28))
        buf.close()
        _expect(ErrorStatus.INVALID_ARGUMENT, buf.copyTo, bytearray(24))


def test_another_clients_token_is_invalid_and_logged(service):
    a, b = service.connect(), service.connect()
    try:
        pa = a.prepareModel(add_model())
        pb = b.prepareModel(add_model())
        buf = a.allocate(BufferDesc(), [pa], [BufferRole(0, 0)], [BufferRole(0, 0)])
        buf.copyFrom(np.ones(6, F).tobytes(), ())
        pool = _pool(np.ones((2, 3), F))
        # B presents A's (correctly guessed) token in an execution, a copy and a release.
        _expect(
            ErrorStatus.INVALID_ARGUMENT, pb.executeSynchronously, _request(buf.token, (0,), (128,), pool)
        )
        for method, args in (
            ("bufferCopyFrom", {"token": buf.token, "memory": {"fd": 0, "size": 24}, "dimensions": []}),
            ("releaseBuffer", {"token": buf.token}),
        ):
            fds = [pool.fd] if "memory" in args else []
            _expect(ErrorStatus.INVALID_ARGUMENT, b.call, method, args, fds)
        # B cannot name A's prepared model in an allocation either.
        _expect(
            ErrorStatus.INVALID_ARGUMENT,
            b.call,
            "allocate",
            {"desc": {"dimensions": []}, "prepared": [pa.handle], "input_roles": [{"model": 0, "io": 0}]},
        )
        _expect(ErrorStatus.INVALID_ARGUMENT, b.allocate, BufferDesc(), [pa], [BufferRole(0, 0)], [])
        # A's buffer is intact.
        np.testing.assert_array_equal(_read(buf), np.ones((2, 3), F))
        # The refusal is logged with who presented the token (in aggregate: the first one in full).
        log = service.log_file.read_text()
        assert "refused a call of client pid" in log and "is not a live buffer of this client" in log
        pool.close()
    finally:
        a.close()
        b.close()


def test_burst_refuses_foreign_and_released_tokens_and_goes_on(service):
    a, b = service.connect(), service.connect()
    try:
        pa = a.prepareModel(add_model())
        pb = b.prepareModel(add_model())
        theirs = a.allocate(BufferDesc(), [pa], [BufferRole(0, 0)], [BufferRole(0, 0)])
        theirs.copyFrom(np.full(6, 7, F).tobytes(), ())
        mine = b.allocate(BufferDesc(), [pb], [BufferRole(0, 0)], [BufferRole(0, 0)])
        mine.copyFrom(np.arange(6, dtype=F).tobytes(), ())
        gone = b.allocate(BufferDesc(), [pb], [BufferRole(0, 0)], [])
        gone.copyFrom(np.ones(6, F).tobytes(), ())
        gone_token = gone.token
        gone.close()
        pool = _pool(np.ones((2, 3), F))
        with pb.configureExecutionBurst(polling_us=0) as burst:
            # A's (correctly guessed) token and B's released token: refused by the service.
            for token in (theirs.token, gone_token):
                err = _expect(
                    ErrorStatus.INVALID_ARGUMENT, burst.execute, _request(token, (0,), (128,), pool)
                )
                assert f"buffer token {token}" in err.message
            assert f"buffer token {theirs.token} is not a live buffer" in service.log_file.read_text()
            # A's buffer object, or a released one, is refused before anything is sent.
            _expect(ErrorStatus.INVALID_ARGUMENT, burst.execute, _request(theirs, (0,), (128,), pool))
            _expect(ErrorStatus.INVALID_ARGUMENT, burst.execute, _request(gone, (0,), (128,), pool))
            # One buffer in two roles of one execution, and an output role it was not allocated for.
            _expect(ErrorStatus.INVALID_ARGUMENT, burst.execute, _request(mine.token, (0,), mine.token, pool))
            only_in = b.allocate(BufferDesc(), [pb], [BufferRole(0, 0)], [])
            _expect(ErrorStatus.INVALID_ARGUMENT, burst.execute, _request((0,), (0,), only_in.token, pool))
            # The burst goes on: a RemoteBuffer pool and a token pool, mixed with shared memory.
            burst.execute(_request(mine, (0,), (128,), pool))
            np.testing.assert_array_equal(
                np.frombuffer(pool.buffer, F, 6, 128).reshape(2, 3), np.arange(6, dtype=F).reshape(2, 3) + 1
            )
            burst.execute(_request((0,), (0,), mine.token, pool))
        # The burst wrote B's buffer; A's buffer is untouched.
        np.testing.assert_array_equal(_read(mine), np.full((2, 3), 2, F))
        np.testing.assert_array_equal(_read(theirs), np.full((2, 3), 7, F))
        for buf in (theirs, mine, only_in):
            buf.close()
        pool.close()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("token", [0, -1, 2**32, 12345, "7", None, True])
def test_bad_tokens_on_the_wire(service, token):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        pool = _pool(np.ones((2, 3), F))
        request = {"prepared": prepared.handle}
        _expect(ErrorStatus.INVALID_ARGUMENT, dev.call, "releaseBuffer", {"token": token})
        _expect(
            ErrorStatus.INVALID_ARGUMENT,
            dev.call,
            "bufferCopyTo",
            {"token": token, "memory": {"fd": 0, "size": 256}},
            [pool.fd],
        )
        assert request
        pool.close()


@pytest.mark.parametrize(
    "args",
    [
        {"desc": {"dimensions": [2**31, 2**31]}, "input_roles": [{"model": 0, "io": 0}]},
        {"desc": {"dimensions": [2**33]}, "input_roles": [{"model": 0, "io": 0}]},
        {"desc": {"dimensions": "x"}, "input_roles": [{"model": 0, "io": 0}]},
        {"desc": {}, "input_roles": [{"model": 0, "io": 0, "frequency": 2}]},
        {"desc": {}, "input_roles": [{"model": 0, "io": 0, "frequency": "1"}]},
        {"desc": {}, "input_roles": [{"model": 0}]},
        {"desc": {}, "input_roles": "all"},
        {"desc": {}, "input_roles": [{"model": 0, "io": 0}] * 300},
    ],
)
def test_bad_allocations_on_the_wire(service, args):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model((0, 0), out_dims=(0, 0)))
        with pytest.raises(HalError) as e:
            dev.call("allocate", {"prepared": [prepared.handle], **args})
        assert e.value.status in (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
        assert dev.service_status()["you"]["handles"].get("buffer", 0) == 0


def test_buffers_are_freed_on_release_and_disconnect(service):
    watcher = service.connect()
    try:
        before = watcher.service_status()["driver_buffers"]
        dev = service.connect()
        prepared = dev.prepareModel(add_model())
        bufs = [dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], []) for _ in range(3)]
        assert watcher.service_status()["driver_buffers"] == before + 3
        bufs[0].close()
        assert watcher.service_status()["driver_buffers"] == before + 2
        dev.close()  # disconnects: the service frees the other two
        deadline = time.monotonic() + 10
        while watcher.service_status()["driver_buffers"] != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.service_status()["driver_buffers"] == before
    finally:
        watcher.close()


def test_refused_copies_and_allocations_leak_no_fds(service):
    fd_dir = f"/proc/{service.pid}/fd"
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        open_dims = dev.prepareModel(add_model((0, 0), out_dims=(0, 0)))
        buf = dev.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
        mem = SharedMemory.create(20)
        dev.ping()
        before = len(os.listdir(fd_dir))
        for _ in range(5):
            _expect(ErrorStatus.INVALID_ARGUMENT, buf.copyFrom, mem, ())  # wrong size
            _expect(ErrorStatus.GENERAL_FAILURE, buf.copyTo, mem)  # uninitialised
            _expect(
                ErrorStatus.INVALID_ARGUMENT,
                dev.call,
                "bufferCopyTo",
                {"token": 99, "memory": {"fd": 0, "size": 20}},
                [mem.fd],
            )
            _expect(
                ErrorStatus.GENERAL_FAILURE,
                dev.allocate,
                BufferDesc((1 << 31, 1 << 31)),
                [open_dims],
                [BufferRole(0, 0)],
                [],
            )
        dev.ping()
        assert len(os.listdir(fd_dir)) == before
        mem.close()
        buf.close()


def test_roles_naming_a_released_model_are_refused(service):
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        handle = prepared.handle
        prepared.close()
        _expect(ErrorStatus.INVALID_ARGUMENT, dev.allocate, BufferDesc(), [prepared], [BufferRole(0, 0)], [])
        err = _expect(
            ErrorStatus.INVALID_ARGUMENT,
            dev.call,
            "allocate",
            {"desc": {"dimensions": []}, "prepared": [handle], "input_roles": [{"model": 0, "io": 0}]},
        )
        assert "not a live prepared model" in err.message
