"""The fault-injecting sample driver, through the real process boundary: each fault and how it shows."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from driver.faulty import CallPoint, FaultPlan, SampleFaulty, parse_fault_text, parse_options, spoil
from driver.variants import VARIANTS
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.interface import PreparedModel
from mlts.hal.memory import SharedMemory
from mlts.hal.types import DataLocation, Model, Request, RequestArgument
from mlts.runtime.discovery import DriverSpec, discover, open_device
from mlts.runtime.remote import RemoteDevice

SHAPE = (2, 3)
A = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]], dtype=np.float32)
B = np.array([[0.5, 1.0, -0.75], [-3.0, 2.5, 4.0]], dtype=np.float32)
#: The model computes (a + b) * a; its float64 value, written out by hand from A and B.
EXPECTED = np.array([[3.0, 2.0, -0.125], [0.0, 1.5, -3.0]])
FP32_ATOL, FP32_RTOL = 1e-5, 5 * 2**-23


def small_model() -> Model:
    """out = (a + b) * a on 2x3 float32 tensors."""
    mb = ModelBuilder()
    a = mb.add_input(OperandType.TENSOR_FLOAT32, SHAPE)
    b = mb.add_input(OperandType.TENSOR_FLOAT32, SHAPE)
    none = mb.add_scalar(0, OperandType.INT32)
    total = mb.add_operand(OperandType.TENSOR_FLOAT32, SHAPE)
    mb.add_operation(OperationType.ADD, (a, b, none), (total,))
    out = mb.add_operand(OperandType.TENSOR_FLOAT32, SHAPE)
    mb.add_operation(OperationType.MUL, (total, a, none), (out,))
    mb.mark_outputs(out)
    return mb.build()


def faulty_spec() -> DriverSpec:
    specs = discover()
    assert "sample-faulty" in specs, (
        "sample-faulty is not registered; reinstall the project (pip install -e .)"
    )
    return specs["sample-faulty"]


@contextmanager
def faulty(tmp_path, options: dict[str, str] | None = None, **timeouts: float) -> Iterator[RemoteDevice]:
    """A sample-faulty driver in its own process, logging into `tmp_path`; stopped and reaped afterwards."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    device = open_device(faulty_spec(), options=options, log_path=str(tmp_path / "faulty.log"), **timeouts)
    assert isinstance(device, RemoteDevice)
    try:
        yield device
    finally:
        device.close()
        assert_gone(device.process.pid)


def assert_gone(pid: int) -> None:
    """The process was reaped: it is no child of ours any more and no process has its id."""
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


class Runner:
    """Executes small_model's prepared models on A and B through one shared pool."""

    def __init__(self) -> None:
        self.pool = SharedMemory.create(256)
        np.frombuffer(self.pool.buffer, np.float32, 6, 0)[:] = A.ravel()
        np.frombuffer(self.pool.buffer, np.float32, 6, 64)[:] = B.ravel()
        self.request = Request(
            (
                RequestArgument(False, DataLocation(0, 0, 24), SHAPE),
                RequestArgument(False, DataLocation(0, 64, 24), SHAPE),
            ),
            (RequestArgument(False, DataLocation(0, 128, 24), ()),),
            (self.pool,),
        )

    def run(self, prepared: PreparedModel, **kwargs: Any) -> np.ndarray:
        out = np.frombuffer(self.pool.buffer, np.float32, 6, 128)
        out[:] = np.nan
        result = prepared.executeSynchronously(self.request, **kwargs)
        assert result.output_shapes[0].dimensions == SHAPE and result.output_shapes[0].is_sufficient
        return out.reshape(SHAPE).copy()

    def close(self) -> None:
        self.pool.close()


@pytest.fixture
def runner() -> Iterator[Runner]:
    r = Runner()
    yield r
    r.close()


def passes(actual: np.ndarray) -> bool:
    """The CTS fp32 check against the float64 reference."""
    return bool(np.all(np.abs(actual - EXPECTED) <= FP32_ATOL + FP32_RTOL * np.abs(EXPECTED)))


def vm_rss(pid: int) -> int:
    """The resident set size of process `pid` in bytes, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no VmRSS line")


def timed(fn, *args: Any) -> tuple[Any, float]:
    t0 = time.monotonic()
    value = fn(*args)
    return value, time.monotonic() - t0


# ------------------------------------------------------------------ no faults


def test_without_faults_it_answers_like_sample_all(tmp_path, runner):
    model = small_model()
    with (
        faulty(tmp_path) as dev,
        open_device(discover()["sample-all"], log_path=str(tmp_path / "all.log")) as ref,
    ):
        assert dev.process.hello["device"] == "sample-faulty"
        assert dev.getCapabilities() == ref.getCapabilities()
        assert dev.getVersionString() == ref.getVersionString()
        assert dev.getSupportedOperations(model) == ref.getSupportedOperations(model) == (True, True)
        got = runner.run(dev.prepareModel(model))
        want = runner.run(ref.prepareModel(model))
    np.testing.assert_array_equal(got, want)
    assert passes(got)


# ------------------------------------------------------------------ crashes


def _call(dev: RemoteDevice, method: str, prepared: PreparedModel, runner: Runner) -> None:
    if method == "getSupportedOperations":
        dev.getSupportedOperations(small_model())
    elif method == "prepareModel":
        dev.prepareModel(small_model()).close()
    else:
        assert passes(runner.run(prepared))


@pytest.mark.parametrize(
    "kind, at, how, returncode",
    [
        ("segv", "executeSynchronously:2", "killed by signal 11 (SIGSEGV)", -signal.SIGSEGV),
        ("abort", "executeSynchronously:2", "killed by signal 6 (SIGABRT)", -signal.SIGABRT),
        ("exit", "executeSynchronously:2", "exited with status 3", 3),
        ("segv", "prepareModel:3", "killed by signal 11 (SIGSEGV)", -signal.SIGSEGV),
    ],
)
def test_crash_kills_the_driver_at_the_chosen_call(tmp_path, runner, kind, at, how, returncode):
    method, n = at.split(":")
    with faulty(tmp_path, {"crash": kind, "crash_at": at}) as dev:
        prepared = dev.prepareModel(small_model())  # prepareModel call 1
        if method == "prepareModel":
            n = str(int(n) - 1)
        for _ in range(int(n) - 1):
            _call(dev, method, prepared, runner)
        with pytest.raises(HalError) as info:
            _call(dev, method, prepared, runner)
        assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert info.value.message == f"driver 'sample-faulty' died: {how} during {method}"
        assert dev.process.returncode == returncode
        with pytest.raises(HalError, match="died"):
            dev.ping()  # every later call fails fast with the same error


def test_crash_rate_is_reproducible_for_a_seed(tmp_path):
    rate, seed = 0.25, 2
    draws = random.Random(f"{seed}:crash")
    expected = next(k for k in range(1, 100) if draws.random() < rate)
    assert 1 < expected < 20  # the seed is chosen so the test calls a few times first
    for run in range(2):
        options = {"crash": "exit", "crash_rate": str(rate), "seed": str(seed)}
        with faulty(tmp_path / str(run), options) as dev:
            calls = 0
            with pytest.raises(HalError, match="exited with status 3 during getSupportedOperations"):
                for _ in range(20):
                    calls += 1
                    dev.getSupportedOperations(small_model())
        assert calls == expected


# ------------------------------------------------------------------ hangs and slowness


def test_hang_times_out_and_the_driver_is_killed(tmp_path, runner):
    with faulty(tmp_path, {"hang": "executeSynchronously:1"}, execute_timeout=1.0) as dev:
        prepared = dev.prepareModel(small_model())
        pid = dev.process.pid
        with pytest.raises(HalError) as info:
            runner.run(prepared)
        assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert info.value.message == (
            "driver 'sample-faulty': no reply within 1.0 s to executeSynchronously; driver stopped"
        )
        assert dev.process.returncode == -signal.SIGKILL
        assert_gone(pid)


def test_slow_ms_delays_every_counted_call(tmp_path, runner):
    model = small_model()
    with faulty(tmp_path, {"slow_ms": "200"}) as dev:
        supported, t_query = timed(dev.getSupportedOperations, model)
        prepared, t_prepare = timed(dev.prepareModel, model)
        out, t_execute = timed(runner.run, prepared)
    assert supported == (True, True) and passes(out)
    assert min(t_query, t_prepare, t_execute) >= 0.2


def test_slow_method_delays_only_that_method(tmp_path, runner):
    with faulty(tmp_path, {"slow_ms": "400", "slow_method": "prepareModel"}) as dev:
        prepared, t_prepare = timed(dev.prepareModel, small_model())
        out, t_execute = timed(runner.run, prepared)
    assert passes(out)
    assert t_prepare >= 0.4 > t_execute


def test_compile_contention_slows_executions_only_while_a_compilation_runs(runner):
    device = SampleFaulty(compile_contention_ms="300")
    try:
        prepared = device.prepareModel(small_model())
        out_alone, t_alone = timed(runner.run, prepared)
        with device.compilations.one():  # what prepareModel holds for its whole call
            out_during, t_during = timed(runner.run, prepared)
        out_after, t_after = timed(runner.run, prepared)
    finally:
        device.close()
    assert passes(out_alone) and passes(out_during) and passes(out_after)
    assert t_during >= 0.3 > max(t_alone, t_after)
    assert not device.compilations.running()


# ------------------------------------------------------------------ wrong results, errors, leaks


def _spoiled(expected: np.ndarray) -> np.ndarray:
    """What `wrong` turns a float32 result into: x + 1 + |x|."""
    x = expected.astype(np.float32)
    return x + 1 + np.abs(x)


@pytest.mark.parametrize(
    "wrong, pattern",
    [
        ("executeSynchronously:2", [[False, True, False]]),
        ("prepareModel:2", [[False, False], [True, True]]),
        ("always", [[True, True], [True]]),
    ],
)
def test_wrong_results_are_reported_as_success(tmp_path, runner, wrong, pattern):
    with faulty(tmp_path, {"wrong": wrong}) as dev:
        for per_model in pattern:
            prepared = dev.prepareModel(small_model())
            for is_wrong in per_model:
                out = runner.run(prepared)
                assert passes(out) is not is_wrong
                if is_wrong:
                    np.testing.assert_array_equal(out, _spoiled(EXPECTED))


def test_error_at_raises_that_status_and_the_driver_lives_on(tmp_path, runner):
    with faulty(tmp_path, {"error": "DEVICE_UNAVAILABLE", "error_at": "prepareModel:1"}) as dev:
        with pytest.raises(HalError) as info:
            dev.prepareModel(small_model())
        assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert info.value.message == "injected fault: DEVICE_UNAVAILABLE at prepareModel call 1"
        assert dev.dead is None
        assert passes(runner.run(dev.prepareModel(small_model())))


def test_error_rate_follows_the_seed(tmp_path):
    rate, seed, calls = 0.5, 11, 12
    draws = random.Random(f"{seed}:error")
    expected = [draws.random() < rate for _ in range(calls)]
    assert any(expected) and not all(expected)
    options = {"error": "GENERAL_FAILURE", "error_rate": str(rate), "seed": str(seed)}
    failed = []
    with faulty(tmp_path, options) as dev:
        for _ in range(calls):
            try:
                dev.getSupportedOperations(small_model())
                failed.append(False)
            except HalError as e:
                assert e.status == ErrorStatus.GENERAL_FAILURE
                failed.append(True)
    assert failed == expected


def test_leak_keeps_memory_of_every_execution(tmp_path, runner):
    with faulty(tmp_path, {"leak_mb": "20"}) as dev:
        prepared = dev.prepareModel(small_model())
        before = vm_rss(dev.process.pid)
        for _ in range(3):
            assert passes(runner.run(prepared))
        grown = vm_rss(dev.process.pid) - before
    assert grown >= 3 * 18 * 2**20


# ------------------------------------------------------------------ configuration


def test_mlts_fault_applies_only_without_options(tmp_path, monkeypatch):
    monkeypatch.setenv("MLTS_FAULT", "error=RESOURCE_EXHAUSTED_TRANSIENT, error_at=getSupportedOperations:1")
    with faulty(tmp_path / "env") as dev:
        with pytest.raises(HalError) as info:
            dev.getSupportedOperations(small_model())
        assert info.value.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    with faulty(tmp_path / "opt", {"seed": "1"}) as dev:
        assert dev.getSupportedOperations(small_model()) == (True, True)


@pytest.mark.parametrize(
    "options, env, reason",
    [
        (
            {"foo": "1"},
            None,
            "sample-faulty: option: unknown fault option 'foo'; known: crash, crash_at, crash_rate,",
        ),
        (
            {"crash": "segv", "crash_at": "foo"},
            None,
            "sample-faulty: option: crash_at='foo' must be METHOD:N with METHOD one of",
        ),
        (
            {"crash": "abort", "crash_rate": "2"},
            None,
            "sample-faulty: option: crash_rate='2' must be a probability between 0 and 1",
        ),
        (
            None,
            "crash=exit,error_rate=2",
            "sample-faulty: MLTS_FAULT: error_rate='2' must be a probability between 0 and 1",
        ),
    ],
)
def test_bad_options_fail_the_start_with_one_line(tmp_path, monkeypatch, options, env, reason):
    if env is not None:
        monkeypatch.setenv("MLTS_FAULT", env)
    with pytest.raises(HalError) as info:
        open_device(faulty_spec(), options=options, log_path=str(tmp_path / "faulty.log"))
    message = info.value.message
    assert info.value.status == ErrorStatus.DEVICE_UNAVAILABLE
    assert message.startswith("driver 'sample-faulty' failed to start: exited with status 1 before its hello")
    [line] = [x for x in message.splitlines() if "cannot create driver" in x]
    assert line.split("ValueError: ", 1)[1].startswith(reason)


# ------------------------------------------------------------------ the plan, in process


def test_registered_as_a_variant():
    assert VARIANTS["sample-faulty"] is SampleFaulty


@pytest.mark.parametrize(
    "options, plan",
    [
        ({}, FaultPlan()),
        (
            {"crash": "segv", "crash_at": "executeSynchronously:3"},
            FaultPlan(crash="segv", crash_at=CallPoint("executeSynchronously", 3)),
        ),
        (
            {"crash": "exit", "crash_rate": "0.5", "seed": "-4"},
            FaultPlan(crash="exit", crash_rate=0.5, seed=-4),
        ),
        ({"hang": "prepareModelFromCache:2"}, FaultPlan(hang=CallPoint("prepareModelFromCache", 2))),
        (
            {"slow_ms": "12.5", "slow_method": "getSupportedOperations"},
            FaultPlan(slow_ms=12.5, slow_method="getSupportedOperations"),
        ),
        ({"wrong": "always", "leak_mb": "3"}, FaultPlan(wrong_always=True, leak_mb=3.0)),
        ({"compile_contention_ms": "5"}, FaultPlan(compile_contention_ms=5.0)),
        (
            {"error": "MISSED_DEADLINE_PERSISTENT", "error_at": "prepareModel:1", "error_rate": "1"},
            FaultPlan(
                error=ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                error_at=CallPoint("prepareModel", 1),
                error_rate=1.0,
            ),
        ),
    ],
)
def test_options_parse_into_the_plan(options, plan):
    assert parse_options(options) == plan


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"crash": "boom", "crash_at": "prepareModel:1"}, "crash='boom' must be one of segv, abort, exit"),
        ({"crash": "segv"}, "crash='segv' needs crash_at or crash_rate"),
        ({"crash_at": "prepareModel:1"}, "crash_at needs crash=segv|abort|exit"),
        ({"hang": "executeSynchronously:0"}, "hang='executeSynchronously:0' must be METHOD:N"),
        ({"hang": "ping:1"}, "hang='ping:1' must be METHOD:N"),
        ({"hang": "prepareModel:x"}, "must be METHOD:N"),
        ({"wrong": "getSupportedOperations:1"}, "must be 'always' or METHOD:N"),
        ({"error": "NONE", "error_at": "prepareModel:1"}, "error='NONE' must be one of DEVICE_UNAVAILABLE"),
        ({"error": "GENERAL_FAILURE"}, "needs error_at or error_rate"),
        ({"error_rate": "-0.1", "error": "GENERAL_FAILURE"}, "error_rate='-0.1' must be a probability"),
        ({"slow_ms": "nan"}, "slow_ms='nan' must be milliseconds"),
        ({"slow_method": "prepareModel"}, "slow_method needs slow_ms"),
        ({"leak_mb": "-1"}, "leak_mb='-1' must be MiB"),
        ({"compile_contention_ms": "-1"}, "compile_contention_ms='-1' must be milliseconds"),
        ({"seed": "1.5"}, "seed='1.5' must be an integer"),
    ],
)
def test_bad_options_raise_one_line(options, fragment):
    with pytest.raises(ValueError) as info:
        SampleFaulty(**options)
    assert str(info.value).startswith("sample-faulty: option: ") and fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_fault_text_syntax(monkeypatch):
    assert parse_fault_text(" crash=exit , crash_at=prepareModel:1,") == {
        "crash": "exit",
        "crash_at": "prepareModel:1",
    }
    assert parse_fault_text("") == {}
    for text, fragment in (
        ("crash", "'crash' must look like key=value"),
        ("seed=1,seed=2", "'seed' is given twice"),
    ):
        with pytest.raises(ValueError, match=fragment):
            parse_fault_text(text)
    monkeypatch.setenv("MLTS_FAULT", "wrong=always")
    assert SampleFaulty().faults.plan == FaultPlan(wrong_always=True)
    assert SampleFaulty(seed="2").faults.plan == FaultPlan(seed=2)


def test_spoil_moves_every_value_out_of_tolerance():
    floats = np.array([0.0, 0.5, -1.0, 2.0], np.float32)
    spoil(floats)
    np.testing.assert_array_equal(floats, [1.0, 2.0, 1.0, 5.0])
    quant = np.array([0, 64, 200, 255], np.uint8)
    spoil(quant)
    np.testing.assert_array_equal(quant, [64, 0, 136, 191])
    signed = np.array([-128, -1, 0, 100], np.int8)
    spoil(signed)
    np.testing.assert_array_equal(signed, [-64, -65, 64, 36])
    ints = np.array([0, -5], np.int32)
    spoil(ints)
    np.testing.assert_array_equal(ints, [2**30, -5 ^ 2**30])
    flags = np.array([True, False])
    spoil(flags)
    np.testing.assert_array_equal(flags, [False, True])


def test_faulty_driver_takes_a_capabilities_file_beside_its_faults(tmp_path):
    import json

    from driver.faulty import SampleFaulty
    from mlts.hal.enums import OperandType

    path = tmp_path / "caps.json"
    path.write_text(
        json.dumps(
            {
                "format": "mlts-capabilities",
                "version": 1,
                "driver": "sample-faulty",
                "capabilities": {
                    "operand_performance": {"TENSOR_FLOAT32": {"exec_time": 0.3, "power_usage": 0.4}}
                },
            }
        )
    )
    device = SampleFaulty(capabilities=str(path), slow_ms="1")
    info = device.getCapabilities().performance_of(OperandType.TENSOR_FLOAT32)
    assert (info.exec_time, info.power_usage) == (0.3, 0.4)
    assert device.capabilities_source["kind"] == "calibrated" and device.faults.plan.slow_ms == 1
