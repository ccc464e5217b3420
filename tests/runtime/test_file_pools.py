"""File-backed request pools (the HAL's mmap_fd memory) through the driver service, on every path."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import FileMemory, SharedMemory, file_pools_in, file_pools_out, receive_pool
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.discovery import discover
from mlts.runtime.execution import EXECUTION_MODES, execute
from mlts.runtime.shared import SharedService
from tests.runtime.models import add_model

F = np.float32


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    log = tmp_path_factory.mktemp("files") / "svc.log"
    svc = SharedService.start(discover()["sample-all"].factory, name="sample-all", log_path=str(log))
    yield svc
    assert svc.stop() == 0


def _arg(pool: int, offset: int, dims=(2, 3)) -> RequestArgument:
    return RequestArgument(False, DataLocation(pool, offset, 24), dims)


def _file(path, a: np.ndarray, b: np.ndarray, flags: int = os.O_RDWR) -> SharedMemory:
    data = bytearray(256)
    data[0:24] = a.astype(F).tobytes()
    data[64:88] = b.astype(F).tobytes()
    path.write_bytes(bytes(data))
    return SharedMemory.map_file(os.open(path, flags), 256)


def _expect(status, fn, *args, **kw):
    with pytest.raises(HalError) as e:
        fn(*args, **kw)
    assert e.value.status == status, e.value
    return e.value


@pytest.mark.parametrize("mode", EXECUTION_MODES)
def test_a_file_pool_is_read_before_and_written_after_each_execution(service, tmp_path, mode):
    a, b = np.arange(6, dtype=F).reshape(2, 3), np.full((2, 3), 0.5, F)
    path = tmp_path / "pool.bin"
    pool = _file(path, a, b)
    request = Request((_arg(0, 0), _arg(0, 64)), (_arg(0, 128, ()),), (pool,))
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        execute(prepared, request, mode=mode)
        on_disk = np.frombuffer(path.read_bytes(), F, 6, 128).reshape(2, 3)
        np.testing.assert_array_equal(on_disk, a + b)
        # The client changes the file between executions of the same (cached) pool: the next one reads it.
        with open(path, "r+b") as f:
            f.seek(64)
            f.write(np.full(6, 10, F).tobytes())
        execute(prepared, request, mode=mode)
        np.testing.assert_array_equal(np.frombuffer(path.read_bytes(), F, 6, 128).reshape(2, 3), a + 10)
        # Bytes outside the outputs are never written back: what the client wrote there stays.
        with open(path, "r+b") as f:
            f.seek(200)
            f.write(b"client")
        execute(prepared, request, mode=mode)
        assert path.read_bytes()[200:206] == b"client"
        # A file cut short under the service: that execution fails, the service goes on.
        os.truncate(path, 100)
        err = _expect(ErrorStatus.GENERAL_FAILURE, execute, prepared, request, mode=mode)
        assert "file ended after 100 of its 256 bytes" in err.message
        assert dev.ping() is not None
        prepared.close()
    pool.close()


@pytest.mark.parametrize("mode", EXECUTION_MODES)
def test_a_read_only_file_takes_inputs_but_no_outputs(service, tmp_path, mode):
    a, b = np.arange(6, dtype=F).reshape(2, 3), np.ones((2, 3), F)
    path = tmp_path / "inputs.bin"
    pool = _file(path, a, b, os.O_RDONLY)
    out = SharedMemory.create(64)
    with service.connect() as dev:
        prepared = dev.prepareModel(add_model())
        execute(prepared, Request((_arg(0, 0), _arg(0, 64)), (_arg(1, 0, ()),), (pool, out)), mode=mode)
        np.testing.assert_array_equal(np.frombuffer(out.buffer, F, 6).reshape(2, 3), a + b)
        # An output in it: memory the driver cannot use, GENERAL_FAILURE (as the HAL recommends).
        err = _expect(
            ErrorStatus.GENERAL_FAILURE,
            execute,
            prepared,
            Request((_arg(0, 0), _arg(0, 64)), (_arg(0, 128, ()),), (pool,)),
            mode=mode,
        )
        assert "opened read-only" in err.message
        prepared.close()
    pool.close()
    out.close()


def test_file_memory_in_process(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(64)))
    mem = receive_pool(os.open(path, os.O_RDONLY), 64)
    assert isinstance(mem, FileMemory) and not mem.writable and mem.buffer.readonly
    mem.load()
    assert bytes(mem.buffer[:4]) == bytes([0, 1, 2, 3])
    mem.close()
    # A sealed memfd is mapped as before, not copied.
    shm = SharedMemory.create(64)
    fd = os.dup(shm.fd)
    received = receive_pool(fd, 64)
    assert type(received) is SharedMemory
    received.close()
    shm.close()
    # Read in, the output region written back (and only it).
    rw = receive_pool(os.open(path, os.O_RDWR), 64)
    request = Request((_arg(0, 0),), (RequestArgument(False, DataLocation(0, 32, 8), ()),), (rw,))
    pending = file_pools_in(request)
    assert pending == [(rw, [(32, 8)])]
    rw.buffer[32:40] = b"ABCDEFGH"
    rw.buffer[0:4] = b"xxxx"  # an input region: not written back
    file_pools_out(pending)
    data = path.read_bytes()
    assert data[32:40] == b"ABCDEFGH" and data[0:4] == bytes([0, 1, 2, 3])
    rw.close()
