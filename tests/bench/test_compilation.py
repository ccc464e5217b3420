"""MLTS's three compilation timings: iteration and time caps on a fake clock, notes, and a real driver's cache in use."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from driver.variants import SampleAll
from mlts.bench.compilation import NO_CACHING_NOTE, measure_compilation
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.interface import Device, PreparedModel
from mlts.hal.types import CacheFilesNeeded, Capabilities, Model, PerformanceInfo
from mlts.report.schema import validate_results
from tests.driver import cachekit
from tests.report._sample import _compilation, sample_doc
from tests.runtime.models import add_model

CACHE_BYTES = b"cache!"


class _Prepared(PreparedModel):
    def __init__(self, calls: Counter) -> None:
        self.calls = calls

    def executeSynchronously(self, request, measure=None, deadline=None, loop_timeout_duration=None):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "not used")

    def close(self) -> None:
        self.calls["close"] += 1


class FakeCaching(Device):
    """Writes CACHE_BYTES to every cache file it gets; `broken` makes one phase fail."""

    name = "fake-caching"

    def __init__(self, needed: tuple[int, int] = (1, 1), broken: str | None = None) -> None:
        self.needed = CacheFilesNeeded(*needed)
        self.broken = broken
        self.calls: Counter = Counter()

    def getCapabilities(self) -> Capabilities:
        return Capabilities.uniform(PerformanceInfo(1.0, 1.0))

    def getSupportedOperations(self, model: Model) -> tuple[bool, ...]:
        return (True,) * len(model.main.operations)

    def getNumberOfCacheFilesNeeded(self) -> CacheFilesNeeded:
        return self.needed

    def prepareModel(
        self, model, preference=1, priority=1, deadline=None, model_cache=(), data_cache=(), token=b""
    ):
        kind = "save" if model_cache or data_cache else "compile"
        self.calls[kind] += 1
        assert len(model_cache) == self.needed.num_model_cache or kind == "compile"
        if kind == "save":
            if self.broken == "save":
                raise HalError(ErrorStatus.INVALID_ARGUMENT, "cache files refused")
            assert len(token) == 32
            for fd in (*model_cache, *data_cache):
                assert os.fstat(fd).st_size == 0  # fresh, truncated files every iteration
                os.pwrite(fd, CACHE_BYTES, 0)
        return _Prepared(self.calls)

    def prepareModelFromCache(
        self, model_cache: Sequence[int], data_cache: Sequence[int], token, deadline=None
    ):
        self.calls["load"] += 1
        if self.broken == "load":
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the cache is stale")
        assert all(os.pread(fd, 64, 0) == CACHE_BYTES for fd in (*model_cache, *data_cache))
        return _Prepared(self.calls)


def _clock(step: float = 1.0):
    """A fake clock: every reading is `step` seconds after the previous one."""
    ticks = itertools.count(0.0, step)
    return lambda: next(ticks)


TIMINGS = ("without_cache", "save_to_cache", "prepare_from_cache")


def test_time_cap_stops_each_measurement(tmp_path) -> None:
    device = FakeCaching()
    result = measure_compilation(
        device, add_model(), tmp_path, max_iterations=100, max_seconds=5.0, clock=_clock()
    )
    # Iteration k starts at 2k and ends at 2k+1 s after the first start: 1, 3, 5 -> the third reaches 5 s.
    for key in TIMINGS:
        assert result[key]["n"] == 3 and result[key]["samples"] == [1000.0] * 3
        assert result[key]["median"] == 1000.0
    assert device.calls == Counter(compile=3, save=3, load=3, close=9)
    assert result["cache_size_bytes"] == 2 * len(CACHE_BYTES)
    assert result["cache_files"] == {"model": 1, "data": 1} and result["note"] is None


def test_iteration_cap_and_at_least_one_iteration(tmp_path) -> None:
    device = FakeCaching(needed=(2, 3))
    result = measure_compilation(
        device, add_model(), tmp_path, max_iterations=4, max_seconds=1e9, clock=_clock()
    )
    assert [result[k]["n"] for k in TIMINGS] == [4, 4, 4]
    assert result["cache_size_bytes"] == 5 * len(CACHE_BYTES)
    assert result["cache_files"] == {"model": 2, "data": 3}
    once = measure_compilation(FakeCaching(), add_model(), tmp_path, max_seconds=1e-9, clock=_clock(0.5))
    assert [once[k]["samples"] for k in TIMINGS] == [[500.0]] * 3


def test_each_compilation_is_reported_as_a_step(tmp_path) -> None:
    steps: list[tuple[int, int | None]] = []
    measure_compilation(
        FakeCaching(),
        add_model(),
        tmp_path,
        max_iterations=2,
        max_seconds=1e9,
        clock=_clock(),
        on_step=lambda d, t: steps.append((d, t)),
    )
    # 2 compilations in each of the three timings, counted across them (the total is open-ended).
    assert steps == [(k, None) for k in range(1, 7)]


def test_limits_must_allow_one_iteration(tmp_path) -> None:
    for kwargs in ({"max_iterations": 0}, {"max_seconds": 0.0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            measure_compilation(FakeCaching(), add_model(), tmp_path, **kwargs)


def test_driver_without_caching(tmp_path) -> None:
    device = FakeCaching(needed=(0, 0))
    result = measure_compilation(device, add_model(), tmp_path, max_iterations=2, clock=_clock())
    assert result["without_cache"]["n"] == 2
    assert result["save_to_cache"] is None and result["prepare_from_cache"] is None
    assert result["cache_size_bytes"] is None and result["cache_files"] == {"model": 0, "data": 0}
    assert result["note"] == NO_CACHING_NOTE
    assert (
        NO_CACHING_NOTE
        == "the driver does not support compilation caching (getNumberOfCacheFilesNeeded is 0, 0)"
    )


def test_failing_phases_are_notes(tmp_path) -> None:
    load = measure_compilation(FakeCaching(broken="load"), add_model(), tmp_path / "a", max_iterations=2)
    assert load["save_to_cache"]["n"] == 2 and load["prepare_from_cache"] is None
    assert load["note"] == "prepare from cache failed: GENERAL_FAILURE: the cache is stale"
    assert load["cache_size_bytes"] == 2 * len(CACHE_BYTES)
    save = measure_compilation(FakeCaching(broken="save"), add_model(), tmp_path / "b", max_iterations=2)
    assert save["save_to_cache"] is None and save["prepare_from_cache"] is None
    assert save["note"].startswith("save to cache failed: INVALID_ARGUMENT: cache files refused")


def test_result_has_the_shape_of_the_results_document(tmp_path) -> None:
    result = measure_compilation(FakeCaching(), add_model(), tmp_path, max_iterations=3, clock=_clock())
    sample = _compilation(0)
    assert result.keys() == sample.keys()
    for key in TIMINGS:
        assert result[key].keys() == sample[key].keys()
    doc = sample_doc()
    row = next(r for r in doc["results"] if r.get("compilation"))
    row["compilation"] = result
    validate_results(doc)


def test_sample_driver_really_prepares_from_its_cache(tmp_path, monkeypatch) -> None:
    """Packing happens on every compile and never on a prepare from cache."""
    counting = cachekit.PackCounter(monkeypatch)
    model = cachekit.model("float")
    result = measure_compilation(SampleAll(), model, tmp_path, max_iterations=3, max_seconds=60.0)
    per_compile = len(SampleAll().prepareModel(model).plan.packed_names)
    assert per_compile == 2  # the CONV_2D filter and the FULLY_CONNECTED weights
    assert (
        counting.computed == (3 + 3 + 1) * per_compile
    )  # without, save, and the line above: none from cache
    assert result["prepare_from_cache"]["n"] == 3 and result["note"] is None
    sizes = sum(os.path.getsize(tmp_path / name) for name in os.listdir(tmp_path))
    assert result["cache_size_bytes"] == sizes > 0
    assert all(np.isfinite(result[k]["median"]) for k in TIMINGS)


def test_precision_rule_ends_each_timing_early_only_once_precise(tmp_path) -> None:
    from mlts.bench.stopping import PrecisionRule

    # Every compilation takes exactly 1 s on the fake clock: precise at the first checkpoint (10 calls).
    rule = PrecisionRule(0.05, 10)
    device = FakeCaching()
    result = measure_compilation(
        device, add_model(), tmp_path, max_iterations=100, max_seconds=1e9, clock=_clock(), precision=rule
    )
    for key in TIMINGS:
        assert result[key]["n"] == 10 and result[key]["stopped"] == "precise"
    assert result["stop_rule"]["ci95_within_percent"] == 5.0
    # Without the rule each timing runs to its bound and says so.
    result = measure_compilation(
        FakeCaching(), add_model(), tmp_path, max_iterations=12, max_seconds=1e9, clock=_clock()
    )
    assert all(result[k]["n"] == 12 and result[k]["stopped"] == "bound" for k in TIMINGS)
    assert result["stop_rule"] is None


def test_precision_rule_runs_a_noisy_timing_to_its_bound(tmp_path) -> None:
    from mlts.bench.stopping import PrecisionRule

    # Two readings per compilation (before, after), 1 s after the last: compilations alternately
    # 1 s and 3 s long, a median whose interval stays far wider than +-5%.
    gaps = itertools.cycle([1.0, 1.0, 1.0, 3.0])
    now = [0.0]

    def clock() -> float:
        now[0] += next(gaps)
        return now[0]

    result = measure_compilation(
        FakeCaching(),
        add_model(),
        tmp_path,
        max_iterations=40,
        max_seconds=1e9,
        clock=clock,
        precision=PrecisionRule(0.05, 10),
    )
    assert all(result[k]["n"] == 40 and result[k]["stopped"] == "bound" for k in TIMINGS)
    assert sorted(set(result["without_cache"]["samples"])) == [1000.0, 3000.0]


def test_time_cap_is_an_upper_bound_no_call_is_started_that_would_end_past_it(tmp_path) -> None:
    # Calls of 1 s, 1 s apart (readings every 1 s): they end 1, 3, 5 s after the first start. With
    # 4.5 s the third would end past the bound, so two are made, not three.
    result = measure_compilation(
        FakeCaching(), add_model(), tmp_path, max_iterations=100, max_seconds=4.5, clock=_clock()
    )
    assert [result[k]["n"] for k in TIMINGS] == [2, 2, 2]
