"""The service caches its documented 4096 pools even when started with the usual 1024-fd soft limit."""

from __future__ import annotations

import os
import resource

import pytest

from mlts.hal.enums import ErrorStatus
from mlts.hal.memory import SharedMemory
from mlts.ipc import wire
from mlts.ipc.service.handles import Limits
from mlts.runtime.process import DriverProcess
from tests.runtime.conftest import fake_spec

USUAL_SOFT_LIMIT = 1024
#: The pools one client may keep cached by default.
MAX_CACHED_MEMORIES = Limits().max_memories


@pytest.fixture
def low_limit_service(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < MAX_CACHED_MEMORIES + 512:
        pytest.skip(f"the hard open-file limit {hard} is below what the documented pool count needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (USUAL_SOFT_LIMIT, hard))
    try:
        proc = DriverProcess.start(
            fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "svc.log")
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    yield proc
    proc.kill()


def _reply(proc: DriverProcess) -> dict:
    def wait(partial: bool) -> None:
        if not wire.wait_readable(proc.sock, 30.0):
            raise AssertionError("the service did not answer within 30 s")

    frame = wire.recv_frame(proc.sock, wait)
    frame.close_fds()
    return frame.message


def _send_pools(proc: DriverProcess, first_id: int, count: int, msg_id: int) -> dict:
    """One executeSynchronously call bringing `count` new pools: the service caches them, then fails the call."""
    pools = [SharedMemory.create(64) for _ in range(count)]
    try:
        refs = [{"memory": first_id + i, "fd": i, "size": 64} for i in range(count)]
        request = {"inputs": [], "outputs": [], "pools": refs}
        args = {"prepared": 999_999, "request": request}
        message = {"kind": "call", "id": msg_id, "method": "executeSynchronously", "args": args}
        wire.send_frame(proc.sock, message, fds=[p.fd for p in pools])
    finally:
        for p in pools:
            p.close()
    return _reply(proc)


def test_documented_pool_count_fits_the_fd_budget(low_limit_service):
    per_call = wire.MAX_FDS
    for n in range(MAX_CACHED_MEMORIES // per_call):
        reply = _send_pools(low_limit_service, 1 + n * per_call, per_call, n + 1)
        assert reply["ok"] is False
        # Every pool was mapped and cached; only the made-up prepared model handle is wrong.
        assert "unknown prepared model handle" in reply["error"]["message"], (n, reply)
    reply = _send_pools(low_limit_service, MAX_CACHED_MEMORIES + 1, 1, 10_000)
    assert reply["error"]["status"] == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
    assert f"already holds {MAX_CACHED_MEMORIES} memory handles" in reply["error"]["message"]
    assert low_limit_service.alive()
    with open(low_limit_service.log_path) as f:
        assert "Traceback" not in f.read()


def test_fd_count_of_this_process_is_unchanged_by_sending_pools(low_limit_service):
    before = len(os.listdir("/proc/self/fd"))
    _send_pools(low_limit_service, 1, 8, 1)
    assert len(os.listdir("/proc/self/fd")) == before


def test_running_out_of_fds_is_named_as_such(tmp_path):
    proc = DriverProcess.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "svc.log"))
    try:
        reply = _send_pools(proc, 1, 2, 1)  # the service works
        assert "unknown prepared model handle" in reply["error"]["message"]
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (40, 40))
        reply = _send_pools(proc, 100, 48, 2)
        assert reply["ok"] is False
        assert reply["error"]["status"] == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, reply
        assert "ran out of file descriptors" in reply["error"]["message"]
        assert "open-file limit (RLIMIT_NOFILE) 40" in reply["error"]["message"]
        assert "too many file descriptors" not in reply["error"]["message"]
        assert proc.alive()
    finally:
        proc.kill()
