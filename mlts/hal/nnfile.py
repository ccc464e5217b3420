"""The .nnm file: a versioned, memory-mappable binary container for one Model.

Layout (all integers little endian; docs/nnm-format.md is the reference):

    0   8s  magic b"NNMODEL\\0"
    8   u16 format major          10  u16 format minor
    12  u32 header flags (0)      16  u64 metadata length
    24  u32 crc32 of metadata     28  u32 reserved (0)
    32  metadata: UTF-8 JSON {"model", "sections", "producer", "metadata"}
    ... data sections (operand_values, then pool 0, 1, ...), each at a
        64-byte-aligned offset; the file ends where the last section ends.

Loading treats the bytes as hostile: every size is checked against the file
before anything is read, and nothing in the file is ever executed. Pools of a
decoded model are zero-copy views into the buffer (the mmap for `load`).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlts.errors import InputError
from mlts.hal import files, strict_json
from mlts.hal.atomic import write_atomic
from mlts.hal.codec import model_from_dict, model_to_dict
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.types import Model

MAGIC = b"NNMODEL\0"
FORMAT_MAJOR = 1
FORMAT_MINOR = 0
ALIGNMENT = 64
HEADER = struct.Struct("<8sHHIQII")
HEADER_SIZE = HEADER.size  # 32: the fixed 16-byte header plus metadata length, crc and reserved
SECTION_OPERAND_VALUES = "operand_values"
SECTION_POOL = "pool"
#: Largest metadata JSON read: ~300 bytes per operand or operation leaves room for 200 000 of them.
#: Parsing costs a few times this much memory, so it is checked before anything is read.
MAX_METADATA_BYTES = 64 << 20
_TOP_KEYS = ("model", "sections", "producer", "metadata")
_SECTION_KEYS = ("name", "offset", "length", "crc32")


class NnFileError(InputError):
    """A .nnm file (or buffer) that cannot be encoded or decoded; the message is one line."""

    def __init__(self, problem: str, *, name: str | None = None, offset: int | None = None) -> None:
        super().__init__(f"{name}: {problem}" if name else problem)
        self.name = name
        self.offset = offset
        self.problem = problem


@dataclass(frozen=True, slots=True)
class NnFile:
    """A decoded .nnm file: the model, its free-form metadata and where it came from."""

    model: Model
    metadata: dict[str, str] = field(default_factory=dict)
    format_version: tuple[int, int] = (FORMAT_MAJOR, FORMAT_MINOR)
    size: int = 0
    producer: str = ""


def _producer() -> str:
    try:
        from importlib.metadata import version

        return f"mlts {version('mlts')}"
    except Exception:  # not installed as a distribution: still a valid file
        return "mlts"


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


# ------------------------------------------------------------ encoding


@dataclass(frozen=True, slots=True)
class _Plan:
    head: bytes  # header + metadata
    sections: tuple[tuple[int, memoryview], ...]  # (file offset, bytes)
    size: int

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The file's bytes in order, padding included."""
        yield self.head
        pos = len(self.head)
        for offset, data in self.sections:
            if offset > pos:
                yield bytes(offset - pos)
            yield data
            pos = offset + data.nbytes


def _check_metadata(metadata: Mapping[str, str] | None, name: str | None) -> dict[str, str]:
    metadata = dict(metadata or {})
    for k, v in metadata.items():
        if type(k) is not str or type(v) is not str:
            raise NnFileError(
                f"cannot encode: metadata must map str to str, got {k!r}: {type(v).__name__}", name=name
            )
    return metadata


def _plan(model: Model, metadata: Mapping[str, str] | None, name: str | None = None) -> _Plan:
    meta = _check_metadata(metadata, name)
    model_dict = model_to_dict(model)
    try:
        # Decode what we are about to write: a file we produce must load.
        model_from_dict(model_dict, model.operand_values, model.pools)
    except HalError as e:
        raise NnFileError(f"cannot encode: invalid model: {e.message}", name=name) from None
    blobs = [(SECTION_OPERAND_VALUES, memoryview(model.operand_values).cast("B"))]
    blobs += [(SECTION_POOL, p.buffer.cast("B") if p.buffer.format != "B" else p.buffer) for p in model.pools]
    crcs = [zlib.crc32(b) for _, b in blobs]
    data_start = _align(HEADER_SIZE)
    while True:  # offsets are in the metadata, whose length moves the offsets: iterate to a fixed point
        offsets, pos = [], data_start
        for _, b in blobs:
            pos = _align(pos)
            offsets.append(pos)
            pos += b.nbytes
        sections = [
            {"name": n, "offset": o, "length": b.nbytes, "crc32": c}
            for (n, b), o, c in zip(blobs, offsets, crcs, strict=True)
        ]
        doc = {"model": model_dict, "sections": sections, "producer": _producer(), "metadata": meta}
        text = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
        needed = _align(HEADER_SIZE + len(text))
        if needed <= data_start:
            break
        data_start = needed
    head = HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, 0, len(text), zlib.crc32(text), 0) + text
    return _Plan(head, tuple(zip(offsets, (b for _, b in blobs), strict=True)), pos)


def encode(model: Model, *, metadata: dict[str, str] | None = None) -> bytes:
    """The .nnm bytes of `model`; `metadata` is free-form str -> str (e.g. source file, converter version)."""
    return b"".join(_plan(model, metadata).chunks())


def write(model: Model, path: str | os.PathLike[str], *, metadata: dict[str, str] | None = None) -> None:
    """Write `model` to `path` atomically (see `mlts.hal.atomic`); a model that cannot be encoded leaves no file."""
    path = os.fspath(path)
    write_atomic(path, _plan(model, metadata, name=path).chunks())


# ------------------------------------------------------------ decoding


def _parse_metadata(raw: bytes, err: Any) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise err(
            f"metadata is not valid UTF-8 at byte {HEADER_SIZE + e.start}", HEADER_SIZE + e.start
        ) from None
    try:
        doc = strict_json.loads(text)
    except RecursionError:
        raise err("metadata JSON is nested too deeply", HEADER_SIZE) from None
    except ValueError as e:
        raise err(f"metadata is not valid JSON: {e}", HEADER_SIZE) from None
    if type(doc) is not dict:
        raise err(f"metadata must be a JSON object, got {type(doc).__name__}", HEADER_SIZE)
    return doc


def _check_header(mv: memoryview, err: Any) -> tuple[int, int, int, int]:
    size = mv.nbytes
    head = bytes(mv[: len(MAGIC)])
    if head != MAGIC:
        if MAGIC.startswith(head):
            raise err(f"truncated: the header needs {HEADER_SIZE} bytes but the file has {size}", size)
        raise err(f"not an mlts .nnm file (magic {head!r}, expected {MAGIC!r})", 0)
    if size < HEADER_SIZE:
        raise err(f"truncated: the header needs {HEADER_SIZE} bytes but the file has {size}", size)
    _, major, minor, flags, meta_len, meta_crc, reserved = HEADER.unpack_from(mv, 0)
    if major > FORMAT_MAJOR:
        raise err(
            f"format version {major}.{minor} is newer than this reader supports "
            f"({FORMAT_MAJOR}.x); upgrade mlts to read it",
            8,
        )
    if major != FORMAT_MAJOR:
        raise err(f"format version {major}.{minor} is not supported (expected {FORMAT_MAJOR}.x)", 8)
    if flags != 0:
        raise err(f"header flags 0x{flags:08x} are not supported (expected 0)", 12)
    if reserved != 0:
        raise err(f"reserved header field is 0x{reserved:08x} (expected 0)", 28)
    if meta_len > size - HEADER_SIZE:
        raise err(
            f"truncated: metadata of {meta_len} bytes at byte {HEADER_SIZE} ends at byte "
            f"{HEADER_SIZE + meta_len} but the file has {size} bytes",
            16,
        )
    if meta_len > MAX_METADATA_BYTES:
        raise err(
            f"metadata of {meta_len} bytes exceeds the limit of {MAX_METADATA_BYTES} bytes "
            "(tensor data belongs in sections, not in the metadata)",
            16,
        )
    return minor, meta_len, meta_crc, size


def _check_sections(doc: dict, meta_end: int, size: int, newer_minor: bool, err: Any) -> list[dict]:
    """Geometry of the section table: types, alignment, bounds, order, no overlap, no trailing bytes."""
    sections = doc["sections"]
    if type(sections) is not list:
        raise err(f"sections: expected a list, got {type(sections).__name__}", HEADER_SIZE)
    checked: list[dict] = []
    end_of_data = meta_end
    counts: dict[str, int] = {}
    for i, s in enumerate(sections):
        if type(s) is not dict or s.keys() != set(_SECTION_KEYS):
            raise err(f"sections[{i}]: expected an object with keys {list(_SECTION_KEYS)}", HEADER_SIZE)
        name, offset, length, crc = (s[k] for k in _SECTION_KEYS)
        if type(name) is not str:
            raise err(f"sections[{i}].name: expected a string, got {name!r}", HEADER_SIZE)
        for key, value, hi in (
            ("offset", offset, 2**63 - 1),
            ("length", length, 2**63 - 1),
            ("crc32", crc, 2**32 - 1),
        ):
            if type(value) is not int or not 0 <= value <= hi:
                raise err(f"sections[{i}].{key}: expected an int in [0, {hi}], got {value!r}", HEADER_SIZE)
        index = counts.get(name, 0)
        counts[name] = index + 1
        label = f"{name}[{index}]" if name == SECTION_POOL else name
        if offset % ALIGNMENT:
            raise err(
                f"section '{label}' starts at byte {offset}, which is not a multiple of {ALIGNMENT}", offset
            )
        if offset < end_of_data:
            what = "the metadata" if end_of_data == meta_end else "the previous section"
            raise err(
                f"section '{label}' starts at byte {offset}, inside {what} (which ends at byte {end_of_data})",
                offset,
            )
        if offset + length > size:
            raise err(
                f"truncated: section '{label}' ends at byte {offset + length} but the file has {size} bytes",
                size,
            )
        end_of_data = offset + length
        if name in (SECTION_OPERAND_VALUES, SECTION_POOL):
            checked.append({"name": name, "label": label, "offset": offset, "length": length, "crc32": crc})
        elif not newer_minor:
            raise err(
                f"section '{label}': unknown section name (expected '{SECTION_OPERAND_VALUES}' or 'pool')",
                offset,
            )
    if end_of_data != size:
        raise err(
            f"{size - end_of_data} unexpected bytes after the last section (from byte {end_of_data})",
            end_of_data,
        )
    if counts.get(SECTION_OPERAND_VALUES, 0) != 1:
        raise err(
            f"expected exactly one '{SECTION_OPERAND_VALUES}' section, found {counts.get(SECTION_OPERAND_VALUES, 0)}",
            HEADER_SIZE,
        )
    return checked


def decode(
    buffer: bytes | bytearray | memoryview | mmap.mmap,
    *,
    verify_checksums: bool = True,
    name: str | None = None,
) -> NnFile:
    """Decode .nnm bytes; pools are zero-copy views into `buffer`.

    The metadata checksum is always verified; `verify_checksums=False` skips
    the data sections' (which means reading every byte of every pool).
    `name` (a file name) prefixes error messages.
    """

    def err(problem: str, offset: int | None) -> NnFileError:
        return NnFileError(problem, name=name, offset=offset)

    mv = memoryview(buffer).cast("B")
    minor, meta_len, meta_crc, size = _check_header(mv, err)
    meta_end = HEADER_SIZE + meta_len
    raw = bytes(mv[HEADER_SIZE:meta_end])
    actual_crc = zlib.crc32(raw)
    if actual_crc != meta_crc:
        raise err(
            f"metadata checksum mismatch (stored 0x{meta_crc:08x}, computed 0x{actual_crc:08x}): the file is corrupt",
            HEADER_SIZE,
        )
    doc = _parse_metadata(raw, err)
    newer_minor = minor > FORMAT_MINOR
    keys = set(doc)
    missing = [k for k in _TOP_KEYS if k not in keys]
    unknown = sorted(keys - set(_TOP_KEYS))
    if missing or (unknown and not newer_minor):
        problem = f"missing key(s) {missing}" if missing else f"unknown key(s) {unknown}"
        raise err(f"metadata: {problem}; expected {list(_TOP_KEYS)}", HEADER_SIZE)
    producer = doc["producer"]
    if type(producer) is not str:
        raise err(f"producer: expected a string, got {producer!r}", HEADER_SIZE)
    user_meta = doc["metadata"]
    if type(user_meta) is not dict or any(type(v) is not str for v in user_meta.values()):
        raise err("metadata.metadata: expected an object mapping strings to strings", HEADER_SIZE)
    sections = _check_sections(doc, meta_end, size, newer_minor, err)
    if verify_checksums:
        for s in sections:
            crc = zlib.crc32(mv[s["offset"] : s["offset"] + s["length"]])
            if crc != s["crc32"]:
                raise err(
                    f"section '{s['label']}' checksum mismatch at bytes {s['offset']}..{s['offset'] + s['length']} "
                    f"(stored 0x{s['crc32']:08x}, computed 0x{crc:08x}): the file is corrupt",
                    s["offset"],
                )
    views = {s["label"]: mv[s["offset"] : s["offset"] + s["length"]] for s in sections}
    pools = [HostMemory(v) for label, v in views.items() if label != SECTION_OPERAND_VALUES]
    model_doc = doc["model"]
    described = (
        len(model_doc["pools"]) if type(model_doc) is dict and type(model_doc.get("pools")) is list else None
    )
    if described is not None and described != len(pools):
        extra = (
            f"section 'pool[{described}]' is referenced by no pool"
            if len(pools) > described
            else (f"pool[{len(pools)}] has no section")
        )
        raise err(
            f"{extra} (the model has {described} pools, the file {len(pools)} pool sections)", HEADER_SIZE
        )
    try:
        model = model_from_dict(model_doc, views[SECTION_OPERAND_VALUES], pools, path="model")
    except HalError as e:
        raise err(f"invalid model: {e.message}", HEADER_SIZE) from None
    return NnFile(model, dict(user_meta), (FORMAT_MAJOR, minor), size, producer)


def load(path: str | os.PathLike[str], *, use_mmap: bool = True, verify_checksums: bool = True) -> NnFile:
    """Load a .nnm file; with `use_mmap` (default) the pools are views of a read-only mapping."""
    name = os.fspath(path)
    # A regular file of bounded size only: /dev/zero or a FIFO must not be read without end.
    fd, size = files.open_regular(name, what="a .nnm model", limit=files.MAX_NNM_BYTES)
    try:
        if not use_mmap or size == 0:  # mmap cannot map an empty file
            with os.fdopen(os.dup(fd), "rb") as f:
                return decode(f.read(size + 1), verify_checksums=verify_checksums, name=name)
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        nf = decode(mm, verify_checksums=verify_checksums, name=name)
    except BaseException:
        _close_quietly(mm)
        raise
    if not nf.model.pools:
        _close_quietly(mm)  # nothing points into the mapping
    return nf


def _close_quietly(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:
        # Views still reference the mapping; it is unmapped when they are released.
        pass
