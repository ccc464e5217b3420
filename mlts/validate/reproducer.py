"""Reproducer files: what a failing case sent to the driver and what it expected back.

A reproducer is a JSON sidecar `CASE.json` plus, when it involves a model,
`CASE.nnm` (the project's NN graph file, docs/nnm-format.md), and for raw
byte cases a data file `CASE.frame` (one wire frame) or `CASE.ring` (burst
ring contents). `mlts validate --replay FILE` takes the sidecar, the .nnm or
the data file and runs the case again. The sidecar (docs/validate.md):

    {
      "format": "mlts-validate-reproducer", "version": 1,
      "suite": "validation", "case": "operand 3: scale 0 on TENSOR_QUANT8_ASYMM",
      "kind": "model" | "request" | "frame" | "ring" | ...,
      "model": "CASE.nnm" | null,          # relative to the sidecar
      "data": "CASE.frame" | null,         # raw bytes of a frame / ring case
      "raw": true,                         # send through a service that does not pre-validate
      "prepare": {"preference": 1, "priority": 1},
      "request": {"inputs": [...], "outputs": [...],           # codec's request arguments
                  "pools": [{"size": N, "data": "<base64>" | null}]},
      "execution": {"mode": "sync", "measure": false, "loop_timeout": null},
      "expect": {"status": "INVALID_ARGUMENT"}
              | {"status": "NONE", "outputs": [{"index": 0, "dtype": "float32", "shape": [2],
                                                "data": "<base64>", "atol": 1e-5, "rtol": 6e-7}]},
      "note": "free text"
    }

`kind` picks the replayer (`REPLAYERS`): "model" prepares the model and
checks the status (getSupportedOperations too when "check" is "supported"),
"request" prepares it and runs the request, "frame" and "ring" send raw bytes
and check the driver stays alive. Everything read here is untrusted: sizes
are checked before anything is allocated, files are read only when they are
regular files of bounded size (a FIFO or a device is refused at once), a .nnm
file's header is checked before the rest is read, JSON nested too deeply is a
one-line error, and a request may name at most MAX_POOLS pools (one frame
carries at most that many file descriptors) of MAX_DATA_BYTES in all.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlts.hal import codec, files, nnfile
from mlts.hal.enums import ErrorStatus
from mlts.hal.memory import SharedMemory
from mlts.hal.types import Model, Request
from mlts.ipc.wire import MAX_FDS

FORMAT = "mlts-validate-reproducer"
VERSION = 1
#: Reproducer kind -> "module:function" replaying it (function(target, reproducer) -> CaseResult).
REPLAYERS: dict[str, str] = {
    "model": "mlts.validate.replay:replay_model",
    "request": "mlts.validate.replay:replay_request",
    "frame": "mlts.validate.replay:replay_frame",
    "ring": "mlts.validate.fuzz_replay:replay_ring",
}
#: Data file suffix of each raw byte kind.
DATA_SUFFIX = {"frame": ".frame", "ring": ".ring"}
MAX_SIDECAR_BYTES = 64 << 20
MAX_DATA_BYTES = 256 << 20
#: The largest model file a reproducer may name (its header is checked before it is read).
MAX_MODEL_BYTES = MAX_DATA_BYTES
#: Pools of a saved request: each is a shared memory sent with the call, at most one frame's fds.
MAX_POOLS = MAX_FDS
_KEYS = frozenset(
    {"format", "version", "suite", "case", "kind", "model", "data", "raw", "prepare", "request"}
    | {"execution", "expect", "note", "check"}
)


class ReproducerError(ValueError):
    """A file that is not a readable reproducer; the message is one line."""


@dataclass(frozen=True)
class Reproducer:
    """A loaded reproducer: the sidecar's fields, the model (if any) and the raw data (if any)."""

    path: str
    suite: str
    case: str
    kind: str
    doc: Mapping[str, Any]
    model: Model | None = None
    data: bytes | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def raw(self) -> bool:
        return bool(self.doc.get("raw", True))

    @property
    def expected_status(self) -> ErrorStatus | None:
        name = (self.doc.get("expect") or {}).get("status")
        return None if name is None else ErrorStatus[name]


def slug(text: str, limit: int = 80) -> str:
    """A file name stem made from a case name."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.")
    return (s or "case")[:limit]


def _unique_stem(out_dir: str, suite: str, case: str) -> str:
    base = os.path.join(out_dir, f"{slug(suite, 20)}-{slug(case)}")
    stem, n = base, 1
    while os.path.exists(stem + ".json"):
        n += 1
        stem = f"{base}-{n}"
    return stem


def request_to_doc(request: Request) -> dict[str, Any]:
    """A request with memory pools as a sidecar "request" (pool contents in base64)."""
    doc = codec.request_to_dict(request)
    pools: list[dict[str, Any]] = []
    for pool in request.pools:
        if isinstance(pool, int):
            pools.append({"token": int(pool)})
        else:
            data = bytes(pool.buffer)
            pools.append(
                {"size": len(data), "data": base64.b64encode(data).decode("ascii") if data else None}
            )
    doc["pools"] = pools
    return doc


def request_from_doc(doc: Any, where: str = "request") -> Request:
    """The inverse of `request_to_doc`: pools become shared memory (every path takes it) with the saved contents.

    The pools' count (at most MAX_POOLS) and sizes (MAX_DATA_BYTES in all) are checked before any is made.
    """
    try:
        descs = codec.request_pool_descs(doc, where)
    except RecursionError:
        raise ReproducerError(f"{where} is nested too deeply") from None
    except Exception as e:
        raise ReproducerError(f"{where}: {getattr(e, 'message', e)}") from None
    if len(descs) > MAX_POOLS:
        raise ReproducerError(
            f"{where}.pools has {len(descs)} pools; at most {MAX_POOLS} are supported (one call carries at "
            f"most {MAX_FDS} file descriptors)"
        )
    total = 0
    for i, d in enumerate(descs):
        if "token" in d:
            continue
        size = d.get("size")
        if type(size) is not int or not 0 <= size <= MAX_DATA_BYTES:
            raise ReproducerError(f"{where}.pools[{i}].size must be a byte count up to {MAX_DATA_BYTES}")
        total += size
    if total > MAX_DATA_BYTES:
        raise ReproducerError(
            f"{where}.pools hold {total} bytes in all; at most {MAX_DATA_BYTES} are supported"
        )
    pools: list[Any] = []
    try:
        for i, d in enumerate(descs):
            if "token" in d:
                pools.append(d["token"] if type(d["token"]) is int else -1)
                continue
            size = d["size"]
            memory = SharedMemory.create(max(size, 1), "mlts-replay")
            pools.append(memory)
            if d.get("data") is not None:
                raw = _b64(d["data"], f"{where}.pools[{i}].data")
                if len(raw) != size:
                    raise ReproducerError(f"{where}.pools[{i}]: data has {len(raw)} bytes, size says {size}")
                memory.buffer[: len(raw)] = raw
        return codec.request_from_dict(doc, pools, where)
    except BaseException as e:
        for pool in pools:
            if isinstance(pool, SharedMemory):
                pool.close()
        if isinstance(e, ReproducerError):
            raise
        if isinstance(e, RecursionError):
            raise ReproducerError(f"{where} is nested too deeply") from None
        if isinstance(e, Exception):
            raise ReproducerError(f"{where}: {getattr(e, 'message', e)}") from None
        raise


def _b64(text: Any, where: str) -> bytes:
    if not isinstance(text, str) or len(text) > MAX_DATA_BYTES * 4 // 3 + 4:
        raise ReproducerError(f"{where} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ReproducerError(f"{where} is not valid base64") from None


def save(
    out_dir: str,
    suite: str,
    case: str,
    kind: str,
    *,
    model: Model | None = None,
    data: bytes | None = None,
    request: Request | None = None,
    expect: Mapping[str, Any] | None = None,
    raw: bool = True,
    prepare: Mapping[str, Any] | None = None,
    execution: Mapping[str, Any] | None = None,
    note: str = "",
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Write a reproducer into `out_dir`; returns the sidecar's path.

    A model that cannot be encoded as .nnm (a mutation beyond what the file can hold) raises ValueError.
    """
    os.makedirs(out_dir, exist_ok=True)
    stem = _unique_stem(out_dir, suite, case)
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "suite": suite,
        "case": case,
        "kind": kind,
        "model": None,
        "data": None,
        "raw": raw,
    }
    if model is not None:
        nnfile.write(model, stem + ".nnm", metadata={"suite": suite, "case": case[:200]})
        doc["model"] = os.path.basename(stem + ".nnm")
    if data is not None:
        path = stem + DATA_SUFFIX.get(kind, ".bin")
        with open(path, "wb") as f:
            f.write(data)
        doc["data"] = os.path.basename(path)
    if prepare is not None:
        doc["prepare"] = dict(prepare)
    if request is not None:
        doc["request"] = request_to_doc(request)
    if execution is not None:
        doc["execution"] = dict(execution)
    doc["expect"] = dict(expect or {})
    if note:
        doc["note"] = note
    for key, value in (extra or {}).items():
        doc[key] = value
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return stem + ".json"


def _sidecar_for(path: str) -> str | None:
    stem, ext = os.path.splitext(path)
    if ext == ".json":
        return path
    candidate = stem + ".json"
    return candidate if os.path.isfile(candidate) else None


def _read_bounded(path: str, limit: int, what: str) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them (checked before reading)."""
    try:
        fd, _ = files.open_regular(path, what=f"the {what}", limit=limit)
        with os.fdopen(fd, "rb") as f:
            return f.read(limit + 1)
    except OSError as e:
        raise ReproducerError(f"cannot read {what} {path}: {e.strerror or e}") from None


def _load_model(path: str) -> Model:
    """The model of .nnm file `path`: a regular file of at most MAX_MODEL_BYTES whose header is checked
    before the rest is read."""
    try:
        fd, size = files.open_regular(path, what="a .nnm model", limit=MAX_MODEL_BYTES)
    except OSError as e:
        raise ReproducerError(f"{path} is not a readable .nnm model: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        head = f.read(nnfile.HEADER_SIZE)
        if head[: len(nnfile.MAGIC)] != nnfile.MAGIC:
            raise ReproducerError(
                f"{path} is not a readable .nnm model: not an mlts .nnm file (its first bytes are "
                f"{head[: len(nnfile.MAGIC)]!r}, expected {nnfile.MAGIC!r})"
            )
        data = head + f.read(size + 1 - len(head))
    try:
        return nnfile.decode(data, name=path).model
    except RecursionError:
        raise ReproducerError(
            f"{path} is not a readable .nnm model: its metadata is nested too deeply"
        ) from None
    except ValueError as e:
        raise ReproducerError(
            f"{path} is not a readable .nnm model: {getattr(e, 'problem', None) or e}"
        ) from None


def load(path: str) -> Reproducer:
    """The reproducer at `path` (a sidecar, a .nnm with or without sidecar, or a .frame/.ring file)."""
    if not os.path.exists(path):
        raise ReproducerError(f"no such reproducer file: {path}")
    sidecar = _sidecar_for(path)
    if sidecar is None:
        return _bare(path)
    raw = _read_bounded(sidecar, MAX_SIDECAR_BYTES, "reproducer")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReproducerError(f"{sidecar} is not a reproducer (not JSON: {e})") from None
    except RecursionError:
        raise ReproducerError(f"{sidecar} is not a reproducer (its JSON is nested too deeply)") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ReproducerError(f"{sidecar} is not a reproducer (format is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ReproducerError(f"{sidecar}: reproducer version {doc.get('version')!r} is not {VERSION}")
    unknown = sorted(set(doc) - _KEYS)
    kind = doc.get("kind")
    if not isinstance(kind, str) or kind not in REPLAYERS:
        raise ReproducerError(f"{sidecar}: kind {kind!r} is not one of {', '.join(REPLAYERS)}")
    for key in ("suite", "case"):
        if not isinstance(doc.get(key), str):
            raise ReproducerError(f"{sidecar}: {key!r} must be a string")
    expect = doc.get("expect", {})
    if not isinstance(expect, dict):
        raise ReproducerError(f"{sidecar}: 'expect' must be an object")
    status = expect.get("status")
    if status is not None and status not in ErrorStatus.__members__:
        raise ReproducerError(f"{sidecar}: expect.status {status!r} is not an ErrorStatus name")
    base = os.path.dirname(os.path.abspath(sidecar))
    model = data = None
    if doc.get("model") is not None:
        model = _load_model(_beside(base, doc["model"], sidecar))
    if doc.get("data") is not None:
        data = _read_bounded(_beside(base, doc["data"], sidecar), MAX_DATA_BYTES, "data file")
    if kind in ("model", "request") and model is None:
        raise ReproducerError(f"{sidecar}: a {kind!r} reproducer needs a 'model' file")
    if kind in DATA_SUFFIX and data is None:
        raise ReproducerError(f"{sidecar}: a {kind!r} reproducer needs a 'data' file")
    extra = {k: doc[k] for k in unknown}
    return Reproducer(sidecar, doc["suite"], doc["case"], kind, doc, model, data, extra)


def _beside(base: str, name: Any, sidecar: str) -> str:
    """A file named by the sidecar: a plain name in the sidecar's folder (no paths elsewhere)."""
    if not isinstance(name, str) or not name or os.path.basename(name) != name:
        raise ReproducerError(f"{sidecar}: file name {name!r} must be a plain name beside the sidecar")
    return os.path.join(base, name)


def _bare(path: str) -> Reproducer:
    """A .nnm without sidecar (prepare it; the driver must answer and stay alive) or a raw data file."""
    ext = os.path.splitext(path)[1]
    if ext == ".nnm":
        model = _load_model(path)
        doc = {"kind": "model", "raw": True, "expect": {}}
        return Reproducer(path, "replay", os.path.basename(path), "model", doc, model)
    kinds = {suffix: kind for kind, suffix in DATA_SUFFIX.items()}
    if ext in kinds:
        data = _read_bounded(path, MAX_DATA_BYTES, "data file")
        doc = {"kind": kinds[ext], "raw": True, "expect": {}}
        return Reproducer(path, "replay", os.path.basename(path), kinds[ext], doc, None, data)
    raise ReproducerError(
        f"{path} is not a reproducer: expected a sidecar .json, a .nnm model or a "
        f"{'/'.join(DATA_SUFFIX.values())} data file"
    )


def expected_outputs(doc: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """The "expect.outputs" list of a sidecar (empty when outputs are not checked)."""
    outputs = (doc.get("expect") or {}).get("outputs") or []
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise ReproducerError("expect.outputs must be a list of objects")
    return outputs
