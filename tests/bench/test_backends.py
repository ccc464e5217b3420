"""The one backend loop: seeded order, a driver's HalError as its error row, retries summed over sessions."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from mlts.bench.backends import (
    REFERENCE_KEY,
    BackendKey,
    BenchmarkConfig,
    driver_backends,
    each_backend,
    merged_retries,
    model_backends,
)
from mlts.bench.progress import Progress
from mlts.hal.enums import ErrorStatus, Priority
from mlts.hal.errors import HalError
from mlts.runtime.execution import EXECUTION_MODES, ExecutionMode
from mlts.runtime.qos_settings import QosSettings

A, B = BackendKey("a"), BackendKey("b")


def test_each_backend_turns_a_driver_error_into_its_row_and_keeps_going():
    config = BenchmarkConfig(seed=3)
    backends = model_backends(config, "m", {"a": object(), "b": object()})
    assert sorted(b.key.name for b in backends) == ["a", "b", "ref"]
    assert [b.key for b in backends] == [b.key for b in model_backends(config, "m", {"a": 0, "b": 0})]

    def run(backend):
        if backend.key == A:
            raise HalError(ErrorStatus.GENERAL_FAILURE, "boom")
        return backend.label

    ran, failed = each_backend(backends, "m", "fam", config, Progress(), run)
    assert ran == {REFERENCE_KEY: "cpu:onnxruntime", B: "driver:b"}
    assert failed[A].status == "error" and "boom" in failed[A].error
    assert failed[A].backend == "driver:a" and failed[A].family == "fam"
    assert failed[A].execution == "sync"


def test_a_failed_backend_row_names_its_execution_path():
    config = BenchmarkConfig(executions=(ExecutionMode.BURST,))
    backends = [b for b in model_backends(config, "m", {"a": object()}) if not b.is_reference]

    def run(backend):
        raise HalError(ErrorStatus.GENERAL_FAILURE, "boom")

    _, failed = each_backend(backends, "m", "fam", config, Progress(), run)
    row = failed[BackendKey("a", ExecutionMode.BURST)]
    assert (row.backend, row.execution) == ("driver:a/burst", "burst")


def test_backend_keys_and_their_labels():
    config = BenchmarkConfig(executions=EXECUTION_MODES, nnapi_reference="include")
    keys = driver_backends(config, {"sample-all": object()})
    assert [k.label for k in keys] == [
        "driver:sample-all",
        "driver:sample-all/async",
        "driver:sample-all/fenced",
        "driver:sample-all/burst",
        "nnapi-reference",
        "nnapi-reference/async",
        "nnapi-reference/fenced",
        "nnapi-reference/burst",
    ]
    assert [k.mode for k in keys[:4]] == list(EXECUTION_MODES)
    assert keys[4].partitioned and not keys[0].partitioned and REFERENCE_KEY.is_reference
    # A driver name holding a slash or a path's name is a name, not a path.
    odd = BackendKey("vendor/burst")
    assert (odd.label, odd.mode) == ("driver:vendor/burst", ExecutionMode.SYNC)
    # The state-in-driver rows keep the execution path last.
    assert BackendKey("sample-all").with_state_in_driver().label == "driver:sample-all+state-in-driver"
    burst = BackendKey("sample-all", ExecutionMode.ASYNC).with_state_in_driver()
    assert burst.label == "driver:sample-all+state-in-driver/async"


def test_the_config_json_round_trips_with_the_qos_by_name():
    config = BenchmarkConfig(
        executions=(ExecutionMode.SYNC, ExecutionMode.BURST),
        qos=QosSettings(Priority.HIGH, deadline_ms=5.0),
        plugin_files=("p.py",),
    )
    doc = config.to_json()
    assert doc["executions"] == ["sync", "burst"]
    assert doc["qos"] == {
        "priority": "high",
        "preference": "fast-single-answer",
        "deadline_ms": 5.0,
        "prepare_deadline_ms": None,
        "loop_timeout_ms": None,
    }
    assert BenchmarkConfig.from_json(json.loads(json.dumps(doc))) == config
    # A configuration written without a QoS section (or an older one) reads back with the defaults.
    assert BenchmarkConfig.from_json({**doc, "qos": {}}).qos == QosSettings()


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
