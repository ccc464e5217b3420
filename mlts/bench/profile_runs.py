"""The profiled pass of `mlts benchmark --profile`, run after a backend's timed run.

The timed run itself is never profiled, so latency figures are the same with
and without --profile. The profiled pass then runs the same inputs with
profiling on (the driver's per-operation times; onnxruntime's profiler in a
session of its own) for a short while, and the row's `profile.overhead`
compares that pass's median latency with the timed run's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from mlts.bench import profile
from mlts.bench.timing import RunControl
from mlts.hal.enums import UINT64_MAX

#: The profiled pass: at least this many calls and this long (capped by the timed run's own duration).
PROFILE_MIN_ITERATIONS = 5
PROFILE_MAX_SECONDS = 2.0


def profile_control(duration_s: float) -> RunControl:
    """No warm-up (the model is warm; per-operation medians shrug off a cold first call)."""
    return RunControl(0.0, min(PROFILE_MAX_SECONDS, duration_s / 2), PROFILE_MIN_ITERATIONS)


def profile_driver(work, session, duration_s: float, unprofiled_s: Sequence[float]) -> dict:
    """The driver's profile section: `session` (already warm) rerun with per-operation times on."""
    records = []
    on_device: list[int] = []

    def call(i: int) -> None:
        result = session.run(work.feeds[i % len(work.feeds)])[1]
        if result.operation_times is not None:
            records.append(result.operation_times)
        if result.timing.time_on_device != UINT64_MAX:
            on_device.append(result.timing.time_on_device)

    session.profile = True
    try:
        timed = profile_control(duration_s).run(call)
    finally:
        session.profile = False
    model = work.model
    if not records:
        return {
            "available": False,
            "reason": "the driver returns no per-operation times",
            "overhead": profile.overhead(unprofiled_s, timed.samples),
        }
    types = [op.type for op in model.main.operations]
    entries = profile.driver_entries(records, types, getattr(work.conv, "origins", ()))
    return {
        "available": True,
        "source": "driver",
        **profile.summarize(entries, len(records)),
        # The driver's own Timing over the same executions: what the operations' total leaves out.
        "time_on_device_us": statistics.median(on_device) if on_device else None,
        "overhead": profile.overhead(unprofiled_s, timed.samples),
    }


def profile_reference(work, threads: int, duration_s: float, unprofiled_s: Sequence[float]) -> dict:
    """onnxruntime's profile section: a profiling session of its own over the same inputs."""
    import onnx

    from mlts.bench.ort_profile import profile_onnxruntime

    control = profile_control(duration_s)

    def runs(fn: Callable[[int], object]) -> Sequence[float]:
        return control.run(fn).samples

    model_bytes = work.reference.model_bytes
    prof = profile_onnxruntime(model_bytes, threads, work.reference_feeds, runs)
    graph = onnx.load_from_string(model_bytes).graph
    entries = profile.reference_entries(prof, graph, getattr(work.conv, "origins", ()))
    return {
        "available": True,
        "source": "onnxruntime profiler",
        **profile.summarize(entries, prof.runs),
        "overhead": profile.overhead(unprofiled_s, prof.samples_s),
    }
