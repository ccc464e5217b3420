"""MLTS's stress modes: which tests each runs, how they are supervised, and the results document.

Every test runs in a child process under `supervise.run_isolated`, except
parallel-inference-stress-in-process, which runs in this process (as MLTS's
does) under a watchdog. A test per model for inference-stress and
model-loading-stress; one per driver for the others; P per driver for the
multi-process modes, of which `kill_rate`% are killed at random times
(expected CRASH). client-early-termination-stress kills a compiling child at a
random time (expected CRASH) while a liveness checker in this process runs
inference on its own connection to the same driver; any error it sees makes
the test a FAILURE.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mlts.crash.channel import Reporter
from mlts.crash.outcome import Outcome, StressFailure, TestResult
from mlts.crash.supervise import TestSpec, run_isolated
from mlts.errors import InputError
from mlts.hal.errors import HalError
from mlts.runtime.execution import EXECUTION_MODES, ExecutionMode
from mlts.runtime.qos_settings import DEFAULT_QOS, QosSettings

MODES = (
    "inference-stress",
    "model-loading-stress",
    "parallel-inference-stress",
    "parallel-inference-stress-in-process",
    "client-early-termination-stress",
    "multi-process-inference-stress",
    "multi-process-model-load-stress",
    "memory-mapped-model-load-stress",
    "model-load-random-stress",
    "inference-random-stress",
    "performance-degradation-stress",
    "priority-stress",
    "priority-stress-two-clients",
)


#: What `all` runs: every mode but the priority-stress ones, which measure latency (a benchmark's job:
#: run them by name, on a quiet machine).
ALL_MODES = tuple(m for m in MODES if not m.startswith("priority-stress"))


class StressConfigError(InputError):
    """Options that cannot make a stress run (one line)."""


@dataclass(frozen=True)
class StressConfig:
    duration_s: float = 3.0
    threads: int = 2
    processes: int = 2
    kill_rate: float = 0.0
    seed: int = 0
    grace_s: float = 10.0
    setup_timeout_s: float = 180.0
    random_ops: int = 10
    degradation_limit: float = 50.0  # percent; MLTS's limit
    random_count: int | None = None
    dump_dir: str | None = None
    plugin_files: tuple[str, ...] = ()
    driver_options: dict[str, str] = field(default_factory=dict)
    in_process: bool = False
    # Driver name -> socket of a shared service to use instead of starting the driver.
    driver_sockets: dict[str, str] = field(default_factory=dict)
    # The execution path of the inference modes.
    execution: ExecutionMode = ExecutionMode.SYNC
    # Priority, preference, deadlines and loop timeout of every session.
    qos: QosSettings = DEFAULT_QOS
    # The user's model files by path, each with what converting it takes (user_model_spec): JSON-ready.
    user_models: dict[str, dict] = field(default_factory=dict)

    def check(self) -> None:
        if not self.duration_s > 0 or self.duration_s == float("inf"):
            raise StressConfigError(
                f"--duration must be a finite number of seconds > 0, got {self.duration_s}"
            )
        if self.threads < 1 or self.processes < 1:
            raise StressConfigError("--threads and --processes must be >= 1")
        if not 0 <= self.kill_rate <= 100:
            raise StressConfigError(f"--kill-rate must be between 0 and 100, got {self.kill_rate}")
        if self.random_ops < 1:
            raise StressConfigError(f"--random-ops must be >= 1, got {self.random_ops}")
        if self.execution not in EXECUTION_MODES:
            raise StressConfigError(
                f"--execution {self.execution!r} is not one of {', '.join(EXECUTION_MODES)}"
            )

    def to_json(self) -> dict[str, Any]:
        """The configuration as results files record it (QoS names, the execution path by name)."""
        return {**asdict(self), "execution": str(self.execution), "qos": self.qos.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StressConfig:
        """A configuration from its JSON form (`to_json`); ValueError naming a bad QoS or path."""
        return cls(
            **{
                **data,
                "plugin_files": tuple(data.get("plugin_files") or ()),
                "execution": ExecutionMode(data.get("execution", "sync")),
                "qos": QosSettings.from_json(data.get("qos")),
            }
        )


Progress = Callable[[str], None]


def user_model_spec(user) -> dict:
    """What a test process needs to convert a user's model file (mlts.bench.user_model.UserModel) as the
    user said: its kind, the input shapes and the fixed input values, as plain data."""
    return {
        "kind": user.kind,
        "input_shapes": {n: list(d) for n, d in user.convert_shapes().items()},
        "input_values": {
            n: {"dtype": v.dtype.str, "shape": list(v.shape), "data": v.ravel().tolist()}
            for n, v in user.values.items()
        },
    }


def _spec(mode: str, child_mode: str, driver: str, models: list[str], config: StressConfig, **kw) -> TestSpec:
    params = {"qos": config.qos.to_json(), **kw.pop("params", {})}
    if config.user_models:
        params["user_models"] = config.user_models
    if config.execution != ExecutionMode.SYNC:
        params = {**params, "execution": str(config.execution)}
    return TestSpec(
        test=kw.pop("test", f"{mode}/{driver}"),
        mode=child_mode,
        driver=driver,
        models=models,
        duration_s=config.duration_s,
        threads=kw.pop("threads", config.threads),
        seed=kw.pop("seed", config.seed),
        params=params,
        plugin_files=list(config.plugin_files),
        driver_options=dict(config.driver_options),
        in_process=config.in_process,
        driver_socket=None if config.in_process else config.driver_sockets.get(driver),
        expected=kw.pop("expected", Outcome.SUCCESS),
    )


def _isolated(spec: TestSpec, config: StressConfig, mode: str, **kw) -> TestResult:
    result = run_isolated(spec, grace_s=config.grace_s, setup_timeout_s=config.setup_timeout_s, **kw)
    result.mode = mode
    return result


def run_mode(
    mode: str, drivers: list[str], models: list[str], config: StressConfig, progress: Progress
) -> list[TestResult]:
    """Every test of `mode` on every driver; results in a stable order."""
    if mode not in MODES:
        raise StressConfigError(f"unknown stress mode {mode!r}; modes: {', '.join(MODES)}, all")
    out: list[TestResult] = []
    for driver in drivers:
        progress(f"{mode} on {driver}")
        out += _RUNNERS[mode](mode, driver, models, config, progress)
    return out


def _per_model(child_mode: str, threads: int | None = 1):
    def run(mode, driver, models, config, progress):
        results = []
        for m in models:
            spec = _spec(mode, child_mode, driver, [m], config, test=f"{mode}/{driver}/{m}", threads=threads)
            progress(f"  {spec.test}")
            results.append(_isolated(spec, config, mode))
        return results

    return run


def _one(child_mode: str, **params_from_config: str):
    def run(mode, driver, models, config, progress):
        params = {k: getattr(config, attr) for k, attr in params_from_config.items()}
        spec = _spec(mode, child_mode, driver, models, config, params=params)
        return [_isolated(spec, config, mode)]

    return run


def _in_process(mode, driver, models, config, progress) -> list[TestResult]:
    """The parallel inference test in this process, stopped by a watchdog after duration + grace."""
    from mlts.crash.channel import Reporter
    from mlts.crash.child import run_test

    spec = _spec(mode, "inference", driver, models, config)
    events: list[dict[str, Any]] = []

    class _Collect(Reporter):
        def __init__(self) -> None:
            super().__init__(-1)

        def send(self, event: str, **fields: Any) -> None:
            events.append({"event": event, **fields})

    start = time.monotonic()
    worker = threading.Thread(
        target=run_test, args=(vars(spec) | {"expected": None}, _Collect()), daemon=True
    )
    worker.start()
    worker.join(config.setup_timeout_s + config.duration_s + config.grace_s)
    result = TestResult(spec.test, mode, driver, list(models), Outcome.SUCCESS)
    result.duration_s = time.monotonic() - start
    final = next((e for e in events if e["event"] == "result"), None)
    if worker.is_alive() or final is None:
        result.outcome = Outcome.HANG
        result.reason = "no result within the time limit (in process: the test threads are abandoned)"
        return [result]
    result.outcome = Outcome(final["outcome"])
    result.reason = final.get("reason")
    result.driver_died = bool(final.get("driver_died"))
    result.iterations = int(final.get("iterations") or 0)
    result.details = final.get("details") or {}
    return [result]


def _liveness(
    driver: str, model_name: str, config: StressConfig, stop: threading.Event
) -> tuple[int, str | None]:
    """Inference on its own connection to `driver` until `stop`; (calls, first error or None)."""
    from mlts.crash.context import StressContext
    from mlts.crash.modes import disagreement
    from mlts.crash.random_check import reference_outputs
    from mlts.runtime.session import Session

    ctx = StressContext(
        {
            "driver": driver,
            "duration_s": 1,
            "plugin_files": list(config.plugin_files),
            "driver_options": config.driver_options,
            "driver_socket": config.driver_sockets.get(driver),
        },
        _NullReporter(),
    )
    calls = 0
    try:
        device = ctx.open_device()
        model = ctx.model(model_name)
        inputs = ctx.inputs(model)
        expected = reference_outputs(model, inputs)
        with Session(device, model) as session:
            while not stop.is_set():
                outputs, _ = session.run(inputs)
                wrong = disagreement(outputs, expected)
                if wrong is not None:
                    return calls, f"wrong result: {wrong}"
                calls += 1
    except (HalError, StressFailure, OSError) as e:
        return calls, str(e)
    finally:
        ctx.close()
    return calls, None


class _NullReporter(Reporter):
    """A reporter for tests run in this process: the events go nowhere."""

    def __init__(self) -> None:
        super().__init__(-1)

    def send(self, event: str, **fields: Any) -> None:
        pass


def _early_termination(mode, driver, models, config, progress) -> list[TestResult]:
    rng = random.Random(f"{config.seed}:{driver}")
    kill_after = rng.uniform(0.2, 0.8) * config.duration_s
    spec = _spec(mode, "compile-until-killed", driver, models, config, threads=4, expected=Outcome.CRASH)
    spec.duration_s = config.duration_s * 10  # it must not finish before it is killed
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        live = pool.submit(_liveness, driver, models[0], config, stop)
        try:
            result = _isolated(spec, config, mode, kill_after_s=kill_after)
        finally:
            stop.set()
        calls, error = live.result()
    result.details["liveness_calls"] = calls
    result.details["killed_after_s"] = round(kill_after, 3)
    if error is not None:
        result.outcome = Outcome.FAILURE
        result.reason = f"liveness check failed while the client was killed: {error}"
    elif calls == 0:
        result.outcome = Outcome.FAILURE
        result.reason = "the liveness check made no inference call"
    return [result]


def _multi_process(child_mode: str):
    def run(mode, driver, models, config, progress):
        rng = random.Random(f"{config.seed}:{mode}:{driver}")
        doomed = set(rng.sample(range(config.processes), round(config.processes * config.kill_rate / 100)))
        specs = []
        for p in range(config.processes):
            killed = p in doomed
            spec = _spec(
                mode,
                child_mode,
                driver,
                models,
                config,
                test=f"{mode}/{driver}/process-{p}",
                seed=config.seed + p,
                expected=Outcome.CRASH if killed else Outcome.SUCCESS,
            )
            if killed:
                spec.duration_s = config.duration_s * 10
            kill = rng.uniform(0.1, 0.9) * config.duration_s if killed else None
            specs.append((spec, kill))
        with ThreadPoolExecutor(config.processes) as pool:
            futures = [pool.submit(_isolated, s, config, mode, kill_after_s=k) for s, k in specs]
            results = [f.result() for f in futures]
        for p, result in enumerate(results):
            result.process = p
        return results

    return run


def _on_shared_service(runner):
    """`runner` with every client of the test on ONE shared driver service the suite starts and stops.

    A service the user named with --driver-socket is used as it is. Afterwards the service must hold
    no handle of the finished clients: any left is a FAILURE of the tests that otherwise passed.
    """

    def run(mode, driver, models, config, progress):
        if config.in_process:
            return runner(mode, driver, models, config, progress)
        if driver in config.driver_sockets:
            return _checked(runner, mode, driver, models, config, progress, config.driver_sockets[driver])
        from mlts.runtime.discovery import discover, thread_env
        from mlts.runtime.shared import SharedService

        specs = discover(config.plugin_files)
        if driver not in specs:
            raise StressConfigError(f"unknown driver {driver!r}")
        try:
            service = SharedService.start(
                specs[driver].factory,
                name=driver,
                options=config.driver_options or None,
                env=thread_env(1),
            )
        except HalError as e:
            return [_setup_failure(mode, driver, models, str(e))]
        progress(f"  shared service pid {service.pid} at {service.path}")
        try:
            return _checked(runner, mode, driver, models, config, progress, service.path)
        finally:
            service.stop()

    return run


def _checked(runner, mode, driver, models, config, progress, path: str) -> list[TestResult]:
    shared = replace(config, driver_sockets={**config.driver_sockets, driver: path})
    results = runner(mode, driver, models, shared, progress)
    leftover = _leftover_handles(path)
    for result in results:
        result.details["shared_service"] = path
        result.details["handles_left_by_finished_clients"] = leftover
        if leftover and result.outcome == Outcome.SUCCESS:
            result.outcome = Outcome.FAILURE
            result.reason = f"the shared driver service still holds {leftover} handles of finished clients"
    return results


def _leftover_handles(path: str, wait_s: float = 3.0) -> int:
    """Handles the service at `path` still holds for clients other than the asking one (after a short wait)."""
    from mlts.runtime.remote import RemoteDevice

    end = time.monotonic() + wait_s
    try:
        with RemoteDevice.connect(path) as device:
            while True:
                status = device.service_status()
                mine = sum(status["you"]["handles"].values())
                held = sum(sum(c["handles"].values()) for c in status["visible_clients"]) - mine
                if held == 0 or time.monotonic() > end:
                    return held
                time.sleep(0.1)
    except (HalError, KeyError, TypeError):
        return 0


def _setup_failure(mode: str, driver: str, models: list[str], reason: str) -> TestResult:
    result = TestResult(f"{mode}/{driver}", mode, driver, list(models), Outcome.FAILURE, Outcome.SUCCESS)
    result.reason = f"the shared driver service could not be started: {reason}"
    return result


_RUNNERS = {
    "inference-stress": _per_model("inference"),
    "model-loading-stress": _per_model("load"),
    "parallel-inference-stress": _one("inference"),
    "parallel-inference-stress-in-process": _in_process,
    "client-early-termination-stress": _on_shared_service(_early_termination),
    "multi-process-inference-stress": _on_shared_service(_multi_process("inference")),
    "multi-process-model-load-stress": _on_shared_service(_multi_process("load")),
    "memory-mapped-model-load-stress": _one("mmap-load"),
    "model-load-random-stress": _one(
        "random-load", ops="random_ops", count="random_count", dump_dir="dump_dir"
    ),
    "inference-random-stress": _one(
        "random-inference", ops="random_ops", count="random_count", dump_dir="dump_dir"
    ),
    "performance-degradation-stress": _on_shared_service(
        _one("degradation", limit_percent="degradation_limit")
    ),
    "priority-stress": _on_shared_service(_one("priority")),
    "priority-stress-two-clients": _on_shared_service(_one("priority-two-clients")),
}


def modes_of(mode: str) -> list[str]:
    """The modes `mode` names: itself, or ALL_MODES for "all"; an unknown name is a StressConfigError."""
    if mode == "all":
        return list(ALL_MODES)
    if mode not in MODES:
        raise StressConfigError(f"unknown stress mode {mode!r}; modes: {', '.join(MODES)}, all")
    return [mode]


#: Modes with one test per model (per driver); the multi-process ones have one per client process.
_PER_MODEL = ("inference-stress", "model-loading-stress")
_PER_PROCESS = ("multi-process-inference-stress", "multi-process-model-load-stress")


def planned_tests(modes: list[str], drivers: list[str], models: list[str], config: StressConfig) -> int:
    """How many tests a run of `modes` on `drivers` makes (what its completion counts against)."""
    per_driver = sum(
        len(models) if m in _PER_MODEL else config.processes if m in _PER_PROCESS else 1 for m in modes
    )
    return per_driver * len(drivers)


def run_stress(
    modes: list[str],
    drivers: list[str],
    models: list[str],
    config: StressConfig,
    progress: Progress,
    checkpoint: Callable[[dict], None],
) -> dict:
    """Run every mode on every driver; returns the results document.

    `checkpoint(doc)` gets the document after every mode and, before the KeyboardInterrupt goes on,
    when the run is interrupted (Ctrl-C, or SIGTERM and SIGHUP as `supervise.Terminated`), so an
    interrupted run keeps what finished.
    """
    from mlts.crash.supervise import interrupt_on_termination

    config.check()
    results: list[TestResult] = []
    try:
        with interrupt_on_termination():
            for mode in modes:
                results += run_mode(mode, drivers, models, config, progress)
                checkpoint(stress_document(results, config, modes, drivers, models))
    except KeyboardInterrupt:
        checkpoint(stress_document(results, config, modes, drivers, models))
        raise
    return stress_document(results, config, modes, drivers, models)


def stress_document(
    results: list[TestResult], config: StressConfig, modes: list[str], drivers, models
) -> dict:
    """The results document (kind "stress") for results.json and the report."""
    from mlts.records import SCHEMA_VERSION
    from mlts.records.environment import environment

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "stress",
        "environment": environment(),
        "config": {**config.to_json(), "modes": modes, "drivers": drivers, "models": models},
        "results": [r.record().to_json() for r in results],
    }
