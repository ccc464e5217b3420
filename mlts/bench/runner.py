"""The scoring benchmark: each model on each selected driver and on the onnxruntime CPU reference.

Per model × backend, in a seeded random backend order (so slow drift does
not favour one): compilation timings (drivers), a time-based warm-up that is
discarded, a timed run of at least `duration_s` seconds and `min_iterations`
calls (each sample the wall clock around one whole execution call, inputs
cycling through the image set), then one pass over the whole image set for
accuracy. Accuracy is scored against golden outputs (a float64 reference
independent of both the driver and onnxruntime) as top-1..top-5 and errors,
and against onnxruntime's outputs on the same inputs. Peak resident memory of
the client and of the driver process is taken over each unit.
"""

from __future__ import annotations

import random
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from mlts.bench.memory import MemoryWatch, driver_pid
from mlts.bench.ort_exactness import probe as ort_probe
from mlts.bench.overhead import harness_overhead
from mlts.bench.progress import Progress
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.sources import ModelSource, family_of, zoo_entry
from mlts.bench.stats import PERCENTILE_ESTIMATOR, describe
from mlts.bench.timing import RunControl, Timed
from mlts.convert.errors import ConversionError
from mlts.hal.enums import UINT64_MAX
from mlts.hal.errors import HalError
from mlts.report.environment import environment
from mlts.report.results import SCHEMA_VERSION
from mlts.runtime.execution import EXECUTION_MODES

NOT_MEASURED = "not measured"

# MLTS's --quick: 0.3 s warm-up and a 1 s run; compilation timings capped at 1 s each.
QUICK_WARMUP_S = 0.3
QUICK_DURATION_S = 1.0
QUICK_COMPILE_SECONDS = 1.0


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
    # Execution paths to measure on drivers (mlts.runtime.execution.EXECUTION_MODES): one row each.
    executions: tuple[str, ...] = ("sync",)
    # Priority, preference, deadline and loop timeout (mlts.runtime.qos_settings.QosSettings.to_dict()).
    qos: dict = field(default_factory=dict)

    def session_options(self) -> dict:
        from mlts.runtime.qos_settings import QosSettings

        return QosSettings.from_dict(self.qos).session_kwargs()

    # LSTM models: also run each driver with the recurrent state in driver buffers (memory domains).
    state_in_driver: bool = False
    # Per-operation profiles after each timed run (mlts.bench.profile_runs); off by default.
    profile: bool = False

    @property
    def control(self) -> RunControl:
        return RunControl(self.warmup_s, self.duration_s, self.min_iterations)

    def seconds_per_unit(self) -> float:
        """A rough duration of one model × backend run, for the first ETA."""
        compile_s = 3 * self.compile_max_seconds if self.compilation else 0.0
        return self.warmup_s + self.duration_s + 0.5 * compile_s + 1.0


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


def execution_of(backend: str) -> str:
    """The execution path of a backend label or key (`driver:sample-all/async` -> async)."""
    return split_backend(backend)[1]


def record(model: str, backend: str, config: BenchmarkConfig, **extra) -> dict:
    rec = {
        "model": model,
        "family": "user",
        "backend": backend,
        "execution": execution_of(backend),
        "status": "ok",
        "threads": config.threads,
        "qos": dict(config.qos),
        "percentile_estimator": PERCENTILE_ESTIMATOR,
        "validation_errors": [],
    }
    rec.update(extra)
    return rec


def error_record(model: str, family: str, backend: str, config: BenchmarkConfig, error: str) -> dict:
    return {
        "model": model,
        "family": family,
        "backend": backend,
        "execution": execution_of(backend),
        "status": "error",
        "error": error,
        "threads": config.threads,
    }


def timed_fields(timed: Timed, config: BenchmarkConfig) -> dict:
    """warmup, run, iterations and latency_ms (with the raw samples in ms) of one timed run."""
    latency = describe(timed.samples)
    latency["samples"] = [s * 1000.0 for s in timed.samples]
    return {
        "warmup": {
            "iterations": timed.warmup_iterations,
            "seconds": timed.warmup_seconds,
            "target_seconds": config.warmup_s,
        },
        "run": {
            "iterations": timed.iterations,
            "seconds": timed.duration_seconds,
            "min_seconds": config.duration_s,
            "min_iterations": config.min_iterations,
        },
        "iterations": timed.iterations,
        "latency_ms": latency,
    }


NNAPI_REFERENCE = "nnapi-reference"
# What --profile says on rows of the runtime's own placement of a model over several drivers.
PARTITIONED_PROFILE = {
    "available": False,
    "reason": "per-operation profiles are measured on single drivers, not on a model split over several",
    "overhead": None,
}


def driver_backends(config: BenchmarkConfig, devices: dict) -> list[str]:
    """The driver backends of a run: each driver, the runtime's own choice, or both; once per execution path.

    A backend is the driver's name, followed by `/PATH` for every path but sync (`sample-all/async`).
    """
    named = [] if config.nnapi_reference == "only" else sorted(devices)
    bases = named + ([NNAPI_REFERENCE] if config.nnapi_reference != "off" else [])
    return [base if mode == "sync" else f"{base}/{mode}" for base in bases for mode in config.executions]


def split_backend(backend: str) -> tuple[str, str]:
    """(driver name or nnapi-reference, execution path) of a backend key."""
    base, sep, mode = backend.rpartition("/")
    if sep and mode in EXECUTION_MODES:
        return base, mode
    return backend, "sync"


def backend_order(config: BenchmarkConfig, name: str, devices: dict) -> list[str]:
    backends = ["ref"] + driver_backends(config, devices)
    random.Random(f"{config.seed}:{name}").shuffle(backends)
    return backends


def backend_label(backend: str) -> str:
    return backend if split_backend(backend)[0] == NNAPI_REFERENCE else f"driver:{backend}"


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
            on_step=progress.advance if progress is not None else None,
        )


def benchmark_model(
    source: ModelSource, proto, devices: dict, config: BenchmarkConfig, progress: Progress, imageset
) -> list[dict]:
    """All backends on one loaded ONNX model; a failing driver gives an error row, not an exception."""
    entry = zoo_entry(source)
    if entry is not None and entry.recurrent:
        from mlts.bench.speech_runner import benchmark_recurrent

        return benchmark_recurrent(source, entry, proto, devices, config, progress)
    from mlts.bench.workload import prepare_workload

    work = prepare_workload(source, proto, config, imageset, progress, offered_extensions(devices))
    rows: dict[str, dict] = {}
    for backend in backend_order(config, source.name, devices):
        if backend == "ref":
            rows[backend] = _run_reference(work, config, progress)
        else:
            rows[backend] = _run_driver(work, backend, devices, config, progress)
        progress.unit_done()
    ref_topk = (rows["ref"].get("accuracy") or {}).get("topk")
    drivers = driver_backends(config, devices)
    for name in drivers:
        row = rows[name]
        topk = (row.get("accuracy") or {}).get("topk")
        if row["status"] == "ok" and topk and ref_topk:
            from mlts.bench.evaluators import validation_errors

            row["validation_errors"] = validation_errors(topk, ref_topk)
    if config.profile:
        from mlts.bench.profile import attach_layer_pairs

        attach_layer_pairs(rows)
    return [rows["ref"]] + [rows[d] for d in drivers]


def offered_extensions(devices: dict) -> frozenset[str]:
    """The vendor extensions any of the drivers declares (a driver that cannot say offers none)."""
    names: set[str] = set()
    for device in devices.values():
        try:
            names.update(e.name for e in device.getSupportedExtensions())
        except HalError:
            continue
    return frozenset(names)


def _run_reference(work, config: BenchmarkConfig, progress: Progress) -> dict:
    label = OnnxRuntimeReference.backend
    watch = MemoryWatch(None).start()
    progress.phase(work.name, label, "warm-up and timing")
    reference = work.reference
    timed = config.control.run(lambda i: reference.run(work.feeds[i % len(work.feeds)]))
    extra = {}
    if config.profile:
        from mlts.bench.profile_runs import profile_reference

        progress.phase(work.name, label, "profile")
        extra["profile"] = profile_reference(work, config.threads, config.duration_s, timed.samples)
    return _row(
        work,
        label,
        config,
        timed,
        progress,
        driver_timing_us=None,
        accuracy=work.score(work.expected, against_reference=False),
        compilation=None,
        memory_mb=watch.result(),
        **extra,
    )


def _row(work, label: str, config: BenchmarkConfig, timed: Timed, progress: Progress, **fields) -> dict:
    """The results row of a finished run (and its detail line)."""
    rec = record(
        work.name,
        label,
        config,
        family=work.family,
        dataset=work.dataset,
        **timed_fields(timed, config),
        **fields,
    )
    if work.extensions:
        rec["extensions"] = list(work.extensions)
    if work.quantization is not None:
        rec["quantization"] = work.quantization(rec["accuracy"])
    if work.reference_verdict is not None and not work.reference_verdict["exact"]:
        rec["reference_inexact"] = work.reference_verdict["note"]
    progress.log(unit_summary(rec))
    return rec


def _run_driver(work, backend: str, devices: dict, config: BenchmarkConfig, progress: Progress) -> dict:
    """One driver, or (nnapi-reference) the runtime's own placement of the model over every driver."""
    label = backend_label(backend)
    try:
        name, mode = split_backend(backend)
        if name == NNAPI_REFERENCE:
            return _run_partitioned(work, devices, config, progress, mode)
        return _run_one_driver(work, label, devices[name], config, progress, mode)
    except HalError as e:
        return error_record(work.name, work.family, label, config, str(e))


def _timed_session(work, session, label: str, config: BenchmarkConfig, progress: Progress):
    """Warm-up and timed run, then the accuracy pass: (Timed, timed results, outputs)."""
    results: list = []
    progress.phase(work.name, label, "warm-up and timing")
    timed = config.control.run(lambda i: results.append(session.run(work.feeds[i % len(work.feeds)])[1]))
    progress.phase(work.name, label, f"accuracy over {len(work.feeds)} inputs")
    outputs = [session.run(f)[0] for f in work.feeds]
    return timed, results[len(results) - timed.iterations :], outputs


def _run_one_driver(
    work, label: str, device, config: BenchmarkConfig, progress: Progress, mode: str = "sync"
) -> dict:
    from mlts.runtime.session import Session

    watch = MemoryWatch(driver_pid(device)).start()
    progress.phase(work.name, label, "compilation timings")
    compilation = compilation_timings(device, work.model, config, progress)
    progress.phase(work.name, label, "prepare")
    session = Session(device, work.model, mode=mode, **config.session_options())
    extra = {}
    try:
        timed, results, outputs = _timed_session(work, session, label, config, progress)
        overhead = harness_overhead(device)  # on the connection the timed calls used
        if config.profile:
            from mlts.bench.profile_runs import profile_driver

            progress.phase(work.name, label, "profile")
            extra["profile"] = profile_driver(work, session, config.duration_s, timed.samples)
    finally:
        session.close()
    retries = session.retry_stats.to_dict()
    return _row(
        work,
        label,
        config,
        timed,
        progress,
        driver_timing_us=driver_timing(results),
        accuracy=work.score(outputs, against_reference=True),
        compilation=compilation,
        memory_mb=watch.result(),
        retries=retries,
        harness_overhead=overhead,
        **extra,
    )


def _run_partitioned(
    work, devices: dict, config: BenchmarkConfig, progress: Progress, mode: str = "sync"
) -> dict:
    """The model split over the drivers by their capabilities, unsupported operations on the CPU path.

    The row adds `partition`: which operation ran where, the steps, coverage per device, each step's
    prepare time and any fallback to the CPU path. The driver timing sums the steps' timings.
    """
    from mlts.runtime.partitioned import open_partitioned

    label = backend_label(NNAPI_REFERENCE if mode == "sync" else f"{NNAPI_REFERENCE}/{mode}")
    watch = MemoryWatch(None).start()
    progress.phase(work.name, label, "partition and prepare")
    preference = config.session_options()["preference"]
    session = open_partitioned(devices, work.model, preference, mode=mode)
    try:
        timed, results, outputs = _timed_session(work, session, label, config, progress)
        partition = session.describe()
        summary = session.summary()
    finally:
        session.close()
    return _row(
        work,
        label,
        config,
        timed,
        progress,
        driver_timing_us=driver_timing(results),
        accuracy=work.score(outputs, against_reference=True),
        compilation=None,
        memory_mb=watch.result(),
        selection=summary,
        partition=partition,
        **({"profile": PARTITIONED_PROFILE} if config.profile else {}),
    )


def unit_summary(rec: dict) -> str:
    """One detail line: calls, seconds and median of a finished run."""
    lat, run = rec["latency_ms"], rec["run"]
    return (
        f"{rec['model']} on {rec['backend']}: {run['iterations']} timed calls in {run['seconds']:.2f} s, "
        f"median {lat['median']:.3f} ms [{lat['median_ci95'][0]:.3f}, {lat['median_ci95'][1]:.3f}]"
    )


def open_imageset(config: BenchmarkConfig):
    """The image set every image model runs on: the user's folder, or the procedural images."""
    from mlts.datasets import imageset

    if config.dataset_dir is not None:
        return imageset.folder_set(config.dataset_dir, config.images)
    return imageset.procedural_set(config.images or imageset.DEFAULT_IMAGES)


def run_benchmark(
    sources: list[ModelSource],
    driver_specs: list,
    config: BenchmarkConfig,
    progress: Progress | None = None,
    checkpoint=None,
) -> dict:
    """The whole benchmark; returns the results document (see docs/results-schema.md).

    Every model is loaded (and the image set opened) before any driver
    starts. A model that cannot be loaded or converted becomes an error row
    per backend naming its file and the reason, and the other models still
    run. `checkpoint(doc)`, when given, receives the document after each
    model so completed work survives an interruption.
    """
    from mlts.runtime.discovery import open_device

    progress = progress or Progress()
    _build_missing_models(sources, progress)
    protos = [_load(source, progress) for source in sources]
    if protos and all(isinstance(p, str) for p in protos):
        raise ConversionError(protos[0])  # nothing to measure: bad input, before any driver starts
    images = open_imageset(config) if any(not _is_recurrent(s) for s in sources) else None
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "benchmark",
        "environment": {**environment(config.threads), "onnxruntime_integer": ort_probe()},
        "config": {
            **asdict(config),
            "models": [s.name for s in sources],
            "drivers": [s.name for s in driver_specs],
        },
        "devices": {},
        "capabilities": {},
        "results": [],
    }
    devices: dict = {}
    try:
        for spec in driver_specs:
            progress.log(f"starting driver {spec.name}")
            options = config.driver_options.get(spec.name)
            devices[spec.name] = open_device(
                spec, in_process=config.in_process, threads=config.threads, options=options
            )
            doc["devices"][spec.name] = device_info(devices[spec.name])
            doc["capabilities"][spec.name] = _capabilities(devices[spec.name], spec.name, options)
        units = len(sources) * (1 + len(driver_backends(config, devices)))
        progress.plan(units, config.seconds_per_unit(), models=len(sources))
        for source, proto in zip(sources, protos, strict=True):
            try:
                if isinstance(proto, str):
                    raise ConversionError(proto)
                doc["results"] += benchmark_model(source, proto, devices, config, progress, images)
            except ConversionError as e:
                message = str(e) if isinstance(proto, str) else _model_error(source, e)
                rows = model_error_rows(source, message, devices, config)
                doc["results"] += rows
                if not isinstance(proto, str):
                    progress.log(message)
                for _ in rows:
                    progress.unit_done()
            if checkpoint is not None:
                checkpoint(doc)
    finally:
        for dev in devices.values():
            dev.close()
        progress.close()
    return doc


def _build_missing_models(sources: list[ModelSource], progress: Progress) -> None:
    """Zoo models not in the cache yet are built before the run, several at a time, each reported."""
    from mlts.models.prebuild import build_missing

    build_missing(
        [s.zoo_name for s in sources if s.zoo_name is not None],
        lambda message: progress.phase("zoo models", "-", message.strip()),
    )


def _model_error(source: ModelSource, error: BaseException) -> str:
    """The reason a model cannot be used, in one line that names its file."""
    where = str(source.path) if source.path is not None else f"zoo model {source.name}"
    reason = " ".join(str(error).split()) or type(error).__name__
    return reason if where in reason else f"model {where}: {reason}"


def _load(source: ModelSource, progress: Progress):
    """The ModelProto of `source`, or the one-line reason it cannot be loaded."""
    from mlts.convert import load_model

    try:
        return load_model(source.onnx_path())
    except (ConversionError, OSError, ValueError) as e:
        message = _model_error(source, e)
        progress.log(message)
        return message


def model_error_rows(source: ModelSource, message: str, devices: dict, config: BenchmarkConfig) -> list[dict]:
    """One error row per backend of a model that could not be loaded or converted."""
    family = family_of(source)
    backends = [OnnxRuntimeReference.backend] + [backend_label(b) for b in driver_backends(config, devices)]
    return [error_record(source.name, family, b, config, message) for b in backends]


def _is_recurrent(source: ModelSource) -> bool:
    entry = zoo_entry(source)
    return entry is not None and entry.recurrent


def _capabilities(device, name: str, options: dict[str, str] | None) -> dict:
    """getCapabilities of an open driver and where its numbers come from (default or a calibrated file)."""
    from mlts.runtime.devices_info import capabilities_report

    try:
        return capabilities_report(device, name, (options or {}).get("capabilities"))
    except HalError as e:
        return {"error": str(e)}


def device_info(device) -> dict:
    """Version, type and cache-file needs of an open device (what the report's header shows)."""
    info: dict[str, Any] = {}
    try:
        info["version"] = device.getVersionString()
        info["type"] = device.getType().name
        needed = device.getNumberOfCacheFilesNeeded()
        info["cache_files"] = {"model": int(needed.num_model_cache), "data": int(needed.num_data_cache)}
        info["pid"] = driver_pid(device)
        hello = getattr(getattr(device, "process", None), "hello", None)
        if isinstance(hello, dict):
            # Where executions ran: a private or a shared service, and its execution workers.
            info["service"] = {"shared": bool(hello.get("shared")), "workers": hello.get("workers")}
    except HalError as e:
        info["error"] = str(e)
    return info
