"""The .nnm container: round trips, layout, and rejection of every kind of corrupt file."""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib

import numpy as np
import pytest

from mlts.hal import nnfile
from mlts.hal.memory import HostMemory, SharedMemory
from mlts.hal.nnfile import ALIGNMENT, HEADER_SIZE, MAGIC, NnFileError
from mlts.hal.types import Model, Operand, Subgraph
from tests.hal._nnm_models import assert_models_equal, rich_model

META = {"source": "tiny.onnx", "converter": "mlts.convert 0.1", "note": "ünïcode ok"}


@pytest.fixture(scope="module")
def data() -> bytes:
    return nnfile.encode(rich_model(), metadata=META)


def _meta(data: bytes) -> tuple[dict, int]:
    n = struct.unpack_from("<Q", data, 16)[0]
    return json.loads(data[HEADER_SIZE : HEADER_SIZE + n]), n


def _rebuild(data: bytes, mutate=None, *, raw: bytes | None = None, shift: int = 4096) -> bytes:
    """The file with its metadata replaced (mutated JSON or raw bytes), sections moved by `shift` bytes."""
    doc, n = _meta(data)
    first = min(s["offset"] for s in doc["sections"])
    for s in doc["sections"]:
        s["offset"] += shift
    if mutate is not None:
        mutate(doc)
    text = raw if raw is not None else json.dumps(doc).encode()
    assert HEADER_SIZE + len(text) <= first + shift, "shift too small for this metadata"
    head = struct.pack("<8sHHIQII", MAGIC, 1, 0, 0, len(text), zlib.crc32(text), 0) + text
    return head + bytes(first + shift - len(head)) + data[first:]


def _reject(buf, match: str, **kw) -> NnFileError:
    with pytest.raises(NnFileError, match=match) as info:
        nnfile.decode(buf, **kw)
    assert "\n" not in str(info.value)
    return info.value


# ------------------------------------------------------------ round trips and layout


def test_encode_decode_round_trip(data):
    m = rich_model()
    f = nnfile.decode(data)
    assert_models_equal(m, f.model)
    assert f.metadata == META
    assert f.format_version == (1, 0)
    assert f.size == len(data)
    assert f.producer.startswith("mlts")
    assert nnfile.encode(f.model, metadata=META) == data  # decoding loses nothing


def test_write_load_round_trip(tmp_path):
    m = rich_model()
    path = tmp_path / "model.nnm"
    nnfile.write(m, path, metadata=META)
    assert os.listdir(tmp_path) == ["model.nnm"]
    for use_mmap in (True, False):
        f = nnfile.load(path, use_mmap=use_mmap)
        assert_models_equal(m, f.model)
        assert f.metadata == META
        assert f.size == path.stat().st_size
    # Overwriting an existing file is atomic too.
    nnfile.write(Model(Subgraph((), (), (), ())), path)
    assert nnfile.load(path).model.main.operands == ()


def test_layout_header_and_alignment(data):
    magic, major, minor, flags, meta_len, meta_crc, reserved = struct.unpack_from("<8sHHIQII", data)
    assert (magic, major, minor, flags, reserved) == (b"NNMODEL\0", 1, 0, 0, 0)
    assert zlib.crc32(data[32 : 32 + meta_len]) == meta_crc
    doc, _ = _meta(data)
    assert set(doc) == {"model", "sections", "producer", "metadata"}
    names = [s["name"] for s in doc["sections"]]
    assert names == ["operand_values", "pool", "pool"]
    m = rich_model()
    expected = [bytes(m.operand_values), *(bytes(p.buffer) for p in m.pools)]
    end = 32 + meta_len
    for s, blob in zip(doc["sections"], expected, strict=True):
        assert s["offset"] % ALIGNMENT == 0 and s["offset"] >= end
        assert data[s["offset"] : s["offset"] + s["length"]] == blob
        assert s["crc32"] == zlib.crc32(blob)
        end = s["offset"] + s["length"]
    assert end == len(data)


def test_pools_are_zero_copy_views(data):
    buf = bytearray(data)
    f = nnfile.decode(buf)
    arr = np.frombuffer(f.model.pools[0].buffer, dtype=np.uint8)
    assert np.shares_memory(arr, np.frombuffer(buf, dtype=np.uint8))


def test_empty_model_and_shared_memory_pool():
    empty = Model(Subgraph((), (), (), ()))
    assert_models_equal(empty, nnfile.decode(nnfile.encode(empty)).model)
    shm = SharedMemory.create(100)
    try:
        shm.buffer[:4] = b"abcd"
        m = Model(Subgraph((), (), (), ()), pools=(shm, HostMemory(b"")))
        back = nnfile.decode(nnfile.encode(m)).model
        assert bytes(back.pools[0].buffer[:4]) == b"abcd" and back.pools[1].size == 0
    finally:
        shm.close()


def test_large_pool_loads_through_mmap_without_copying(tmp_path):
    big = np.random.default_rng(0).integers(0, 255, 17 * 2**20, dtype=np.uint8)
    m = Model(Subgraph((), (), (), ()), pools=(HostMemory(big.tobytes()),))
    path = tmp_path / "big.nnm"
    nnfile.write(m, path)
    f = nnfile.load(path, verify_checksums=False)  # its speed: benchmarks/validation_speed.py
    view = f.model.pools[0].buffer
    assert isinstance(view.obj, mmap.mmap) and view.readonly
    arr = np.frombuffer(view, dtype=np.uint8)
    assert not arr.flags.owndata and not arr.flags.writeable
    assert np.array_equal(arr, big)
    assert np.array_equal(np.frombuffer(nnfile.load(path).model.pools[0].buffer, np.uint8), big)


# ------------------------------------------------------------ corruption


def test_truncation_at_every_cut_point_is_rejected(data):
    cuts = list(range(len(data)))
    for cut in cuts:
        with pytest.raises(NnFileError, match="truncated|not an mlts") as info:
            nnfile.decode(data[:cut])
        assert "\n" not in str(info.value)


def test_truncated_file_names_file_and_section(tmp_path, data):
    doc, _ = _meta(data)
    pool0 = doc["sections"][1]
    path = tmp_path / "model.nnm"
    path.write_bytes(data[: pool0["offset"] + 10])
    end = pool0["offset"] + pool0["length"]
    for use_mmap in (True, False):
        with pytest.raises(NnFileError) as info:
            nnfile.load(path, use_mmap=use_mmap)
        assert str(info.value) == (
            f"{path}: truncated: section 'pool[0]' ends at byte {end} but the file has {pool0['offset'] + 10} bytes"
        )
        assert info.value.name == str(path)
    path.write_bytes(b"")
    with pytest.raises(NnFileError, match="truncated: the header needs 32 bytes but the file has 0"):
        nnfile.load(path)


def test_flipped_bytes_fail_checksums(data):
    doc, meta_len = _meta(data)
    for pos in (HEADER_SIZE, HEADER_SIZE + meta_len // 2, HEADER_SIZE + meta_len - 1):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        _reject(bytes(bad), "metadata checksum mismatch")
    for i, label in enumerate(["operand_values", "pool[0]", "pool[1]"]):
        s = doc["sections"][i]
        bad = bytearray(data)
        bad[s["offset"] + s["length"] - 1] ^= 0x80
        err = _reject(bytes(bad), rf"section '{label.replace('[', '.').replace(']', '.')}' checksum mismatch")
        assert err.offset == s["offset"]
        # Without checksum verification the flip goes unnoticed, by design.
        assert nnfile.decode(bytes(bad), verify_checksums=False).model.main == rich_model().main


def test_header_corruptions(data):
    _reject(b"PK\x03\x04" + data[4:], r"not an mlts \.nnm file \(magic b'PK\\x03\\x04")
    _reject(b"hello", "not an mlts .nnm file")
    future = bytearray(data)
    struct.pack_into("<H", future, 8, 2)
    _reject(bytes(future), r"format version 2\.0 is newer than this reader supports \(1\.x\)")
    zero = bytearray(data)
    struct.pack_into("<H", zero, 8, 0)
    _reject(bytes(zero), r"format version 0\.0 is not supported")
    flags = bytearray(data)
    struct.pack_into("<I", flags, 12, 1)
    _reject(bytes(flags), "header flags 0x00000001 are not supported")
    reserved = bytearray(data)
    struct.pack_into("<I", reserved, 28, 5)
    _reject(bytes(reserved), "reserved header field")
    huge = bytearray(data)
    struct.pack_into("<Q", huge, 16, 2**63)
    _reject(
        bytes(huge),
        rf"truncated: metadata of {2**63} bytes at byte 32 ends at byte {2**63 + 32} but the file has",
    )


def test_newer_minor_is_accepted_and_may_add_keys_and_sections(data):
    def add(doc):
        doc["future"] = {"x": 1}
        end = max(s["offset"] + s["length"] for s in doc["sections"])
        doc["sections"].append({"name": "index", "offset": (end + 63) // 64 * 64, "length": 0, "crc32": 0})

    rebuilt = bytearray(_rebuild(data, add))
    rebuilt += bytes((-len(rebuilt)) % 64)
    _reject(bytes(rebuilt), r"unknown key\(s\) \['future'\]")
    struct.pack_into("<H", rebuilt, 10, 7)
    f = nnfile.decode(bytes(rebuilt))
    assert f.format_version == (1, 7)
    assert_models_equal(rich_model(), f.model)


def test_rebuild_helper_itself_is_valid(data):
    assert_models_equal(rich_model(), nnfile.decode(_rebuild(data)).model)


@pytest.mark.parametrize(
    "raw,match",
    [
        (b"[1, 2]", "metadata must be a JSON object, got list"),
        (b"\xff\xfe{}", "metadata is not valid UTF-8 at byte 32"),
        (b"{not json", "metadata is not valid JSON"),
        (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
        (b'{"x": NaN}', "NaN is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply|not valid JSON"),
        (b"{}", r"missing key\(s\) \['model', 'sections', 'producer', 'metadata'\]"),
    ],
)
def test_bad_metadata_json(data, raw, match):
    _reject(_rebuild(data, raw=raw, shift=256 * 1024), match)


def _pool_section(doc, i):
    return doc["sections"][1 + i]


@pytest.mark.parametrize(
    "mutate,match",
    [
        (
            lambda d: d["model"]["main"]["operands"][3].update(dimensions=["64", 4]),
            r"invalid model: model\.main\.operands\[3\]\.dimensions\[0\]: expected a non-negative int below 2\*\*31, got '64'",
        ),
        (
            lambda d: d["model"]["main"]["operands"][2].update(scale=None),
            r"model\.main\.operands\[2\]\.scale",
        ),
        (
            lambda d: d["model"].update(relaxComputationFloat32toFloat16="yes"),
            "relaxComputationFloat32toFloat16",
        ),
        (lambda d: d.update(producer=3), "producer: expected a string"),
        (lambda d: d.update(metadata={"a": 1}), "expected an object mapping strings to strings"),
        (lambda d: d.update(metadata=[]), "expected an object mapping strings to strings"),
        (lambda d: d.update(sections={}), "sections: expected a list"),
        (
            lambda d: _pool_section(d, 0).update(offset=_pool_section(d, 0)["offset"] + 8),
            r"section 'pool\[0\]' starts at byte \d+, which is not a multiple of 64",
        ),
        (
            lambda d: _pool_section(d, 1).update(offset=_pool_section(d, 0)["offset"]),
            r"section 'pool\[1\]' starts at byte \d+, inside the previous section",
        ),
        (
            lambda d: d["sections"][0].update(offset=0),
            r"section 'operand_values' starts at byte 0, inside the metadata",
        ),
        (lambda d: _pool_section(d, 1).update(length=2**62), r"truncated: section 'pool\[1\]' ends at byte"),
        (lambda d: _pool_section(d, 1).update(length=-1), r"sections\[2\]\.length: expected an int"),
        (lambda d: _pool_section(d, 1).update(crc32=True), r"sections\[2\]\.crc32: expected an int"),
        (lambda d: _pool_section(d, 1).update(extra=1), r"sections\[2\]: expected an object with keys"),
        (lambda d: _pool_section(d, 1).update(name="weights"), "section 'weights': unknown section name"),
        (
            lambda d: _pool_section(d, 1).update(length=_pool_section(d, 1)["length"] - 4),
            "unexpected bytes after the last section",
        ),
        (lambda d: d["model"]["pools"].pop(), r"section 'pool\[1\]' is referenced by no pool"),
        (lambda d: d["model"]["pools"].append({"length": 0}), r"pool\[2\] has no section"),
        (lambda d: d["sections"].pop(0), "expected exactly one 'operand_values' section, found 0"),
        (
            lambda d: d["model"]["pools"][0].update(length=1),
            r"invalid model: model\.pools\[0\]\.length: 1 but the supplied pool has 1024",
        ),
    ],
)
def test_bad_metadata_fields(data, mutate, match):
    _reject(_rebuild(data, mutate), match)


# ------------------------------------------------------------ write failures


def test_write_leaves_nothing_when_encoding_fails(tmp_path):
    path = tmp_path / "model.nnm"
    with pytest.raises(NnFileError, match="metadata must map str to str"):
        nnfile.write(rich_model(), path, metadata={"n": 3})
    bad = Model(Subgraph((Operand(3, (-3,)),), (), (), ()))
    with pytest.raises(
        NnFileError, match=r"cannot encode: invalid model: main\.operands\[0\]\.dimensions\[0\]"
    ):
        nnfile.write(bad, path)
    assert os.listdir(tmp_path) == []


def test_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "model.nnm"
    nnfile.write(rich_model(), path)
    before = path.read_bytes()

    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(nnfile.os, "fsync", boom)
    with pytest.raises(OSError, match="No space left"):
        nnfile.write(Model(Subgraph((), (), (), ())), path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["model.nnm"]
    assert path.read_bytes() == before
