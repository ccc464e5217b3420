"""Units of distributed work and the function that runs one, on a cluster worker or in this process.

A unit crosses the process boundary as JSON text and its result comes back as JSON text: nothing of
mlts's own is pickled (the engine pickles only the reference to `run_unit`). The result carries where
the unit ran (host, worker, pid), when (wall clock), and the files it wrote under its scratch folder
(reproducers, dumped graphs), base64-encoded up to `MAX_FILE_BYTES`, since a worker's disk is not the
client's.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlts.cluster.endpoints import this_host

#: The event topic units report their start on (the engine's progress listens to it).
TOPIC = "mlts-units"
#: Files a unit may send back (reproducers, dumps); past this they stay on the worker, and the result says so.
MAX_FILE_BYTES = 64 << 20


@dataclass(frozen=True)
class Unit:
    """One independent piece of a suite: what to run (`payload`, plain JSON) and how to place it.

    `timing`: it measures latency, so it runs on a quiet worker; `host`: it must run on that machine
    (it names a Unix socket there); `order`: where its results go in the merged document.
    """

    id: str
    kind: str
    label: str
    payload: dict[str, Any]
    order: tuple[int, ...]
    timing: bool = False
    host: str | None = None
    device: str | None = None

    def to_text(self) -> str:
        return json.dumps({"id": self.id, "kind": self.kind, "label": self.label, "payload": self.payload})


@dataclass
class UnitOutcome:
    """What came back for a unit: its result (JSON) or why it could not run, and where it ran."""

    unit: Unit
    ok: bool
    result: Any = None
    error: str | None = None
    host: str | None = None
    worker: str | None = None
    pid: int | None = None
    started: float | None = None
    ended: float | None = None
    attempts: int = 1
    files: dict[str, bytes] = field(default_factory=dict)
    files_left: list[str] = field(default_factory=list)
    host_info: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        if self.started is None or self.ended is None:
            return 0.0
        return max(0.0, self.ended - self.started)


def outcome_from_text(unit: Unit, text: Any) -> UnitOutcome:
    """The outcome of `unit` from the JSON text a worker returned; anything malformed is an error outcome."""
    try:
        if not isinstance(text, str):
            raise ValueError(f"a {type(text).__name__} instead of JSON text")
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("id") != unit.id:
            raise ValueError("the result names another unit")
        files = {}
        for name, encoded in (data.get("files") or {}).items():
            if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
                raise ValueError(f"a file outside the unit's folder: {name!r}")
            files[name] = base64.b64decode(encoded, validate=True)
        return UnitOutcome(
            unit,
            ok=bool(data.get("ok")),
            result=data.get("result"),
            error=data.get("error"),
            host=_str(data.get("host")),
            worker=_str(data.get("worker")),
            pid=data.get("pid") if isinstance(data.get("pid"), int) else None,
            started=_num(data.get("started")),
            ended=_num(data.get("ended")),
            files=files,
            files_left=[str(f) for f in data.get("files_left") or []],
            host_info=dict(data["host_info"]) if isinstance(data.get("host_info"), dict) else {},
        )
    except (ValueError, TypeError) as e:
        return UnitOutcome(unit, ok=False, error=f"the worker's answer is unusable: {e}")


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# --- the worker side ------------------------------------------------------------------------------------

Runner = Callable[[dict[str, Any], str], Any]


def _runners() -> dict[str, Runner]:
    from mlts.cluster import benchmark_units, stress_units, validate_units

    return {"validate": validate_units.run, "stress": stress_units.run, "benchmark": benchmark_units.run}


def run_unit(text: str) -> str:
    """Run the unit in `text` (JSON) here and return its outcome as JSON text; never raises.

    On a Dask worker it first reports its start on the `TOPIC` event stream (for the client's progress).
    """
    started = time.time()
    unit = json.loads(text)
    worker = _dask_worker()
    address = getattr(worker, "address", None)
    if worker is not None:
        worker.log_event(TOPIC, {"id": unit["id"], "state": "started", "worker": address, "pid": os.getpid()})
    scratch = tempfile.mkdtemp(prefix="mlts-unit-")
    out: dict[str, Any] = {"id": unit["id"], "host": this_host(), "worker": address, "pid": os.getpid()}
    try:
        runner = _runners().get(unit.get("kind"))
        if runner is None:
            raise ValueError(f"unknown unit kind {unit.get('kind')!r}")
        out.update(ok=True, result=runner(unit["payload"], scratch))
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the unit's own failure is its result, never the worker's death
        where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" (at {where.filename}:{where.lineno})" if where else ""
        out.update(ok=False, error=" ".join(f"{type(e).__name__}: {e}{at}".split()))
    try:
        out["files"], out["files_left"] = _collect(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out["host_info"] = _host_info()
    out["started"], out["ended"] = started, time.time()
    if worker is not None:
        worker.log_event(TOPIC, {"id": unit["id"], "state": "ended", "worker": address})
    return json.dumps(out, allow_nan=False)


def _dask_worker():
    try:
        from distributed import get_worker
    except ImportError:
        return None
    try:
        return get_worker()
    except ValueError:  # not inside a Dask task
        return None


def _collect(scratch: str) -> tuple[dict[str, str], list[str]]:
    """The files under `scratch/out` (relative path -> base64), as many as fit in MAX_FILE_BYTES."""
    root = os.path.join(scratch, "out")
    files: dict[str, str] = {}
    left: list[str] = []
    total = 0
    for folder, _dirs, names in os.walk(root):
        for name in sorted(names):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            size = os.path.getsize(path)
            if total + size > MAX_FILE_BYTES:
                left.append(rel)
                continue
            with open(path, "rb") as f:
                files[rel] = base64.b64encode(f.read()).decode("ascii")
            total += size
    return files, left


def _host_info() -> dict[str, Any]:
    import mlts
    from mlts.records.environment import cpu_features, cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cpu_features": cpu_features(),
        "mlts": getattr(mlts, "__version__", None),
    }


def absolute(paths: Any) -> list[str]:
    """Paths a user gave, made absolute: a worker's working folder is not the client's."""
    return [os.path.abspath(p) for p in paths or ()]


def scratch_out(scratch: str, *parts: str) -> str:
    """A folder under the unit's `out` folder (created): what is written there comes back to the client."""
    path = os.path.join(scratch, "out", *parts)
    os.makedirs(path, exist_ok=True)
    return path


def write_files(files: dict[str, bytes], root: str, prefix: str) -> dict[str, str]:
    """Write the files a unit sent back under root (only those under `prefix/`); worker path -> local path."""
    written: dict[str, str] = {}
    for rel, data in files.items():
        if not rel.startswith(prefix + os.sep) and not rel.startswith(prefix + "/"):
            continue
        dest = os.path.join(root, rel[len(prefix) + 1 :])
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        with open(dest, "wb") as f:
            f.write(data)
        written[rel] = dest
    return written
