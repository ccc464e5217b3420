"""The client side of compilation caching: tokens, file layout, NNAPI's hit / miss / recompile flow, in and out of process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.types import CacheFilesNeeded
from mlts.ipc import wire
from mlts.runtime.compile_cache import CompilationCache, cache_token
from mlts.runtime.process import DriverProcess
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.session import Session
from tests.driver import cachekit
from tests.runtime.conftest import fake_spec
from tests.runtime.fake_drivers import AddDevice
from tests.runtime.models import add_model


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _identical(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want, strict=True)
    )


# ------------------------------------------------------------ tokens and paths


def test_token_is_stable_and_covers_model_and_device() -> None:
    model = cachekit.model("float")
    token = cache_token(model, "sample-all", "1.0")
    assert len(token) == 32
    assert cache_token(cachekit.model("float"), "sample-all", "1.0") == token  # converted again: same bytes
    assert cache_token(model, "sample-other", "1.0") != token
    assert cache_token(model, "sample-all", "1.1") != token
    pool = bytearray(model.pools[0].buffer)
    pool[-1] ^= 0x01  # one weight bit
    changed = type(model)(**{**_fields(model), "pools": (HostMemory(pool),)})
    assert cache_token(changed, "sample-all", "1.0") != token
    # Length prefixes: moving a byte from the name into the version changes the token.
    assert cache_token(model, "ab", "c") != cache_token(model, "a", "bc")


def _fields(model) -> dict:
    return {k: getattr(model, k) for k in model.__dataclass_fields__}


def test_files_are_per_device_and_token(tmp_path) -> None:
    cache = CompilationCache(tmp_path)
    files = cache.files("sample/all", bytes(range(32)), CacheFilesNeeded(1, 2))
    stem = bytes(range(32)).hex()
    assert files.model == (tmp_path / "sample_all" / f"{stem}.model0",)
    assert files.data == (
        tmp_path / "sample_all" / f"{stem}.data0",
        tmp_path / "sample_all" / f"{stem}.data1",
    )
    assert not files.usable()


# ------------------------------------------------------------ in process


def test_miss_hit_recompiled_hit_in_process(tmp_path) -> None:
    device = SampleAll()
    model = cachekit.model("quant")
    arrays = cachekit.inputs(model)
    cache = CompilationCache(tmp_path / "cache")
    first, outcome = cache.prepare(device, model)
    assert outcome == "miss" and cache.last_reason is None
    want = cachekit.run(first, arrays)
    files = cache.files(
        device.name, cache_token(model, device.name, device.getVersionString()), CacheFilesNeeded(1, 1)
    )
    assert files.usable() and oct(files.model[0].stat().st_mode & 0o777) == "0o600"
    hit, outcome = cache.prepare(device, model)
    assert outcome == "hit"
    assert _identical(cachekit.run(hit, arrays), want)
    _flip_last_byte(files.data[0])
    again, outcome = cache.prepare(device, model)
    assert outcome == "recompiled"
    assert cache.last_reason is not None and "data cache file's payload is corrupt" in cache.last_reason
    assert _identical(cachekit.run(again, arrays), want)
    assert cache.prepare(device, model)[1] == "hit"


def test_truncated_files_are_recompiled(tmp_path) -> None:
    device = SampleAll()
    model = cachekit.model("float")
    cache = CompilationCache(tmp_path)
    cache.prepare(device, model)
    files = cache.files(
        device.name, cache_token(model, device.name, device.getVersionString()), CacheFilesNeeded(1, 1)
    )
    os.truncate(files.model[0], 40)
    assert cache.prepare(device, model)[1] == "recompiled"
    assert "truncated" in (cache.last_reason or "")
    os.truncate(files.data[0], 0)  # empty: not offered to the driver at all
    assert cache.prepare(device, model)[1] == "miss"
    assert cache.prepare(device, model)[1] == "hit"


def test_driver_without_caching_is_uncached(tmp_path) -> None:
    prepared, outcome = CompilationCache(tmp_path / "c").prepare(AddDevice(), add_model())
    assert outcome == "uncached" and prepared is not None
    assert not (tmp_path / "c").exists()


def test_unusable_directory_compiles_uncached(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = CompilationCache(blocker)
    prepared, outcome = cache.prepare(SampleAll(), cachekit.model("float"))
    assert outcome == "uncached" and prepared is not None
    assert cache.last_reason is not None and "cannot use the cache files" in cache.last_reason


# ------------------------------------------------------------ a driver in its own process


@pytest.fixture
def sample_remote(tmp_path):
    device = RemoteDevice.start(
        "driver.variants:SampleAll", name="sample-all", log_path=str(tmp_path / "drv.log")
    )
    yield device
    device.close()


def test_remote_miss_hit_recompiled_with_sessions(sample_remote, tmp_path) -> None:
    model = cachekit.model("lstm")
    arrays = cachekit.inputs(model)
    cache = CompilationCache(tmp_path / "cache")
    outcomes, reasons, outputs = [], [], []
    for corrupt in (False, False, True, False):
        if corrupt:
            token = cache_token(model, "sample-all", sample_remote.getVersionString())
            _flip_last_byte(cache.files("sample-all", token, CacheFilesNeeded(1, 1)).model[0])
        with Session(sample_remote, model, cache=cache) as session:
            outcomes.append(session.cache_outcome)
            reasons.append(cache.last_reason)
            outputs.append(session.run(arrays)[0])
    assert outcomes == ["miss", "hit", "recompiled", "hit"]
    assert (
        reasons[2]
        == "GENERAL_FAILURE: compilation cache: the model cache file's payload is corrupt (SHA-256 mismatch)"
    )
    for got in outputs[1:]:
        assert _identical(got, outputs[0])
    with Session(sample_remote, model) as plain:
        assert plain.cache_outcome is None
        assert _identical(plain.run(arrays)[0], outputs[0])


def test_remote_cache_argument_errors_cross_the_wire(sample_remote, tmp_path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(HalError, match="needs 1 model and 1 data cache file") as info:
            sample_remote.prepareModelFromCache([fd], [], bytes(32))
        assert info.value.status == ErrorStatus.INVALID_ARGUMENT
        with pytest.raises(HalError, match="model cache file is empty") as info:
            sample_remote.prepareModelFromCache([fd], [fd], bytes(32))
        assert info.value.status == ErrorStatus.GENERAL_FAILURE
        with pytest.raises(HalError, match="at most 64"):
            sample_remote.prepareModel(cachekit.model("float"), model_cache=[fd] * 32, data_cache=[fd] * 32)
    finally:
        os.close(fd)
    assert sample_remote.dead is None


def test_service_closes_cache_fds_of_a_rejected_call(tmp_path) -> None:
    proc = DriverProcess.start(fake_spec("AddDevice"), name="fake-add", log_path=str(tmp_path / "svc.log"))
    try:
        path = tmp_path / "f"
        path.write_bytes(b"x")
        fds = [os.open(path, os.O_RDONLY) for _ in range(3)]

        def open_in_service() -> int:
            return sum(1 for fd in os.listdir(f"/proc/{proc.pid}/fd"))

        before = open_in_service()
        # model_cache takes fds 0 and 1; data_cache then names fd 7, which the frame does not carry.
        args = {"model_cache": [0, 1], "data_cache": [7], "token": ""}
        wire.send_frame(
            proc.sock, {"kind": "call", "id": 1, "method": "prepareModelFromCache", "args": args}, fds=fds
        )
        assert wire.wait_readable(proc.sock, 5.0)
        frame = wire.recv_frame(proc.sock)
        assert frame.message["ok"] is False and "refers to fd 7" in frame.message["error"]["message"]
        # The service closes a call's fds just after it replies: give it a moment.
        deadline = time.monotonic() + 2.0
        while open_in_service() != before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert open_in_service() == before
        for fd in fds:
            os.close(fd)
    finally:
        proc.kill()


def test_token_bytes_are_checked_on_the_wire_too(sample_remote) -> None:
    # Sent as hex; the service refuses a token that is not 64 hex digits.
    with pytest.raises(HalError, match="token must be 64 hex digits") as info:
        sample_remote.call("prepareModelFromCache", {"token": "ab"})
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
