"""onnxruntime's own per-node profile: a profiling session run a few times, its JSON trace parsed.

The trace (SessionOptions.enable_profiling) is written into a private
temporary directory that is removed afterwards, whatever happens. Each
`Node` event whose name ends in `_kernel_time` is one kernel call of one
node (`args.op_name` is its op type); the `model_run` events delimit the runs,
so each node's time is its median over the runs, robust to a cold first run.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

KERNEL_SUFFIX = "_kernel_time"


@dataclass(frozen=True, slots=True)
class NodeTime:
    """One node of onnxruntime's (optimised) graph: its name, op type and median µs per run."""

    name: str
    op_type: str
    us: float


@dataclass(frozen=True, slots=True)
class OrtProfile:
    nodes: tuple[NodeTime, ...]
    runs: int
    samples_s: tuple[float, ...]  # wall clock per profiled run


def parse_trace(events: Any) -> tuple[list[NodeTime], int]:
    """Per-node median µs over the runs of an onnxruntime trace (a list of events), and the run count.

    ValueError when the trace is not what onnxruntime writes (not a list of events, no run in it).
    """
    if not isinstance(events, list):
        raise ValueError("an onnxruntime profile is a JSON list of events")
    runs = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if isinstance(e, dict) and e.get("cat") == "Session" and e.get("name") == "model_run" and "ts" in e
    )
    if not runs:
        raise ValueError("the onnxruntime profile holds no model_run event")
    per_run: list[dict[str, float]] = [{} for _ in runs]
    op_types: dict[str, str] = {}
    starts = [r[0] for r in runs]
    for e in events:
        if not isinstance(e, dict) or e.get("cat") != "Node":
            continue
        name = e.get("name")
        if not isinstance(name, str) or not name.endswith(KERNEL_SUFFIX):
            continue
        ts, dur = float(e.get("ts", -1)), float(e.get("dur", 0))
        k = _run_of(starts, runs, ts)
        if k is None:
            continue
        node = name[: -len(KERNEL_SUFFIX)]
        per_run[k][node] = per_run[k].get(node, 0.0) + dur
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        op_types.setdefault(node, str(args.get("op_name", "?")))
    order = list(op_types)
    nodes = [NodeTime(n, op_types[n], statistics.median(run.get(n, 0.0) for run in per_run)) for n in order]
    return nodes, len(runs)


def _run_of(starts: list[float], runs: list[tuple[float, float]], ts: float) -> int | None:
    """The index of the run whose [start, end] holds `ts`, or None."""
    k = bisect.bisect_right(starts, ts) - 1
    if k >= 0 and runs[k][0] <= ts <= runs[k][1]:
        return k
    return None


def profile_onnxruntime(
    model_bytes: bytes,
    threads: int,
    feeds: Sequence[Sequence[np.ndarray]],
    runs: Callable[[Callable[[int], object]], Sequence[float]],
) -> OrtProfile:
    """Profile `model_bytes` on onnxruntime's CPU provider (same settings as the reference).

    `runs(fn)` calls fn(i) as often as the caller's run control says and returns each call's seconds.
    No file is left behind: the trace lives in a temporary directory removed at the end.
    """
    import onnxruntime as ort

    tmp = tempfile.mkdtemp(prefix="mlts-ort-profile-")
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def call(i: int) -> object:
            return session.run(None, dict(zip(names, feeds[i % len(feeds)], strict=True)))

        samples = tuple(runs(call))
        path = session.end_profiling()
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
        nodes, count = parse_trace(events)
        return OrtProfile(tuple(nodes), count, samples)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
