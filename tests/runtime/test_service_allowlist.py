"""The extension allowlist is enforced by the service, from the identity the kernel gives each client.

A raw client skips the runtime's own check (it is only an early, friendly error); the service still
refuses an extension its allowlist does not grant the client's executable (or, when that cannot be
read, its uid).
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from mlts.hal import nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import SharedMemory
from mlts.ipc.extension_allowlist import DEFAULT, AllowlistError, load, parse
from mlts.ipc.peer import Peer
from mlts.ipc.service.allowlist_policy import AllowlistPolicy
from mlts.runtime import allowlist
from mlts.runtime.remote_prepared import RemotePreparedModel
from mlts.runtime.shared import SharedService
from tests.extensions.kit import gelu_model
from tests.runtime.models import add_model

GELU = "com.example.mlts.activations"
PYTHON = os.path.realpath(sys.executable)


def _raw_prepare(device, model) -> int:
    """prepareModel as a raw client sends it: no client-side allowlist check."""
    data = nnfile.encode(model)
    memory = SharedMemory.frozen(data)
    try:
        return device.call("prepareModel", {"model": {"fd": 0, "size": len(data)}}, [memory.fd])["prepared"]
    finally:
        memory.close()


def _service(tmp_path, allow_text: str | None):
    args = []
    if allow_text is not None:
        path = tmp_path / "allow"
        path.write_text(allow_text)
        args = ["--extensions-allowlist", str(path)]
    return SharedService.start(
        "driver.variants:SampleAll", name="sample-all", log_path=str(tmp_path / "svc.log"), service_args=args
    )


# ---------------------------------------------------------------- how the service names a client


def test_a_client_is_named_by_its_executable_and_the_bundled_tools_by_the_services_interpreter():
    policy = AllowlistPolicy(DEFAULT, interpreter="/usr/bin/python3.11", uid=1000)
    assert policy.names(Peer(10, 1000, 1000, "/usr/bin/python3.11")) == ("/usr/bin/python3.11", "mlts")
    assert policy.names(Peer(10, 1000, 1000, "/opt/vendor/bin/app")) == ("/opt/vendor/bin/app",)
    # An executable the service cannot read: the service's own user could run the tools anyway.
    assert policy.names(Peer(10, 1000, 1000, None)) == ("mlts",)
    assert policy.names(Peer(10, 1001, 1001, None)) == ()  # another user: known by uid alone


def test_the_policy_grants_only_what_the_table_says():
    table = parse(f"/opt/vendor/bin/app {GELU}\nmlts org.other.ext\n", "allow")
    policy = AllowlistPolicy(table, interpreter=PYTHON, uid=1000)
    model = gelu_model()
    policy.check(Peer(10, 1000, 1000, "/opt/vendor/bin/app"), model, "prepareModel")
    for peer in (Peer(11, 1000, 1000, PYTHON), Peer(12, 1001, 1001, None), Peer(13, 1000, 1000, "/bin/x")):
        with pytest.raises(HalError) as refused:
            policy.check(peer, model, "prepareModel")
        assert refused.value.status == ErrorStatus.INVALID_ARGUMENT
        assert f"extension '{GELU}' is not allowed for client pid {peer.pid}" in refused.value.message
    policy.check(Peer(11, 1000, 1000, PYTHON), add_model(), "prepareModel")  # no extension: no question


# ---------------------------------------------------------------- the service enforces it


def test_a_raw_client_cannot_use_an_extension_the_services_allowlist_denies_it(tmp_path):
    with _service(tmp_path, "mlts org.other.ext\n") as service, service.connect() as device:
        for method in ("prepareModel", "getSupportedOperations"):
            data = nnfile.encode(gelu_model())
            memory = SharedMemory.frozen(data)
            try:
                with pytest.raises(HalError) as refused:
                    device.call(method, {"model": {"fd": 0, "size": len(data)}}, [memory.fd])
            finally:
                memory.close()
            assert refused.value.status == ErrorStatus.INVALID_ARGUMENT
            assert f"extension '{GELU}' is not allowed" in refused.value.message
            assert "service's extensions allowlist" in refused.value.message
        assert device.service_status()["you"]["handles"]["prepared"] == 0
        RemotePreparedModel(device, _raw_prepare(device, add_model())).close()  # other models are fine


def test_the_services_allowlist_grants_the_clients_executable(tmp_path):
    with _service(tmp_path, f"{PYTHON} {GELU}\n") as service, service.connect() as device:
        RemotePreparedModel(device, _raw_prepare(device, gelu_model())).close()
    with _service(tmp_path, None) as service, service.connect() as device:  # the default: mlts, GELU
        RemotePreparedModel(device, _raw_prepare(device, gelu_model())).close()


def test_a_private_service_enforces_the_allowlist_its_client_selected(tmp_path, monkeypatch):
    from mlts.runtime.remote import RemoteDevice

    path = tmp_path / "allow"
    path.write_text("mlts org.other.ext\n")
    monkeypatch.setattr(allowlist, "_selected", None)
    allowlist.select_file(str(path))
    try:
        device = RemoteDevice.start("driver.variants:SampleAll", log_path=str(tmp_path / "log"))
        try:
            with pytest.raises(HalError, match="service's extensions allowlist"):
                _raw_prepare(device, gelu_model())
        finally:
            device.close()
    finally:
        allowlist.select_file(None)


# ---------------------------------------------------------------- reading the file


def test_an_allowlist_naming_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "allow.fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(AllowlistError, match="FIFO"):
        load(str(fifo))
    with pytest.raises(AllowlistError, match="FIFO"):
        allowlist.select_file(str(fifo))
    with pytest.raises(HalError) as failed:
        SharedService.start(
            "driver.variants:SampleAll",
            log_path=str(tmp_path / "svc.log"),
            service_args=["--extensions-allowlist", str(fifo)],
            start_timeout=20,
        )
    assert "FIFO" in failed.value.message and "exited with status 2" in failed.value.message
    assert time.monotonic() - start < 15


def test_an_allowlist_too_large_or_a_directory_is_refused(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    with pytest.raises(AllowlistError, match="more than"):
        load(str(big))
    with pytest.raises(AllowlistError, match="directory"):
        load(str(tmp_path))
