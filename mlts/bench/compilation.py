"""MLTS's compilation benchmark: compile without cache, save to cache (miss), prepare from cache (hit).

Each measurement repeats its call up to `max_iterations` times and for at most
`max_seconds` from its first call's start: another call is made only when the
fastest call so far, after the untimed gap the last call needed, would still end
within them (always at least one call). With a `precision` rule
(mlts.bench.stopping, --quick) it also stops as soon as the median's 95%
interval is within the rule's margin (each timing's `stopped`: "precise" or
"bound"). Only the driver call is timed: opening or truncating
the cache files and releasing the prepared model (after every iteration) are
not. `prepare_from_cache` reads the files the last `save_to_cache` iteration
wrote; `cache_size_bytes` is their total size.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlts.bench.stats import describe
from mlts.bench.stopping import BOUND, PRECISE, PrecisionRule, PrecisionWatch
from mlts.hal.errors import HalError
from mlts.hal.interface import Device, PreparedModel
from mlts.hal.types import Model
from mlts.runtime.compile_cache import CacheFiles, cache_token, close_files, open_files

NO_CACHING_NOTE = "the driver does not support compilation caching (getNumberOfCacheFilesNeeded is 0, 0)"

Prepare = Callable[[list[int]], PreparedModel]


@dataclass(frozen=True, slots=True)
class _Limits:
    max_iterations: int
    max_seconds: float
    clock: Callable[[], float]
    on_step: Callable[[], None] = lambda: None
    precision: PrecisionRule | None = None


def _repeat(limits: _Limits, paths: Sequence[Path], fresh: bool, prepare: Prepare) -> tuple[list[float], str]:
    """Seconds per call of `prepare(fds)` and what stopped the calls; the files at `paths` are opened
    (untimed) for each call."""
    samples: list[float] = []
    start: float | None = None
    last_end: float | None = None
    watch = PrecisionWatch(limits.precision) if limits.precision is not None else None
    while len(samples) < limits.max_iterations:
        fds = open_files(tuple(paths), fresh=fresh)
        try:
            t0 = limits.clock()
            prepared = prepare(fds)
            t1 = limits.clock()
        finally:
            close_files(fds)
        prepared.close()
        samples.append(t1 - t0)
        limits.on_step()
        start = t0 if start is None else start
        gap = 0.0 if last_end is None else t0 - last_end  # opening the files, closing the last model
        last_end = t1
        if t1 - start + gap + min(samples) > limits.max_seconds:
            break
        if watch is not None and watch.stop(samples, t1 - start):
            return samples, PRECISE
    return samples, BOUND


def _stats(measured: tuple[list[float], str]) -> dict[str, Any]:
    """`describe` (milliseconds, no p99 warning) plus the samples in milliseconds and what stopped them."""
    samples_s, stopped = measured
    out = describe(samples_s, p99_wanted=False)
    out["samples"] = [s * 1000.0 for s in samples_s]
    out["stopped"] = stopped
    return out


def measure_compilation(
    device: Device,
    model: Model,
    cache_dir: str | os.PathLike[str],
    *,
    max_iterations: int = 100,
    max_seconds: float = 10.0,
    clock: Callable[[], float] = time.perf_counter,
    on_step: Callable[[int, int | None], None] | None = None,
    precision: PrecisionRule | None = None,
) -> dict[str, Any]:
    """The three timings (statistics in ms, or None with the reason in "note"), cache size and file counts.

    `on_step(done, None)` is called after each compilation (a long measurement's progress).

    Cache files are created in `cache_dir` (made if missing), which the caller owns. A failing
    compile without cache raises HalError: there is nothing to measure.
    """
    if max_iterations < 1 or not max_seconds > 0:
        raise ValueError(
            f"max_iterations ({max_iterations}) must be >= 1 and max_seconds ({max_seconds}) > 0"
        )
    calls = [0]

    def step() -> None:
        calls[0] += 1
        if on_step is not None:
            on_step(calls[0], None)

    limits = _Limits(max_iterations, max_seconds, clock, step, precision)
    needed = device.getNumberOfCacheFilesNeeded()
    result: dict[str, Any] = {
        "without_cache": _stats(_repeat(limits, (), False, lambda fds: device.prepareModel(model))),
        "save_to_cache": None,
        "prepare_from_cache": None,
        "cache_size_bytes": None,
        "cache_files": {"model": int(needed.num_model_cache), "data": int(needed.num_data_cache)},
        "note": None,
        "stop_rule": None if precision is None else precision.to_json(),
    }
    if needed.num_model_cache == 0 and needed.num_data_cache == 0:
        result["note"] = NO_CACHING_NOTE
        return result
    token = cache_token(model, device.name, device.getVersionString())
    base = Path(cache_dir)
    base.mkdir(parents=True, exist_ok=True)
    files = CacheFiles(
        tuple(base / f"model{i}" for i in range(needed.num_model_cache)),
        tuple(base / f"data{i}" for i in range(needed.num_data_cache)),
    )
    n = len(files.model)

    def save(fds: list[int]) -> PreparedModel:
        return device.prepareModel(model, model_cache=fds[:n], data_cache=fds[n:], token=token)

    def load(fds: list[int]) -> PreparedModel:
        return device.prepareModelFromCache(fds[:n], fds[n:], token)

    try:
        result["save_to_cache"] = _stats(_repeat(limits, files.paths, True, save))
    except HalError as e:
        result["note"] = f"save to cache failed: {e}; prepare from cache not measured"
        return result
    result["cache_size_bytes"] = files.size_bytes()
    if not files.usable():
        result["note"] = "the driver left its cache files empty; prepare from cache not measured"
        return result
    try:
        result["prepare_from_cache"] = _stats(_repeat(limits, files.paths, False, load))
    except HalError as e:
        result["note"] = f"prepare from cache failed: {e}"
    return result
