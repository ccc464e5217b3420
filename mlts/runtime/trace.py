"""`--trace FILE`: the phases of every call of a run as a Chrome-trace / Perfetto JSON timeline.

While a `TraceWriter` is open, this process records each preparation and each
execution it makes through a Session (mlts.hal.trace), and the driver
services it starts record, on their side, how long each execution waited in
the service's queue and ran in the driver (they inherit MLTS_TRACE_DIR; a
shared service started by someone else records nothing). `close()` merges
everything into one JSON object with a "traceEvents" list of complete ("X")
events, timestamps and durations in microseconds on CLOCK_MONOTONIC, one
process per track; chrome://tracing, about:tracing and ui.perfetto.dev open
it.

Each execution on the tool's track is split into its phases where the
service recorded its side: `ipc` (the request travelling to the service and
being admitted), `queue` (waiting for a worker), `execute` (the driver
running it) and `ipc` again (the answer travelling back). Preparations show
as `prepare` spans, with the driver's `prepareModel` on the service's track.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlts.errors import InputError
from mlts.hal import trace


class TraceWriter:
    """Records the calls of this process (and of the services it starts) until `close()` writes `path`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        check_writable(self.path)
        self._dir = tempfile.mkdtemp(prefix="mlts-trace-")
        self._saved_env = os.environ.get(trace.ENV)
        os.environ[trace.ENV] = self._dir  # services started from now on record too
        trace.enable(self._dir)
        trace.name_process("mlts (tool)")
        self._closed = False

    def close(self) -> int:
        """Write the trace file (atomically); the number of events written. Idempotent."""
        if self._closed:
            return 0
        self._closed = True
        trace.disable()
        if self._saved_env is None:
            os.environ.pop(trace.ENV, None)
        else:
            os.environ[trace.ENV] = self._saved_env
        try:
            events = merge(read_events(Path(self._dir).glob("trace-*.jsonl")), os.getpid())
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}), encoding="utf-8")
            os.replace(tmp, self.path)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        return len(events)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_writable(path: Path) -> None:
    """InputError (one line) unless a trace file can be written at `path`."""
    if path.exists() and not path.is_file():
        raise InputError(f"--trace {path}: exists and is not a regular file")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"--trace {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"--trace {path}: folder {parent} is not writable")


def read_events(files: Iterable[Path]) -> list[dict[str, Any]]:
    """The events of the recorders' files; a line cut short by a process that was killed is skipped."""
    events = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "ph" in event:
                events.append(event)
    return events


def merge(events: list[dict[str, Any]], tool_pid: int) -> list[dict[str, Any]]:
    """The events with each execution of the tool split into its phases (see the module docstring)."""
    service: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        pid = e.get("args", {}).get("client_pid") if e.get("ph") == "X" else None
        if pid is not None and e.get("name") in ("queue", "execute"):
            service.setdefault(int(pid), []).append(e)
    for spans in service.values():
        spans.sort(key=lambda e: e["ts"])
    out = list(events)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "execution" or e.get("pid") != tool_pid:
            continue
        out += _phases(e, service.get(tool_pid, []))
    out.sort(key=lambda e: (e.get("ph") != "M", e.get("ts", 0)))
    return out


def _phases(call: dict[str, Any], spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The service's spans inside `call` copied onto its track, and the IPC before and after them."""
    start, end = call["ts"], call["ts"] + call["dur"]
    inside = [s for s in spans if s["ts"] >= start and s["ts"] + s["dur"] <= end]
    if not inside:
        return []
    first = min(s["ts"] for s in inside)
    last = max(s["ts"] + s["dur"] for s in inside)

    def child(name: str, ts: float, dur: float) -> dict[str, Any]:
        return {
            "name": name,
            "cat": "phase",
            "ph": "X",
            "ts": ts,
            "dur": max(0.0, dur),
            "pid": call["pid"],
            "tid": call["tid"],
            "args": {},
        }

    phases = [child("ipc", start, first - start)]
    phases += [child(s["name"], s["ts"], s["dur"]) for s in inside]
    phases.append(child("ipc", last, end - last))
    return phases
