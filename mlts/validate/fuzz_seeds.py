"""Seed inputs of the fuzz suite: valid models, requests, wire frames and burst ring images.

Every seed is something a well-behaved client sends; the mutators start from them so
most mutants are close to valid and reach deep into the decoders and validators.
`nnm_bytes` writes .nnm bytes for any model document (a mutated one included) with a
correct metadata checksum, so mutations get past the file's integrity check.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.hal import codec
from mlts.hal.enums import MeasureTiming, OperandType, OperationType
from mlts.hal.nnfile import ALIGNMENT, FORMAT_MAJOR, FORMAT_MINOR, HEADER, HEADER_SIZE, MAGIC
from mlts.hal.opprobe import probe_model
from mlts.hal.types import DataLocation, Model, RequestArgument
from mlts.ipc import burst_messages as msg
from mlts.ipc import wire
from mlts.ipc.burst_ring import Ring

T = OperandType
#: Probe models the model and request seeds start from (operation, key type).
SEED_OPERATIONS = (
    (OperationType.ADD, T.TENSOR_FLOAT32),
    (OperationType.CONV_2D, T.TENSOR_QUANT8_ASYMM),
    (OperationType.CONCATENATION, T.TENSOR_FLOAT16),
    (OperationType.RESHAPE, T.TENSOR_FLOAT32),
    (OperationType.SOFTMAX, T.TENSOR_FLOAT32),
    (OperationType.GATHER, T.TENSOR_INT32),
    (OperationType.LSTM, T.TENSOR_FLOAT32),
    (OperationType.SPLIT, T.TENSOR_QUANT8_ASYMM_SIGNED),
)
#: The model whose requests, frames and rings are fuzzed (two [1,2,2,2] float32 inputs, one output).
REQUEST_MODEL = (OperationType.ADD, T.TENSOR_FLOAT32)
RING_CAPACITY = 4096


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def nnm_bytes(model_doc: Any, blobs: list[bytes]) -> bytes:
    """A .nnm file holding `model_doc` (any JSON value) and these data sections, checksums correct."""
    names = ["operand_values"] + ["pool"] * (len(blobs) - 1)
    data_start = _align(HEADER_SIZE)
    while True:
        offsets, pos = [], data_start
        for b in blobs:
            pos = _align(pos)
            offsets.append(pos)
            pos += len(b)
        sections = [
            {"name": n, "offset": o, "length": len(b), "crc32": zlib.crc32(b)}
            for n, b, o in zip(names, blobs, offsets, strict=True)
        ]
        doc = {"model": model_doc, "sections": sections, "producer": "mlts fuzz", "metadata": {}}
        text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        needed = _align(HEADER_SIZE + len(text))
        if needed <= data_start:
            break
        data_start = needed
    out = bytearray(HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, 0, len(text), zlib.crc32(text), 0) + text)
    for b, o in zip(blobs, offsets, strict=True):
        out += bytes(o - len(out)) + b
    return bytes(out)


def parse_nnm(data: bytes) -> tuple[Any, list[bytes]] | None:
    """(model document, data sections) of .nnm bytes whose header and metadata JSON read, else None."""
    try:
        meta_len = struct.unpack_from("<Q", data, 16)[0]
        doc = json.loads(data[HEADER_SIZE : HEADER_SIZE + meta_len])
        blobs = [data[s["offset"] : s["offset"] + s["length"]] for s in doc["sections"]]
        return doc["model"], blobs
    except (struct.error, ValueError, KeyError, TypeError):
        return None


def fix_checksum(data: bytes) -> bytes:
    """`data` with its metadata checksum recomputed (when the header's length fits), so mutants reach the JSON."""
    if len(data) < HEADER_SIZE:
        return data
    meta_len = struct.unpack_from("<Q", data, 16)[0]
    if HEADER_SIZE + meta_len > len(data):
        return data
    crc = zlib.crc32(data[HEADER_SIZE : HEADER_SIZE + meta_len])
    return data[:24] + struct.pack("<I", crc) + data[28:]


@dataclass(frozen=True)
class ModelSeed:
    doc: dict
    blobs: list[bytes]


def model_seeds() -> list[ModelSeed]:
    seeds = []
    for op, key in SEED_OPERATIONS:
        model = probe_model(op, key)
        blobs = [bytes(model.operand_values)] + [bytes(p.buffer) for p in model.pools]
        seeds.append(ModelSeed(codec.model_to_dict(model), blobs))
    return seeds


def request_model() -> Model:
    return probe_model(*REQUEST_MODEL)


def request_seed(model: Model) -> tuple[dict, int]:
    """A valid request document for `model` (one pool, described as fd 0) and the pool's size."""
    sub = model.main
    offset = 0
    ins, outs = [], []
    for i in sub.input_indexes:
        size = sub.operands[i].byte_size()
        ins.append(RequestArgument(False, DataLocation(0, offset, size), ()))
        offset += size
    for i in sub.output_indexes:
        size = sub.operands[i].byte_size()
        outs.append(RequestArgument(False, DataLocation(0, offset, size), ()))
        offset += size
    doc = {
        "inputs": [codec.argument_to_dict(a) for a in ins],
        "outputs": [codec.argument_to_dict(a) for a in outs],
        "pools": [{"fd": 0, "size": offset}],
    }
    return doc, offset


def prepare_args(size: int) -> dict:
    """prepareModel's arguments for a model of `size` bytes passed as fd 0 (no cache, no deadline)."""
    return {
        "model": {"fd": 0, "size": size},
        "preference": 1,
        "priority": 1,
        "deadline": None,
        "model_cache": [],
        "data_cache": [],
        "token": "",
    }


def frame_seeds(model_size: int = 0) -> list[bytes]:
    """Frames a client sends (without fds): queries, calls with bad handles, a burst call."""
    calls: list[tuple[str, dict]] = [
        ("ping", {}),
        ("getCapabilities", {}),
        ("getVersionString", {}),
        ("getSupportedExtensions", {}),
        ("getNumberOfCacheFilesNeeded", {}),
        ("serviceStatus", {}),
        ("releasePreparedModel", {"prepared": 1}),
        ("freeMemory", {"ids": [1, 2]}),
        ("mapMemories", {"memories": [{"memory": 1, "fd": 0, "size": 4096}]}),
        (
            "prepareModel",
            prepare_args(model_size or 4096),
        ),
        (
            "executeSynchronously",
            {
                "prepared": 1,
                "measure": 0,
                "deadline": None,
                "loop_timeout": None,
                "request": {"inputs": [], "outputs": [], "pools": []},
            },
        ),
        (
            "configureExecutionBurst",
            {
                "prepared": 1,
                "polling_us": 50,
                "request_ring": {"fd": 0, "event": 1, "size": 4288},
                "result_ring": {"fd": 2, "event": 3, "size": 4288},
            },
        ),
    ]
    frames = [
        wire.encode_frame({"kind": "call", "id": n + 1, "method": m, "args": a})
        for n, (m, a) in enumerate(calls)
    ]
    frames.append(frames[0] + frames[1])  # two frames back to back
    return frames


def burst_message(model: Model) -> bytes:
    """A valid burst request message for `model`'s request seed (its pool is slot 1)."""
    doc, _ = request_seed(model)
    ins = tuple(codec.argument_from_dict(a, "in") for a in doc["inputs"])
    outs = tuple(codec.argument_from_dict(a, "out") for a in doc["outputs"])
    request = msg.BurstRequest(1, (msg.PoolRef(msg.POOL_SLOT, 1),), ins, outs, MeasureTiming.NO, None, None)
    return msg.encode_request(request)


def ring_image(messages: list[bytes], capacity: int = RING_CAPACITY) -> bytes:
    """The bytes of a request ring (header and data) holding `messages`, as a producer writes them."""
    ring = Ring.create(capacity, "mlts-fuzz-ring")
    try:
        for m in messages:
            ring.write(m)
        return ring.image()
    finally:
        ring.close()


def ring_seeds(model: Model) -> list[bytes]:
    message = burst_message(model)
    return [ring_image([message]), ring_image([message, message]), ring_image([message[:20]])]


def float_inputs(model: Model, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sub = model.main
    return [rng.uniform(-1, 1, sub.operands[i].dimensions).astype(np.float32) for i in sub.input_indexes]
