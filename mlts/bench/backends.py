"""The backends of a model's run and the one loop over them, for image and LSTM models alike.

A backend (`BackendKey`) is the CPU reference, one driver on one execution path, or the runtime's
own placement of the model over every driver (`nnapi-reference`); its `label` is what results rows
call it (`driver:sample-all`, `driver:sample-all/async`, `nnapi-reference/burst`).
`model_backends` lists them in a seeded random order per model (so slow drift favours none); a
`Backend` opens its sessions, watches peak memory and times compilation; and `each_backend` runs
them in order, turning a driver's HalError into that backend's error row. The row helpers (`row`,
`measured_row`, `error_row`, `timed_fields`, `driver_timing`) build the results rows as records
(BenchmarkRow); producers write them as JSON (`to_json`) once a model is done.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from mlts.bench.memory import MemoryWatch, driver_pid
from mlts.bench.progress import Progress
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.stats import PERCENTILE_ESTIMATOR, describe
from mlts.bench.stopping import EarlyStop, ci_halfwidth, default_early_stop
from mlts.bench.timing import RunControl, Timed
from mlts.hal.enums import UINT64_MAX
from mlts.hal.errors import HalError
from mlts.records import (
    BenchmarkRow,
    Compilation,
    Dataset,
    DriverTiming,
    Memory,
    Retries,
    Run,
    Stats,
    Violation,
    Warmup,
)
from mlts.records.benchmark import accuracy_check
from mlts.runtime.execution import ExecutionMode
from mlts.runtime.qos_settings import DEFAULT_QOS, QosSettings

NOT_MEASURED = "not measured"
T = TypeVar("T")


@dataclass(frozen=True)
class BenchmarkConfig:
    threads: int = 1
    warmup_s: float = 2.0
    duration_s: float = 10.0
    min_iterations: int = 20
    quick: bool = False
    images: int | None = None  # None: 100 procedural images, or all of the user's folder
    dataset_dir: str | None = None
    seed: int = 0
    in_process: bool = False
    plugin_files: tuple[str, ...] = field(default_factory=tuple)
    sequences: int = 50  # recurrent models: how many of the dataset's sequences to run
    compilation: bool = True
    compile_max_iterations: int = 100
    compile_max_seconds: float = 10.0
    # MLTS's "NNAPI reference": also ("include") or only ("only") run the device the runtime chooses.
    nnapi_reference: str = "off"
    # Factory options per driver name, e.g. {"sample-all": {"capabilities": "FILE.json"}}.
    driver_options: dict[str, dict[str, str]] = field(default_factory=dict)
    # Execution paths to measure on drivers: one row each.
    executions: tuple[ExecutionMode, ...] = (ExecutionMode.SYNC,)
    # Priority, preference, deadlines and loop timeout of every driver session.
    qos: QosSettings = DEFAULT_QOS
    # LSTM models: also run each driver with the recurrent state in driver buffers (memory domains).
    state_in_driver: bool = False
    # Per-operation profiles after each timed run (mlts.bench.profile_runs); off by default.
    profile: bool = False
    # The CPU reference (mlts.bench.reference_choice): auto, litert, onnxruntime or both.
    reference: str = "auto"
    # Stop warm-ups, timed runs and compilation timings once precise (mlts.bench.stopping); the run
    # lengths are then upper bounds. On with --quick, off by default.
    early_stop: bool = False

    @property
    def stop_rules(self) -> EarlyStop | None:
        """The early-stop rules of this run, or None when its durations are fixed."""
        return default_early_stop(self.min_iterations) if self.early_stop else None

    @property
    def control(self) -> RunControl:
        rules = self.stop_rules
        if rules is None:
            return RunControl(self.warmup_s, self.duration_s, self.min_iterations)
        return RunControl(
            self.warmup_s,
            self.duration_s,
            self.min_iterations,
            precision=rules.timed,
            warmup_rule=rules.warmup,
        )

    def seconds_per_unit(self) -> float:
        """A rough duration of one model × backend run, for the first ETA."""
        compile_s = 3 * self.compile_max_seconds if self.compilation else 0.0
        return self.warmup_s + self.duration_s + 0.5 * compile_s + 1.0

    def to_json(self) -> dict[str, Any]:
        """The configuration as results files record it (QoS names, execution paths by name)."""
        data = asdict(self)
        data["qos"] = self.qos.to_json()
        data["executions"] = [str(m) for m in self.executions]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchmarkConfig:
        """A configuration from its JSON form (`to_json`); ValueError naming a bad QoS or path."""
        values = dict(data)
        values["plugin_files"] = tuple(values.get("plugin_files") or ())
        values["executions"] = tuple(ExecutionMode(m) for m in values.get("executions") or ("sync",))
        values["qos"] = QosSettings.from_json(values.get("qos"))
        return cls(**values)


def driver_timing(results: list) -> dict | None:
    """Statistics (µs) of the driver's own Timing over the timed calls; "not measured" where it gave none.

    UINT64_MAX is the HAL's "no measurement" and is never turned into a number.
    """
    if not results:
        return None
    out: dict[str, Any] = {}
    for key in ("time_on_device", "time_in_driver"):
        values = [getattr(r.timing, key) for r in results if getattr(r.timing, key) != UINT64_MAX]
        # describe() reads seconds and writes milliseconds: µs / 1000 in gives µs out.
        out[key] = describe([v / 1000.0 for v in values], p99_wanted=False) if values else NOT_MEASURED
    return out


REFERENCE = "ref"
NNAPI_REFERENCE = "nnapi-reference"
STATE_TAG = "+state-in-driver"


@dataclass(frozen=True, slots=True)
class BackendKey:
    """Which backend a run measures: the CPU reference (`REFERENCE`), one driver by its name, or the
    runtime's own placement over every driver (`NNAPI_REFERENCE`), on one execution path; with
    `state_in_driver` an LSTM run keeping its recurrent state in driver buffers."""

    name: str
    mode: ExecutionMode = ExecutionMode.SYNC
    state_in_driver: bool = False

    @property
    def is_reference(self) -> bool:
        return self.name == REFERENCE

    @property
    def partitioned(self) -> bool:
        return self.name == NNAPI_REFERENCE

    @property
    def label(self) -> str:
        """The results rows' name of a driver backend: `driver:NAME[+state-in-driver][/PATH]` (no path for
        sync), or `nnapi-reference[/PATH]` (the reference's label is its framework's, see `Backend`)."""
        path = "" if self.mode == ExecutionMode.SYNC else f"/{self.mode}"
        if self.partitioned:
            return f"{NNAPI_REFERENCE}{path}"
        return f"driver:{self.name}{STATE_TAG if self.state_in_driver else ''}{path}"

    def with_state_in_driver(self) -> BackendKey:
        return BackendKey(self.name, self.mode, True)


REFERENCE_KEY = BackendKey(REFERENCE)


def row(
    model: str, backend: str, config: BenchmarkConfig, *, execution: ExecutionMode, **fields: Any
) -> BenchmarkRow:
    """An ok row of `model` on `backend` (its label) by path `execution`: its identity and run settings,
    then `fields` (record values)."""
    values: dict[str, Any] = {
        "model": model,
        "family": "user",
        "backend": backend,
        "execution": str(execution),
        "status": "ok",
        "threads": config.threads,
        "qos": config.qos.to_json(),
        "percentile_estimator": PERCENTILE_ESTIMATOR,
        "validation_errors": (),
        "reference": "onnxruntime",
    }
    return BenchmarkRow.make(**{**values, **fields})


def measured_row(
    model: str,
    backend: str,
    config: BenchmarkConfig,
    *,
    execution: ExecutionMode,
    dataset: dict,
    accuracy: dict,
    driver_timing_us: dict | None,
    compilation: dict | None,
    memory_mb: dict,
    retries: dict | None = None,
    validation_errors: list[dict] | None = None,
    **fields: Any,
) -> BenchmarkRow:
    """`row` of a finished run whose measured parts come as the JSON their modules write (each then
    checked into its record, a RecordError naming the part if a module wrote it wrong)."""
    if retries is not None:
        fields["retries"] = Retries.from_json(retries, "retries")
    return row(
        model,
        backend,
        config,
        execution=execution,
        dataset=Dataset.from_json(dataset, "dataset"),
        driver_timing_us=None if driver_timing_us is None else DriverTiming.from_json(driver_timing_us),
        accuracy=accuracy_check(accuracy, "accuracy"),
        validation_errors=tuple(Violation.from_json(v) for v in validation_errors or ()),
        compilation=None if compilation is None else Compilation.from_json(compilation, "compilation"),
        memory_mb=Memory.from_json(memory_mb, "memory_mb"),
        **fields,
    )


def error_row(
    model: str,
    family: str,
    backend: str,
    config: BenchmarkConfig,
    error: str,
    execution: ExecutionMode = ExecutionMode.SYNC,
) -> BenchmarkRow:
    """The row of a backend (its label) that failed, by path `execution`."""
    return BenchmarkRow(
        model=model,
        family=family,
        backend=backend,
        execution=str(execution),
        status="error",
        error=error,
        threads=config.threads,
    )


def error_record(
    model: str,
    family: str,
    backend: str,
    config: BenchmarkConfig,
    error: str,
    execution: ExecutionMode = ExecutionMode.SYNC,
) -> dict:
    return error_row(model, family, backend, config, error, execution).to_json()


def timed_fields(timed: Timed, config: BenchmarkConfig) -> dict[str, Any]:
    """warmup, run, iterations and latency_ms (with the raw samples in ms) of one timed run, as records."""
    latency = describe(timed.samples)
    latency["samples"] = [s * 1000.0 for s in timed.samples]
    rules = config.stop_rules
    spread = ci_halfwidth(timed.samples)[3]
    return {
        "warmup": Warmup(
            iterations=timed.warmup_iterations,
            seconds=timed.warmup_seconds,
            target_seconds=config.warmup_s,
            stopped=timed.warmup_stopped,
            stop_rule=None if rules is None else rules.warmup.to_json(),
        ),
        "run": Run(
            iterations=timed.iterations,
            seconds=timed.duration_seconds,
            min_seconds=config.duration_s,
            min_iterations=config.min_iterations,
            stopped=timed.stopped,
            stop_rule=None if rules is None else rules.timed.to_json(),
            ci95_percent=None if spread is None else round(100.0 * spread, 4),
            checks=timed.checks,
        ),
        "iterations": timed.iterations,
        "latency_ms": Stats.of(latency),
    }


def driver_backends(config: BenchmarkConfig, devices: dict) -> list[BackendKey]:
    """The driver backends of a run: each driver, the runtime's own choice, or both; once per execution path."""
    named = [] if config.nnapi_reference == "only" else sorted(devices)
    bases = named + ([NNAPI_REFERENCE] if config.nnapi_reference != "off" else [])
    return [BackendKey(base, mode) for base in bases for mode in config.executions]


def backend_order(config: BenchmarkConfig, name: str, devices: dict) -> list[BackendKey]:
    """The reference and the driver backends in a random order seeded by the run's seed and the model."""
    backends = [REFERENCE_KEY, *driver_backends(config, devices)]
    random.Random(f"{config.seed}:{name}").shuffle(backends)
    return backends


def compilation_timings(
    device, model, config: BenchmarkConfig, progress: Progress | None = None
) -> dict | None:
    """MLTS's three compilation timings and the cache size, in a cache directory of their own."""
    if not config.compilation:
        return None
    from mlts.bench.compilation import measure_compilation

    with tempfile.TemporaryDirectory(prefix="mlts-compile-cache-") as cache_dir:
        return measure_compilation(
            device,
            model,
            cache_dir,
            max_iterations=config.compile_max_iterations,
            max_seconds=config.compile_max_seconds,
            precision=None if config.stop_rules is None else config.stop_rules.compilation,
            on_step=progress.advance if progress is not None else None,
        )


@dataclass(frozen=True)
class Backend:
    """One backend of a model's run, with the run's open devices: `label` as the results row names it."""

    key: BackendKey
    devices: dict = field(repr=False)

    @property
    def is_reference(self) -> bool:
        return self.key.is_reference

    @property
    def label(self) -> str:
        return OnnxRuntimeReference.backend if self.is_reference else self.key.label

    @property
    def name(self) -> str:
        """The driver's name, or nnapi-reference ("ref" for the reference)."""
        return self.key.name

    @property
    def mode(self) -> ExecutionMode:
        return self.key.mode

    @property
    def partitioned(self) -> bool:
        return self.key.partitioned

    @property
    def device(self):
        """The driver's open device (None for the reference and the runtime's own placement)."""
        return None if self.is_reference or self.partitioned else self.devices[self.name]

    def memory_watch(self) -> MemoryWatch:
        """Peak memory of the client and, for one driver in its own process, of the driver."""
        device = self.device
        return MemoryWatch(driver_pid(device) if device is not None else None).start()

    def open_session(self, model, config: BenchmarkConfig):
        """A session on this driver, or the model partitioned over every driver, with the run's QoS (the
        partitioned one: its preference, which steers the placement)."""
        if self.partitioned:
            from mlts.runtime.partitioned import open_partitioned

            return open_partitioned(self.devices, model, config.qos.preference, mode=self.mode)
        from mlts.runtime.session import Session

        return Session(self.device, model, mode=self.mode, qos=config.qos)

    def compilation(self, model, config: BenchmarkConfig, progress: Progress | None = None) -> dict | None:
        """MLTS's compilation timings on one driver (None for the others or with --no-compilation)."""
        device = self.device
        return None if device is None else compilation_timings(device, model, config, progress)


def model_backends(config: BenchmarkConfig, model_name: str, devices: dict) -> list[Backend]:
    """The reference and every driver backend of one model, in the seeded order of `backend_order`."""
    return [Backend(key, devices) for key in backend_order(config, model_name, devices)]


def each_backend(
    backends: list[Backend],
    model: str,
    family: str,
    config: BenchmarkConfig,
    progress: Progress,
    run: Callable[[Backend], T],
) -> tuple[dict[BackendKey, T], dict[BackendKey, BenchmarkRow]]:
    """`run(backend)` for every backend in order: (results by key, error rows by key).

    A driver backend's HalError becomes its error row (the other backends still run); the
    reference's errors propagate. Progress counts one unit per backend. An interruption (Ctrl-C,
    SIGTERM) carries what finished as the KeyboardInterrupt's `finished_backends`.
    """
    results: dict[BackendKey, T] = {}
    errors: dict[BackendKey, BenchmarkRow] = {}
    try:
        for backend in backends:
            if backend.is_reference:
                results[backend.key] = run(backend)
            else:
                try:
                    results[backend.key] = run(backend)
                except HalError as e:
                    errors[backend.key] = error_row(
                        model, family, backend.label, config, str(e), backend.mode
                    )
            progress.unit_done()
    except KeyboardInterrupt as e:
        e.finished_backends = (results, errors)  # type: ignore[attr-defined]  # kept by the runner
        raise
    return results, errors


def merged_retries(sessions: list) -> dict:
    """The `retries` field of a row whose run used several sessions (one per sequence length): the sums."""
    out: dict[str, Any] = {"retries": 0, "errors": {}, "error_classes": {}}
    for session in sessions:
        stats = getattr(session, "retry_stats", None)
        if stats is None:
            continue
        one = stats.to_dict()
        out["retries"] += one["retries"]
        for key in ("errors", "error_classes"):
            for name, n in one[key].items():
                out[key][name] = out[key].get(name, 0) + n
    return out
