"""Everything a client held is given back once it leaves, killed or not: file descriptors and shared
memory mappings exactly, resident memory within a margin.

A small soak: rounds of clients running a model on every execution path (tests/runtime/soak_client.py),
half of them killed with SIGKILL at a random moment, and a client that sends half of a 60 MiB frame
and hangs up. When the last one is gone the service must hold what it held before they came.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from mlts.ipc import wire
from mlts.runtime.shared import SharedService

ROUNDS = 2
CLIENTS = 4
ROUND_S = 3.0
#: Resident memory the service may keep above its baseline once every client left (allocator slack).
RSS_MARGIN_KIB = 24 * 1024


def _fds(pid: int) -> list[str]:
    """What each open descriptor of `pid` is (its link), sorted."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return sorted(out)


def _shared_mappings(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as f:
        return sum("/memfd:" in line for line in f)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _clients(path: str, n: int, seconds: float) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.soak_client", path, str(seconds)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(n)
    ]


def _half_frame(path: str) -> None:
    """Announce a 60 MiB payload, send half of it, hang up."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    wire.recv_frame(sock)
    body = wire.dumps({"kind": "call", "id": 1, "method": "ping"})
    sock.sendall(wire.FIXED_HEADER.pack(wire.MAGIC, 1, 5, len(body), 60 << 20) + body)
    sock.sendall(bytes(30 << 20))
    sock.close()


def _settled(pid: int, baseline: list[str], timeout: float = 15.0) -> list[str]:
    """The service's descriptors once they are back to `baseline` (or whatever they are at `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        now = _fds(pid)
        if now == baseline or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


@pytest.fixture
def service(tmp_path):
    svc = SharedService.start(
        "driver.variants:SampleAll", name="sample-all", log_path=str(tmp_path / "svc.log")
    )
    yield svc
    assert svc.stop() == 0


def test_the_service_gives_everything_back_after_clients_leave(service):
    rng = random.Random(31)
    # Warm up: the first clients start the threads and load the code every later client uses.
    for p in _clients(service.path, 2, 1.0):
        assert p.wait(60) == 0, p.stderr.read().decode()[-2000:]
    time.sleep(0.5)
    pid = service.pid
    baseline_fds = _settled(pid, _fds(pid))
    baseline_maps = _shared_mappings(pid)
    baseline_rss = _rss_kib(pid)
    for _ in range(ROUNDS):
        procs = _clients(service.path, CLIENTS, ROUND_S)
        _half_frame(service.path)
        time.sleep(rng.uniform(0.5, ROUND_S - 0.5))
        killed = procs[::2]
        for p in killed:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            code = p.wait(60)
            if p in killed:
                assert code in (0, -signal.SIGKILL)
            else:
                assert code == 0, p.stderr.read().decode()[-2000:]
    assert _settled(pid, baseline_fds) == baseline_fds
    assert _shared_mappings(pid) == baseline_maps
    rss = _rss_kib(pid)
    assert rss - baseline_rss < RSS_MARGIN_KIB, f"{rss} KiB resident after, {baseline_rss} KiB before"
    with open(service.log_path) as f:
        log = f.read()
    assert "Traceback" not in log
