"""The service process with --listen: it says where it listens, serves a network client beside its Unix
socket, refuses unsafe settings in one line, and stops cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Request, RequestArgument
from mlts.runtime.remote import RemoteDevice
from tests.ipc.netkit import TOKEN, make_certs, token_file
from tests.runtime.models import add_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _service(args: list[str], log: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "mlts.ipc.service", "--factory", "driver.variants:SampleAll", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )


def _port(log: str, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"listening on tcp://127\.0\.0\.1:(\d+)", open(log).read())
        if found:
            return int(found.group(1))
        assert proc.poll() is None, open(log).read()
        time.sleep(0.05)
    raise AssertionError(open(log).read())


def test_a_service_process_beside_its_unix_socket(tmp_path):
    certs = make_certs(tmp_path / "certs")
    log = str(tmp_path / "svc.log")
    sock = str(tmp_path / "run" / "driver.sock")
    os.mkdir(tmp_path / "run", 0o700)
    proc = _service(
        [
            "--name", "sample-all", "--socket", sock, "--listen", "tcp://127.0.0.1:0",
            "--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
            "--token-file", token_file(tmp_path, f"ci {TOKEN}"),
        ],
        log,
    )  # fmt: skip
    try:
        port = _port(log, proc)
        url = f"tcp://127.0.0.1:{port}?ca={certs.ca}&token-file={token_file(tmp_path, TOKEN, 'mine')}"
        with RemoteDevice.connect(url) as far, RemoteDevice.connect(sock) as near:
            pool = SharedMemory.create(256)
            np.frombuffer(pool.buffer, np.float32, 6, 0)[:] = 4.0
            np.frombuffer(pool.buffer, np.float32, 6, 64)[:] = 0.5
            arg = lambda o: RequestArgument(False, DataLocation(0, o, 24), (2, 3))  # noqa: E731
            request = Request((arg(0), arg(64)), (arg(128),), (pool,))
            for device in (far, near):
                np.frombuffer(pool.buffer, np.float32, 6, 128)[:] = 0
                device.prepareModel(add_model()).executeSynchronously(request)
                np.testing.assert_array_equal(np.frombuffer(pool.buffer, np.float32, 6, 128), np.full(6, 4.5))
            assert far.service_status()["clients"] == 2
        assert "client tcp 127.0.0.1:" in open(log).read() and "(token ci) connected" in open(log).read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, open(log).read()
    assert not os.path.exists(sock)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--listen", "tcp://0.0.0.0:0", "--insecure"], "only on a loopback address"),
        (["--listen", "tcp://127.0.0.1:0"], "give --tls-cert and --tls-key"),
        (["--listen", "tcp://127.0.0.1"], "a port is needed"),
    ],
)
def test_unsafe_or_wrong_listen_settings_exit_2(tmp_path, args, says):
    log = str(tmp_path / "svc.log")
    proc = _service(args, log)
    assert proc.wait(30) == 2
    assert says in open(log).read()


def test_driver_serve_checks_its_network_options_first(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["driver", "serve", "sample-all", "--token-file", "x"])
    assert result.exit_code == 2 and "go with --listen" in result.output
    result = runner.invoke(
        main, ["driver", "serve", "sample-all", "--listen", "tcp://10.1.2.3:7700", "--insecure"]
    )
    assert result.exit_code == 2 and "only on a loopback address" in result.output
    assert len(result.output.strip().splitlines()) == 1
