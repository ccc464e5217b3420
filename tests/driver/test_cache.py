"""The sample driver's compilation cache: plans rebuilt from cache files, and every broken file refused cleanly.

A plan from the cache must give bit-identical outputs to a fresh compile of the same model (the cache
stores the packed arrays themselves, so nothing is recomputed differently); the fresh compile itself is
checked against onnxruntime here so that "identical" is not "identically wrong". Tolerances: float
models the CTS rule (atol 1e-5, rtol 5*2^-23, the suite's standard); the LSTM 1e-5 absolute and
relative (different summation orders over 5 recurrent steps, as in tests/convert/test_lstm.py); the
quantized models at most one quantized unit of the output scale (fixed-point vs float requantization,
as in tests/convert/test_quant.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import driver.device
from driver import cache
from driver.cache_key import installation_key
from driver.device import SampleDevice, Variant
from driver.executor import Plan
from driver.variants import SampleAll
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.types import CacheFilesNeeded, Capabilities, PerformanceInfo, Request
from tests.convert._util import assert_close, run_ort
from tests.driver import cachekit
from tests.driver.cachekit import TOKEN

GENERAL, INVALID = ErrorStatus.GENERAL_FAILURE, ErrorStatus.INVALID_ARGUMENT


@pytest.fixture(scope="module")
def device() -> SampleAll:
    return SampleAll()


@pytest.fixture(scope="module")
def saved(tmp_path_factory, device) -> tuple[bytes, bytes]:
    """The float model's cache files, as bytes."""
    directory = tmp_path_factory.mktemp("saved")
    model_path, data_path = cachekit.save(device, cachekit.model("float"), directory)
    return model_path.read_bytes(), data_path.read_bytes()


def _write(tmp_path: Path, model_bytes: bytes, data_bytes: bytes) -> tuple[Path, Path]:
    m, d = tmp_path / "m", tmp_path / "d"
    m.write_bytes(model_bytes)
    d.write_bytes(data_bytes)
    return m, d


def _refused(device, tmp_path: Path, model_bytes: bytes, data_bytes: bytes, token: bytes = TOKEN) -> HalError:
    m, d = _write(tmp_path, model_bytes, data_bytes)
    with pytest.raises(HalError) as info:
        cachekit.load(device, m, d, token)
    assert "\n" not in info.value.message
    return info.value


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x5A
    return bytes(b)


# ------------------------------------------------------------ round trip


def test_sample_driver_needs_one_model_and_one_data_file(device) -> None:
    assert device.getNumberOfCacheFilesNeeded() == CacheFilesNeeded(1, 1)


def _reference_check(name: str, outputs: list[np.ndarray]) -> None:
    """The fresh compile agrees with onnxruntime (or where onnxruntime is not exact, onnx.reference)."""
    conv = cachekit.conversion(name)
    arrays = cachekit.inputs(conv.model)
    feeds = {i.name: a for i, a in zip(conv.inputs, arrays, strict=True)}
    if name.startswith("quant"):
        from tests.convert.quantkit import quant_reference

        # onnxruntime where its integer products are exact on this CPU, else onnx.reference.
        expected = quant_reference(cachekit.onnx_model(name), feeds)
    else:
        expected = run_ort(cachekit.onnx_model(name), feeds)
    for got, want in zip(outputs, expected, strict=True):
        if name == "lstm":
            assert_close(got, want, atol=1e-5, rtol=1e-5)
        elif name == "float":
            assert_close(got, want)
        else:
            from tests.convert.quantkit import output_scale

            units = np.abs(got.astype(np.float64) - want) / output_scale(conv, 0)
            assert units.max() <= 1 + 1e-3


@pytest.mark.parametrize("name", cachekit.MODELS)
def test_plan_from_cache_is_bit_identical_and_packs_nothing(name, device, tmp_path, monkeypatch) -> None:
    model = cachekit.model(name)
    arrays = cachekit.inputs(model)
    counting = cachekit.PackCounter(monkeypatch)
    m, d = cachekit.save(device, model, tmp_path)
    fresh = device.prepareModel(model)
    assert counting.computed == 2 * len(fresh.plan.packed_names) > 0
    counting.computed = 0
    cached = cachekit.load(device, m, d)
    assert counting.computed == 0
    assert set(cached.plan.packed) == set(fresh.plan.packed_names)
    assert all(not a.flags.writeable for a in cached.plan.packed.values())  # views of the read data
    want = cachekit.run(fresh, arrays)
    _reference_check(name, want)
    # The loaded plan owns its bytes: the files may go away.
    m.write_bytes(b"")
    d.unlink()
    got = cachekit.run(cached, arrays)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w), f"max difference {np.max(np.abs(g.astype(np.float64) - w))}"


def test_files_hold_headers_payloads_and_the_token(device, saved) -> None:
    model_bytes, data_bytes = saved
    assert model_bytes[:8] == cache.MODEL_MAGIC and data_bytes[:8] == cache.DATA_MAGIC
    for raw in saved:
        assert TOKEN in raw[: cache.HEADER_SIZE]
        fields = raw[: cache.HEADER_SIZE - 32]
        signature = hmac.new(installation_key(), fields, hashlib.sha256).digest()
        assert signature == raw[cache.HEADER_SIZE - 32 : cache.HEADER_SIZE]
    doc = json.loads(model_bytes[cache.HEADER_SIZE :])
    assert sorted(doc) == ["model", "operand_values", "packed", "pools", "priority"]
    assert {(e["name"], e["dtype"]) for e in doc["packed"]} == {("filter", "<f4"), ("weights", "<f4")}
    # The model cache's header binds the data payload by length and digest.
    payload = data_bytes[cache.HEADER_SIZE :]
    assert hashlib.sha256(payload).digest() in model_bytes[: cache.HEADER_SIZE]


# ------------------------------------------------------------ broken files


def _positions(size: int) -> list[int]:
    """Every header byte, 16 spread over the payload and the last byte."""
    payload = list(np.linspace(cache.HEADER_SIZE, size - 1, 16).astype(int))
    return sorted({*range(cache.HEADER_SIZE), *payload, size - 1})


@pytest.mark.parametrize("which", ["model", "data"])
def test_every_flipped_byte_is_refused(which, device, saved, tmp_path) -> None:
    model_bytes, data_bytes = saved
    target = model_bytes if which == "model" else data_bytes
    for at in _positions(len(target)):
        broken = _flip(target, at)
        pair = (broken, data_bytes) if which == "model" else (model_bytes, broken)
        error = _refused(device, tmp_path, *pair)
        assert error.status == GENERAL, (at, error)
        assert error.message.startswith("compilation cache: "), (at, error)


def _truncate(n: int) -> Callable[[bytes], bytes]:
    """The first n bytes (all but the last -n for n < 0)."""
    return lambda b: b[:n]


BROKEN = {
    "model empty": ("model", lambda b: b"", "the model cache file is empty"),
    "data empty": ("data", lambda b: b"", "the data cache file is empty"),
    "model header cut": ("model", _truncate(100), "truncated: the header needs"),
    "data header cut": ("data", _truncate(cache.HEADER_SIZE - 1), "truncated: the header needs"),
    "model payload cut": ("model", _truncate(-1), "the model cache file is truncated"),
    "data payload cut": ("data", _truncate(cache.HEADER_SIZE + 10), "the data cache file is truncated"),
    "model junk": ("model", lambda b: b + b"junk", "4 unexpected bytes after its payload"),
    "data junk": ("data", lambda b: b + bytes(64), "64 unexpected bytes after its payload"),
    "model magic": ("model", lambda b: b"NOTCACHE" + b[8:], "not a compilation cache of this driver"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_truncated_empty_and_padded_files_are_refused(case, device, saved, tmp_path) -> None:
    which, change, text = BROKEN[case]
    model_bytes, data_bytes = saved
    pair = (change(model_bytes), data_bytes) if which == "model" else (model_bytes, change(data_bytes))
    error = _refused(device, tmp_path, *pair)
    assert error.status == GENERAL and text in error.message


def test_swapped_files_are_refused(device, saved, tmp_path) -> None:
    model_bytes, data_bytes = saved
    error = _refused(device, tmp_path, data_bytes, model_bytes)
    assert error.status == GENERAL and "swapped" in error.message


def test_files_of_two_compilations_are_refused(device, saved, tmp_path) -> None:
    other_m, other_d = cachekit.save(device, cachekit.model("lstm"), tmp_path, stem="other")
    model_bytes, data_bytes = saved
    for pair in ((model_bytes, other_d.read_bytes()), (other_m.read_bytes(), data_bytes)):
        error = _refused(device, tmp_path, *pair)
        assert error.status == GENERAL and "different compilations" in error.message


def test_stale_driver_version_is_refused(device, saved, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(driver.device, "VERSION", "mlts-sample-9.9.9")
    error = _refused(device, tmp_path, *saved)
    assert error.status == GENERAL
    assert "driver version 'mlts-sample-1.3.0', this is 'mlts-sample-9.9.9' (stale cache)" in error.message


class _Other(SampleDevice):
    variant = Variant("sample-other", lambda model, op: True, Capabilities.uniform(PerformanceInfo(1.0, 1.0)))


def test_other_variant_and_other_token_are_refused(saved, tmp_path) -> None:
    error = _refused(_Other(), tmp_path, *saved)
    assert error.status == GENERAL and "variant 'sample-all', this is 'sample-other'" in error.message
    error = _refused(SampleAll(), tmp_path, *saved, token=bytes(32))
    assert error.status == GENERAL and "another token" in error.message


def _header(raw: bytes) -> cache.Header:
    return cache._parse_header(raw[: cache.HEADER_SIZE], "x", raw[:8], b"")


@pytest.mark.parametrize("which", ["model", "data"])
def test_huge_claimed_length_fails_fast_without_allocating(which, device, saved, tmp_path) -> None:
    model_bytes, data_bytes = saved
    target = model_bytes if which == "model" else data_bytes
    lying = _header(target).__class__(**{**_fields(_header(target)), "payload_length": 1 << 40})
    forged = lying.pack() + target[cache.HEADER_SIZE :]
    pair = (forged, data_bytes) if which == "model" else (model_bytes, forged)
    m, d = _write(tmp_path, *pair)
    tracemalloc.start()
    try:
        with pytest.raises(HalError, match="truncated: its header promises 1099511627776 payload bytes"):
            cachekit.load(device, m, d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the promised terabyte is neither allocated nor read


def _fields(h: cache.Header) -> dict:
    return {k: getattr(h, k) for k in cache.Header.__slots__}


# ------------------------------------------------------------ well-signed but inconsistent payloads


def _resign(saved: tuple[bytes, bytes], mutate: Callable[[dict], None]) -> tuple[bytes, bytes]:
    """The saved files with the model document changed by `mutate` and every digest made valid again."""
    model_bytes, data_bytes = saved
    doc = json.loads(model_bytes[cache.HEADER_SIZE :])
    mutate(doc)
    payload = json.dumps(doc).encode()
    data_payload = data_bytes[cache.HEADER_SIZE :]
    m_sha, d_sha = hashlib.sha256(payload).digest(), hashlib.sha256(data_payload).digest()
    mh = {**_fields(_header(model_bytes)), "payload_length": len(payload), "payload_sha256": m_sha}
    dh = {**_fields(_header(data_bytes)), "partner_length": len(payload), "partner_sha256": m_sha}
    assert dh["payload_sha256"] == d_sha
    return cache.Header(**mh).pack() + payload, cache.Header(**dh).pack() + data_payload


def _packed_entry(doc: dict, name: str) -> dict:
    return next(e for e in doc["packed"] if e["name"] == name)


INCONSISTENT = {
    "shape": (
        lambda d: _packed_entry(d, "filter").update(shape=[8, 27]),
        "has shape [8, 27], expected [27, 8]",
    ),
    "size": (
        lambda d: _packed_entry(d, "filter").update(shape=[27, 9]),
        "float32 of shape [27, 9] needs 972",
    ),
    "dtype": (lambda d: _packed_entry(d, "filter").update(dtype="<i4"), "has dtype int32, expected float32"),
    "missing": (
        lambda d: _packed_entry(d, "filter").update(name="filterX"),
        "holds no packed array 'filter'",
    ),
    "unknown dtype": (lambda d: _packed_entry(d, "filter").update(dtype="|O"), "dtype '|O' is not one of"),
    "misaligned": (lambda d: _packed_entry(d, "filter").update(offset=3), "is misplaced"),
    "bad step": (lambda d: _packed_entry(d, "filter").update(step=999), "step must be an int in"),
    "bad operand": (
        lambda d: d["model"]["main"]["operations"][0]["inputs"].__setitem__(0, 9999),
        "input 0 is operand 9999",
    ),
    "extra key": (lambda d: d.update(extra=1), "must be an object with keys"),
}


@pytest.mark.parametrize("case", sorted(INCONSISTENT))
def test_signed_but_inconsistent_payloads_are_refused(case, device, saved, tmp_path) -> None:
    mutate, text = INCONSISTENT[case]
    error = _refused(device, tmp_path, *_resign(saved, mutate))
    assert error.status == GENERAL and text in error.message, error


def test_packed_arrays_no_operation_asks_for_are_refused(device) -> None:
    model = cachekit.model("float")
    fresh = Plan(model)
    extra = {**fresh.packed, (0, "bogus"): np.zeros(3, np.float32)}
    with pytest.raises(HalError, match="1 packed array\\(s\\) no operation asked for \\(first: 'bogus'"):
        Plan(model, extra)


# ------------------------------------------------------------ arguments


@pytest.mark.parametrize("counts", [(0, 1), (1, 0), (2, 1), (1, 2)])
def test_wrong_cache_file_counts_are_invalid(counts, device, saved, tmp_path) -> None:
    m, d = _write(tmp_path, *saved)
    fds = cachekit.open_fds([m] * counts[0] + [d] * counts[1], os.O_RDWR)
    try:
        mc, dc = fds[: counts[0]], fds[counts[0] :]
        with pytest.raises(HalError, match="needs 1 model and 1 data cache file") as info:
            device.prepareModelFromCache(mc, dc, TOKEN)
        assert info.value.status == INVALID
        with pytest.raises(HalError, match="needs 1 model and 1 data cache file") as info:
            device.prepareModel(cachekit.model("float"), model_cache=mc, data_cache=dc, token=TOKEN)
        assert info.value.status == INVALID
    finally:
        cachekit.close_fds(fds)


def test_token_must_have_32_bytes(device, saved, tmp_path) -> None:
    m, d = _write(tmp_path, *saved)
    fds = cachekit.open_fds([m, d], os.O_RDWR)
    try:
        for token in (b"", bytes(31), bytes(33)):
            with pytest.raises(HalError, match="token must be 32 bytes") as info:
                device.prepareModelFromCache(fds[:1], fds[1:], token)
            assert info.value.status == INVALID
    finally:
        cachekit.close_fds(fds)


def test_unreadable_fds_are_refused(device, saved, tmp_path) -> None:
    m, d = _write(tmp_path, *saved)
    closed = os.open(m, os.O_RDONLY)
    os.close(closed)
    write_only = os.open(m, os.O_WRONLY)
    directory = os.open(tmp_path, os.O_RDONLY)
    good = os.open(d, os.O_RDONLY)
    try:
        for bad in (closed, -1, write_only, directory, "3"):
            with pytest.raises(HalError) as info:
                device.prepareModelFromCache([bad], [good], TOKEN)
            assert info.value.status == GENERAL, bad
            assert "the model cache file" in info.value.message
    finally:
        cachekit.close_fds([write_only, directory, good])


def test_a_cache_that_cannot_be_written_does_not_fail_the_prepare(device, tmp_path, caplog) -> None:
    m, d = tmp_path / "m", tmp_path / "d"
    m.write_bytes(b"")
    d.write_bytes(b"")
    fds = cachekit.open_fds([m, d], os.O_RDONLY)
    model = cachekit.model("float")
    try:
        with caplog.at_level("WARNING", logger="driver.cache"):
            prepared = device.prepareModel(model, model_cache=fds[:1], data_cache=fds[1:], token=TOKEN)
    finally:
        cachekit.close_fds(fds)
    assert "cannot write the compilation cache" in caplog.text
    assert cachekit.run(prepared, cachekit.inputs(model))[0].shape == (1, 16)
    with pytest.raises(HalError, match="empty"):
        cachekit.load(device, m, d)


def test_deadline_and_request_checks_apply_to_cached_models(device, saved, tmp_path) -> None:
    m, d = _write(tmp_path, *saved)
    fds = cachekit.open_fds([m, d], os.O_RDONLY)
    try:
        with pytest.raises(HalError) as info:
            device.prepareModelFromCache(fds[:1], fds[1:], TOKEN, deadline=time.monotonic_ns() - 1)
        assert info.value.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    finally:
        cachekit.close_fds(fds)
    prepared = cachekit.load(device, m, d)
    with pytest.raises(HalError) as info:
        prepared.executeSynchronously(Request((), (), ()))
    assert info.value.status == INVALID
