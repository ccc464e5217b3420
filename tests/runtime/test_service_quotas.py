"""Per-client quotas of a shared service: connections per process and per user, idle connections,
mapped memory, driver buffers and each execution's memory. One client that takes all it can leaves
the others their share.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.hal.types import BufferDesc, BufferRole
from mlts.ipc import wire
from mlts.runtime.burst import RemoteBurst
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.shared import SharedService
from mlts.validate.control_flow_mutations import doubling_request, doubling_while_model
from tests.runtime.conftest import fake_spec
from tests.runtime.models import add_model
from tests.runtime.servicekit import _out, _pool, _request

NOBODY = 65534


def _start(tmp_path, spec: str = fake_spec("AddDevice"), *args: str, **kw) -> SharedService:
    return SharedService.start(spec, log_path=str(tmp_path / "svc.log"), service_args=list(args), **kw)


def _runs(device) -> None:
    prepared = device.prepareModel(add_model())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    pool = _pool(x, x)
    prepared.executeSynchronously(_request(pool))
    np.testing.assert_array_equal(_out(pool), 2 * x)
    device.freeMemory([pool])
    pool.close()
    prepared.close()


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):  # the peak
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


# ---------------------------------------------------------------- connections


def test_one_process_cannot_take_every_connection(tmp_path):
    with _start(tmp_path, fake_spec("AddDevice"), "--max-clients-per-pid", "3") as service:
        mine = [RemoteDevice.connect(service.path) for _ in range(3)]
        try:
            with pytest.raises(HalError) as refused:
                RemoteDevice.connect(service.path)
            assert refused.value.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
            assert f"pid {os.getpid()} holds 3 connections already" in refused.value.message
            # Another process is still served.
            code = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"from mlts.runtime.remote import RemoteDevice\n"
                    f"with RemoteDevice.connect({service.path!r}) as d: d.ping()",
                ],
                env={**os.environ, "PYTHONPATH": os.getcwd()},
                timeout=60,
            ).returncode
            assert code == 0
            mine.pop().close()
            time.sleep(0.2)  # the service notices the hang-up
            deadline = time.monotonic() + 5
            while True:
                try:
                    mine.append(RemoteDevice.connect(service.path))  # room again
                    break
                except HalError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
        finally:
            for device in mine:
                device.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="connects as another user (needs root)")
def test_one_user_cannot_take_every_connection():
    folder = tempfile.mkdtemp(prefix="mlts-test-uid-", dir="/tmp")
    os.chmod(folder, 0o711)  # others may reach the socket, nobody else may write here
    path = os.path.join(folder, "driver.sock")
    log = os.path.join(folder, "svc.log")
    service = SharedService.start(
        fake_spec("AddDevice"),
        socket_path=path,
        log_path=log,
        service_args=["--max-clients-per-uid", "2", "--max-clients-per-pid", "8"],
    )
    try:
        os.chmod(path, 0o666)
        mine = [RemoteDevice.connect(path) for _ in range(2)]
        with pytest.raises(HalError, match="uid 0 holds 2 connections already"):
            RemoteDevice.connect(path)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = b"n"
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(10)
                sock.connect(path)
                frame = wire.recv_frame(sock)
                ok = b"y" if frame.message.get("kind") == "hello" else b"r"
            finally:
                os.write(w, ok)
                os._exit(0)
        os.close(w)
        assert os.read(r, 1) == b"y"  # another user still gets a hello
        os.close(r)
        os.waitpid(pid, 0)
        for device in mine:
            device.close()
    finally:
        service.stop()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_an_idle_connection_times_out_but_a_quiet_client_is_kept_alive(tmp_path):
    with _start(tmp_path, fake_spec("AddDevice"), "--idle-timeout", "1") as service:
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        start = time.monotonic()  # before the service can start the connection's idle clock
        silent.connect(service.path)
        hello = wire.recv_frame(silent).message
        assert hello["idle_timeout"] == 1.0
        silent.settimeout(10)
        assert silent.recv(1) == b""  # disconnected
        assert 0.9 < time.monotonic() - start < 8
        silent.close()
        with RemoteDevice.connect(service.path) as quiet:
            time.sleep(3.0)  # three idle timeouts without a call of its own: its keep-alive pings
            quiet.ping()
            assert quiet.connection.keepalive is not None and quiet.connection.keepalive.pings >= 3
    with open(service.log_path) as f:
        assert "idle for 1 s" in f.read()


def test_a_long_call_is_not_idleness(tmp_path):
    with _start(tmp_path, fake_spec("SlowDevice"), "--idle-timeout", "0.5") as service:
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(service.path)
        wire.recv_frame(raw)
        data = nnfile.encode(add_model())
        model = SharedMemory.frozen(data)
        wire.send_frame(
            raw,
            {
                "kind": "call",
                "id": 1,
                "method": "prepareModel",
                "args": {"model": {"fd": 0, "size": len(data)}},
            },
            fds=[model.fd],
        )
        raw.settimeout(20)
        reply = wire.recv_frame(raw).message
        model.close()
        assert reply["ok"], reply
        x = np.ones((2, 3), np.float32)
        pool = _pool(x, x)
        arg = {
            "hasNoValue": False,
            "location": {"poolIndex": 0, "offset": 0, "length": 24},
            "dimensions": [2, 3],
        }
        out = {**arg, "location": {"poolIndex": 0, "offset": 128, "length": 24}}
        request = {"inputs": [arg, arg], "outputs": [out], "pools": [{"fd": 0, "size": 256}]}
        args = {"prepared": reply["result"]["prepared"], "request": request}
        wire.send_frame(
            raw, {"kind": "call", "id": 2, "method": "executeSynchronously", "args": args}, fds=[pool.fd]
        )
        reply = wire.recv_frame(raw).message  # SlowDevice takes longer than the idle timeout
        assert reply["id"] == 2 and reply["ok"], reply
        pool.close()
        raw.close()


# ---------------------------------------------------------------- memory


def test_mapped_memory_counts_models_pools_slots_and_copies(tmp_path):
    with _start(tmp_path, "driver.variants:SampleAll", "--max-mapped-mib", "1") as service:
        with service.connect() as device:
            prepared = device.prepareModel(add_model())
            status = device.service_status()["you"]
            assert status["mapped_bytes"] == len(nnfile.encode(add_model()))  # the model's mapping
            big = SharedMemory.create(2 << 20)
            arg = {
                "hasNoValue": False,
                "location": {"poolIndex": 0, "offset": 0, "length": 24},
                "dimensions": [2, 3],
            }
            request = {"inputs": [arg, arg], "outputs": [arg], "pools": [{"fd": 0, "size": big.size}]}
            with pytest.raises(HalError) as refused:  # a pool for one call only
                device.call(
                    "executeSynchronously", {"prepared": prepared.handle, "request": request}, [big.fd]
                )
            assert refused.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
            assert "budget of 1048576 bytes" in refused.value.message
            burst = RemoteBurst(device, prepared.handle, polling_us=0)
            with pytest.raises(HalError) as refused:  # a burst slot
                device.call(
                    "burstProvideMemories",
                    {"burst": burst.handle, "memories": [{"slot": 1, "fd": 0, "size": big.size}]},
                    [big.fd],
                )
            assert refused.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
            burst.close()
            buffer = device.allocate(BufferDesc(), [prepared], [BufferRole(0, 0)], [])
            with pytest.raises(HalError) as refused:  # a copy's staging
                device.call(
                    "bufferCopyFrom",
                    {"token": buffer.token, "memory": {"fd": 0, "size": big.size}, "dimensions": [2, 3]},
                    [big.fd],
                )
            assert refused.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
            buffer.close()
            big.close()
            _runs(device)
            prepared.close()
            assert device.service_status()["you"]["mapped_bytes"] == 0  # everything given back


def test_one_client_cannot_take_every_driver_buffer_byte(tmp_path):
    budget = 4 << 20
    options = {"buffer_budget": str(budget)}
    with _start(tmp_path, "driver.variants:SampleAll", options=options) as svc:
        hog, other = svc.connect(), svc.connect()
        try:
            ph = hog.prepareModel(add_model((256, 256)))
            held = []
            with pytest.raises(HalError) as refused:
                for _ in range(16):  # 256 KiB each: the whole budget would be 16 of them
                    held.append(hog.allocate(BufferDesc(), [ph], [BufferRole(0, 0)], []))
            assert "what one client may hold" in refused.value.message
            assert len(held) == (budget // 4) // (256 * 256 * 4)
            po = other.prepareModel(add_model((256, 256)))
            mine = [other.allocate(BufferDesc(), [po], [BufferRole(0, 0)], []) for _ in range(3)]
            for b in mine + held:
                b.close()
        finally:
            hog.close()
            other.close()


def test_a_doubling_while_loop_fails_at_the_execution_budget_and_others_go_on(tmp_path):
    options = {"max_execution_mb": "64"}
    with _start(tmp_path, "driver.variants:SampleAll", options=options) as svc:
        bomb, victim = svc.connect(), svc.connect()
        try:
            prepared = bomb.prepareModel(doubling_while_model())
            before = _rss_kb(svc.pid)
            start = time.monotonic()
            # 4 KiB of input that would double 40 times (4 PiB).
            request = doubling_request(1024, 40, output_elements=16)
            with pytest.raises(HalError) as refused:
                prepared.executeSynchronously(request, loop_timeout_duration=15_000_000_000)
            assert refused.value.status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT
            assert "execution's memory budget of 67108864 bytes" in refused.value.message
            assert time.monotonic() - start < 10
            assert _rss_kb(svc.pid) - before < 192 * 1024  # the peak grew by far less than 192 MiB
            _runs(victim)
            # A loop that stays within the budget still runs: 4 KiB doubled 5 times.
            ok = doubling_request(1024, 5)
            prepared.executeSynchronously(ok, loop_timeout_duration=15_000_000_000)
            out = np.frombuffer(ok.pools[1].buffer, np.float32, 1024 * 32 + 1)
            assert out[-1] == 5.0 and not out[:-1].any()
        finally:
            bomb.close()
            victim.close()
