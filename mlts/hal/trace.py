"""Phases of calls recorded for a Chrome-trace / Perfetto timeline (`--trace FILE`).

Every process that takes part records the spans it sees, on CLOCK_MONOTONIC,
which all processes of the machine share: a tool records its preparations and
executions (mlts.runtime.trace), a driver service the time each execution
waited in its queue and ran in the driver. A process records only while
tracing is on: the tool turns it on with `enable` and names a directory in
MLTS_TRACE_DIR, which the driver services it starts inherit; each process
appends its spans, one JSON object a line, to `DIR/trace-PID.jsonl` as they
end (so a service stopped abruptly loses nothing already recorded), and the
tool merges the files into one trace when it finishes.

A span is a complete event of the Trace Event Format: name, category, `ph`
"X", `ts` and `dur` in microseconds, `pid`, `tid`, and `args`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

ENV = "MLTS_TRACE_DIR"

#: Whether this process records spans (a plain attribute: checked on every execution).
enabled = False
_lock = threading.Lock()
_file: Any = None
_path: str | None = None


def enable(directory: str) -> str:
    """Record this process's spans into `directory` from now on; the file they go to."""
    global enabled, _file, _path
    with _lock:
        if _file is not None:
            _file.close()
        _path = os.path.join(directory, f"trace-{os.getpid()}.jsonl")
        _file = open(_path, "a", encoding="utf-8")  # noqa: SIM115  (kept open while recording)
        enabled = True
    return _path


def disable() -> None:
    """Stop recording; the file is complete."""
    global enabled, _file
    with _lock:
        enabled = False
        if _file is not None:
            _file.close()
            _file = None


def now_ns() -> int:
    return time.monotonic_ns()


def span(name: str, cat: str, start_ns: int, end_ns: int, **args: Any) -> None:
    """Record a complete span from `start_ns` to `end_ns` (CLOCK_MONOTONIC) on this thread."""
    if not enabled:
        return
    event = {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": start_ns / 1000,
        "dur": max(0, end_ns - start_ns) / 1000,
        "pid": os.getpid(),
        "tid": threading.get_native_id(),
        "args": args,
    }
    line = json.dumps(event, default=str) + "\n"
    with _lock:
        if _file is not None:
            _file.write(line)
            _file.flush()


def name_process(label: str) -> None:
    """Name this process in the trace (a metadata event)."""
    if not enabled:
        return
    event = {"name": "process_name", "ph": "M", "pid": os.getpid(), "tid": 0, "args": {"name": label}}
    with _lock:
        if _file is not None:
            _file.write(json.dumps(event) + "\n")
            _file.flush()


def _from_environment() -> None:
    directory = os.environ.get(ENV, "")
    if directory and os.path.isdir(directory):
        try:
            enable(directory)
        except OSError:
            pass  # a directory this process cannot write: no spans from it


_from_environment()
