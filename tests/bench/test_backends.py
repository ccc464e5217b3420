"""The one backend loop: seeded order, a driver's HalError as its error row, retries summed over sessions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlts.bench.backends import BenchmarkConfig, each_backend, merged_retries, model_backends
from mlts.bench.progress import Progress
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError


def test_each_backend_turns_a_driver_error_into_its_row_and_keeps_going():
    config = BenchmarkConfig(seed=3)
    backends = model_backends(config, "m", {"a": object(), "b": object()})
    assert sorted(b.key for b in backends) == ["a", "b", "ref"]
    assert [b.key for b in backends] == [b.key for b in model_backends(config, "m", {"a": 0, "b": 0})]

    def run(backend):
        if backend.key == "a":
            raise HalError(ErrorStatus.GENERAL_FAILURE, "boom")
        return backend.label

    ran, failed = each_backend(backends, "m", "fam", config, Progress(), run)
    assert ran == {"ref": "cpu:onnxruntime", "b": "driver:b"}
    assert failed["a"].status == "error" and "boom" in failed["a"].error
    assert failed["a"].backend == "driver:a" and failed["a"].family == "fam"


def test_the_references_errors_propagate():
    config = BenchmarkConfig()
    backends = [b for b in model_backends(config, "m", {}) if b.is_reference]

    def run(backend):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "reference broke")

    with pytest.raises(HalError, match="reference broke"):
        each_backend(backends, "m", "fam", config, Progress(), run)


def test_merged_retries_sums_over_sessions():
    def session(retries, errors, classes):
        stats = SimpleNamespace(
            to_dict=lambda: {"retries": retries, "errors": errors, "error_classes": classes}
        )
        return SimpleNamespace(retry_stats=stats)

    merged = merged_retries(
        [
            session(1, {"RESOURCE_EXHAUSTED_TRANSIENT": 1}, {"transient": 1}),
            session(
                2, {"RESOURCE_EXHAUSTED_TRANSIENT": 2, "GENERAL_FAILURE": 1}, {"transient": 2, "other": 1}
            ),
            SimpleNamespace(),  # a session without retry statistics (partitioned)
        ]
    )
    assert merged == {
        "retries": 3,
        "errors": {"RESOURCE_EXHAUSTED_TRANSIENT": 3, "GENERAL_FAILURE": 1},
        "error_classes": {"transient": 3, "other": 1},
    }
