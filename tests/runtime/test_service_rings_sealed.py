"""Burst rings are sealed memfds: a client that could shrink a ring the service maps would kill it (SIGBUS).

The client seals both rings (F_SEAL_SHRINK|F_SEAL_GROW, as request pools); the service refuses a ring
without those seals before mapping it, so truncating one afterwards touches nothing the service holds.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time

import numpy as np
import pytest

from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.ipc.burst_ring import HEADER_BYTES, RING_SEALS, Ring
from mlts.runtime.burst import RemoteBurst
from mlts.runtime.shared import SharedService
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request

CAPACITY = 4096


@pytest.fixture
def service(tmp_path):
    svc = SharedService.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "svc.log"))
    yield svc
    assert svc.stop() == 0


def _unsealed_memfd(size: int) -> int:
    fd = os.memfd_create("hostile-ring", os.MFD_CLOEXEC)  # no MFD_ALLOW_SEALING: it can never be sealed
    os.ftruncate(fd, size)
    return fd


def _configure(device, prepared: int, request_fd: int, result_fd: int, events: list[int]) -> dict:
    size = HEADER_BYTES + CAPACITY
    args = {
        "prepared": prepared,
        "polling_us": 0,
        "request_ring": {"fd": 0, "event": 1, "size": size},
        "result_ring": {"fd": 2, "event": 3, "size": size},
    }
    return device.call("configureExecutionBurst", args, [request_fd, events[0], result_fd, events[1]])


def _victim_runs(service) -> None:
    with service.connect() as other:
        prepared = other.prepareModel(add_model())
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        prepared.executeSynchronously(_request(pool))
        np.testing.assert_array_equal(_out(pool), 2 * x)
        pool.close()


def test_rings_are_created_sealed_against_resizing():
    ring = Ring.create(CAPACITY)
    try:
        assert fcntl.fcntl(ring.fd, fcntl.F_GET_SEALS) & RING_SEALS == RING_SEALS
        with pytest.raises(PermissionError):
            os.ftruncate(ring.fd, 0)
        with pytest.raises(PermissionError):
            os.ftruncate(ring.fd, ring.size * 2)
    finally:
        ring.close()


def test_adopt_refuses_an_unsealed_ring_a_file_and_a_pipe():
    size = HEADER_BYTES + CAPACITY
    cases = []
    cases.append(("unsealed memfd", _unsealed_memfd(size), "not sealed as required: it lacks F_SEAL_SHRINK"))
    sealable = os.memfd_create("half-sealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(sealable, size)
    fcntl.fcntl(sealable, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)  # may still grow
    cases.append(("memfd sealed against shrinking only", sealable, "it lacks F_SEAL_GROW"))
    disk = tempfile.TemporaryFile()
    disk.truncate(size)
    cases.append(("file on disk", os.dup(disk.fileno()), "not sealed as required"))
    disk.close()
    r, w = os.pipe()
    os.close(w)
    cases.append(("pipe", r, "is a FIFO"))
    for what, fd, expected in cases:
        event = os.eventfd(0)
        with pytest.raises(ValueError, match=expected):
            Ring.adopt(fd, size, event, what)
        for closed in (fd, event):  # adopt owns both fds, on failure too
            with pytest.raises(OSError):
                os.fstat(closed)


def test_truncating_an_unsealed_ring_cannot_kill_the_service(service):
    """The attack: a ring without seals, truncated after configureExecutionBurst, then signalled."""
    with service.connect() as attacker:
        prepared = attacker.prepareModel(add_model())
        size = HEADER_BYTES + CAPACITY
        request_fd, result_fd = _unsealed_memfd(size), _unsealed_memfd(size)
        events = [os.eventfd(0, os.EFD_NONBLOCK), os.eventfd(0, os.EFD_NONBLOCK)]
        try:
            with pytest.raises(HalError) as refused:
                _configure(attacker, prepared.handle, request_fd, result_fd, events)
            assert refused.value.status == ErrorStatus.INVALID_ARGUMENT
            assert "not sealed as required" in refused.value.message
            # Whatever the service did with the rings, shrink both and wake its listener.
            os.ftruncate(request_fd, 0)
            os.ftruncate(result_fd, 0)
            for event in events:
                os.eventfd_write(event, 1)
            time.sleep(0.2)
            assert service.alive()
            attacker.ping()
        finally:
            for fd in (request_fd, result_fd, *events):
                os.close(fd)
    _victim_runs(service)


def test_a_real_burst_survives_its_client_trying_to_truncate_it(service):
    with service.connect() as client:
        prepared = client.prepareModel(add_model())
        burst = RemoteBurst(client, prepared.handle, polling_us=0)
        for ring in (burst.requests, burst.results):
            with pytest.raises(PermissionError):
                os.ftruncate(ring.fd, 0)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pool = _pool(x, x)
        burst.execute(_request(pool))
        np.testing.assert_array_equal(_out(pool), 2 * x)
        burst.close()
        pool.close()
    assert service.alive()
    _victim_runs(service)
