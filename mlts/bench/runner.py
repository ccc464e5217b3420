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

from dataclasses import replace
from typing import Any

from mlts.bench.backends import (  # noqa: F401  (BenchmarkConfig and the row helpers are used from here too)
    NNAPI_REFERENCE,
    NOT_MEASURED,
    REFERENCE_KEY,
    Backend,
    BackendKey,
    BenchmarkConfig,
    backend_order,
    driver_backends,
    driver_timing,
    each_backend,
    error_record,
    measured_row,
    model_backends,
    timed_fields,
)
from mlts.bench.driver_quality import DriverQualityProbe
from mlts.bench.memory import driver_pid
from mlts.bench.ort_exactness import probe as ort_probe
from mlts.bench.overhead import harness_overhead
from mlts.bench.progress import Progress
from mlts.bench.sources import ModelSource, family_of, zoo_entry
from mlts.bench.speech_runner import benchmark_recurrent
from mlts.bench.timing import Timed
from mlts.convert.errors import ConversionError
from mlts.hal.errors import HalError
from mlts.records import SCHEMA_VERSION, BenchmarkRow, DriverQuality, Violation
from mlts.records.environment import environment
from mlts.runtime.execution import ExecutionMode

# MLTS's run lengths (seconds; LSTM dataset sequences), full and --quick.
FULL_RUN: dict = {
    "warmup_s": 2.0,
    "duration_s": 10.0,
    "compile_max_seconds": 10.0,
    "sequences": 50,
    "early_stop": False,
}
QUICK_RUN: dict = {
    "warmup_s": 0.3,
    "duration_s": 1.0,
    "compile_max_seconds": 0.3,
    "sequences": 10,
    "early_stop": True,
}


def run_lengths(
    quick: bool,
    *,
    warmup_s: float | None = None,
    duration_s: float | None = None,
    compile_seconds: float | None = None,
    sequences: int | None = None,
    early_stop: bool | None = None,
) -> dict:
    """BenchmarkConfig's run lengths: the ones given, the others MLTS's defaults, or with `quick` its short run.

    Full: 2 s warm-up, at least 10 s timed, each compilation timing up to 10 s, all 50 LSTM sequences,
    fixed durations. Quick: 0.3 s warm-up, at least 1 s timed, each compilation timing up to 0.3 s,
    10 LSTM sequences, each of these lengths an upper bound that a precise median ends early
    (mlts.bench.stopping).
    """
    defaults = QUICK_RUN if quick else FULL_RUN
    given = {
        "warmup_s": warmup_s,
        "duration_s": duration_s,
        "compile_max_seconds": compile_seconds,
        "sequences": sequences,
        "early_stop": early_stop,
    }
    return {k: defaults[k] if v is None else v for k, v in given.items()}


# What --profile says on rows of the runtime's own placement of a model over several drivers.
PARTITIONED_PROFILE = {
    "available": False,
    "reason": "per-operation profiles are measured on single drivers, not on a model split over several",
    "overhead": None,
}


def benchmark_model(
    source: ModelSource, proto, devices: dict, config: BenchmarkConfig, progress: Progress, imageset
) -> list[dict]:
    """All backends on one loaded ONNX model; a failing driver gives an error row, not an exception."""
    entry = zoo_entry(source)
    if entry is not None and entry.recurrent:
        return benchmark_recurrent(source, entry, proto, devices, config, progress)
    from mlts.convert.tflite import TfliteModel

    if isinstance(proto, TfliteModel):
        from mlts.bench.tflite_workload import prepare_tflite_workload

        work = prepare_tflite_workload(source, proto, config, imageset, progress, offered_extensions(devices))
    else:
        from mlts.bench.workload import prepare_workload

        work = prepare_workload(source, proto, config, imageset, progress, offered_extensions(devices))

    def run(backend: Backend) -> BenchmarkRow:
        if backend.is_reference:
            return _run_reference(work, backend, config, progress)
        return _run_driver(work, backend, config, progress)

    backends = model_backends(config, source.name, devices)
    if work.reference is None:  # an .nnm file: nothing for onnxruntime to run
        backends = [b for b in backends if not b.is_reference]
    drivers = driver_backends(config, devices)
    try:
        ran, failed = each_backend(backends, work.name, work.family, config, progress, run)
    except KeyboardInterrupt as e:
        # The backends that finished before the interruption are kept, judged as usual.
        finished: tuple[dict[BackendKey, BenchmarkRow], dict[BackendKey, BenchmarkRow]] = getattr(
            e, "finished_backends", ({}, {})
        )
        rows_so_far = {**finished[0], **finished[1]}
        e.finished_rows = _judged_rows(rows_so_far, drivers, config, work.output_kind)  # type: ignore[attr-defined]
        raise
    judged = _judged_rows({**ran, **failed}, drivers, config, work.output_kind)
    if source.twin is not None and work.reference is not None:
        # --reference both: onnxruntime on the ONNX twin, after the reference
        judged.insert(1, _run_twin_reference(source, work, config, progress).to_json())
    return judged


def _judged_rows(
    rows: dict[BackendKey, BenchmarkRow], drivers: list[BackendKey], config: BenchmarkConfig, output_kind
) -> list[dict]:
    """The reference row and the driver rows (those present) with MLTS's validation and the verdict
    (none without a reference: an .nnm file, or a run interrupted before the reference ran)."""
    ref = rows.get(REFERENCE_KEY)
    drivers = [d for d in drivers if d in rows]
    from mlts.bench.evaluators import validation_errors
    from mlts.bench.verdict import with_verdict

    if ref is not None:
        for name in drivers:
            rows[name] = with_verdict(_mlts_validation(rows[name], ref, validation_errors), ref, output_kind)
    if config.profile and ref is not None:
        from mlts.bench.profile import attach_layer_pairs

        # The profiles are the rows' own JSON objects: the driver rows' gain their `layers` in place.
        attach_layer_pairs({key: {"profile": r.profile} for key, r in rows.items()}, REFERENCE_KEY)
    return [r.to_json() for r in ([ref] if ref is not None else []) + [rows[d] for d in drivers]]


def _run_twin_reference(
    source: ModelSource, work, config: BenchmarkConfig, progress: Progress
) -> BenchmarkRow:
    """--reference both: onnxruntime on the model's ONNX twin, timed, and scored against the first reference."""
    from mlts.bench.memory import MemoryWatch
    from mlts.bench.reference_choice import TwinReference
    from mlts.hal import files

    assert source.twin is not None
    data = files.read_bytes(source.twin, what="an ONNX model", limit=files.MAX_ONNX_BYTES)
    twin = TwinReference(data, config.threads, work.conv)
    label = twin.backend
    watch = MemoryWatch(None).start()
    progress.phase(work.name, label, "warm-up and timing (ONNX twin)")
    timed = config.control.run(lambda i: twin.run(work.feeds[i % len(work.feeds)]))
    outputs = [twin.run(f) for f in work.feeds]
    accuracy = work.score(outputs, against_reference=True)
    rec = _row(
        work,
        label,
        ExecutionMode.SYNC,
        config,
        timed,
        progress,
        driver_timing_us=None,
        accuracy=accuracy,
        compilation=None,
        memory_mb=watch.result(),
    )
    progress.unit_done()
    return rec


def _mlts_validation(rec: BenchmarkRow, ref: BenchmarkRow, validation_errors) -> BenchmarkRow:
    """An ok driver row with MLTS's top-1 rule against the reference as its validation errors."""
    topk, ref_topk = rec.evaluator("topk"), ref.evaluator("topk")
    if not rec.ok or not topk or not ref_topk:
        return rec
    errors = validation_errors(topk.to_json(), ref_topk.to_json())
    return replace(rec, validation_errors=tuple(Violation.from_json(e) for e in errors))


def offered_extensions(devices: dict) -> frozenset[str]:
    """The vendor extensions any of the drivers declares (a driver that cannot say offers none)."""
    names: set[str] = set()
    for device in devices.values():
        try:
            names.update(e.name for e in device.getSupportedExtensions())
        except HalError:
            continue
    return frozenset(names)


def _run_reference(work, backend: Backend, config: BenchmarkConfig, progress: Progress) -> BenchmarkRow:
    label = getattr(work.reference, "backend", backend.label)
    watch = backend.memory_watch()
    progress.phase(work.name, label, "warm-up and timing")
    reference, feeds = work.reference, work.reference_feeds
    timed = config.control.run(lambda i: reference.run(feeds[i % len(feeds)]))
    extra = {}
    if config.profile:
        from mlts.bench.profile_runs import profile_reference

        progress.phase(work.name, label, "profile")
        extra["profile"] = profile_reference(work, config.threads, config.duration_s, timed.samples)
    return _row(
        work,
        label,
        backend.mode,
        config,
        timed,
        progress,
        driver_timing_us=None,
        accuracy=work.score(work.expected, against_reference=False),
        compilation=None,
        memory_mb=watch.result(),
        **extra,
    )


def _row(
    work,
    label: str,
    execution: ExecutionMode,
    config: BenchmarkConfig,
    timed: Timed,
    progress: Progress,
    *,
    accuracy: dict,
    driver_timing_us: dict | None,
    compilation: dict | None,
    memory_mb: dict,
    retries: dict | None = None,
    **fields,
) -> BenchmarkRow:
    """The results row of a finished run (and its detail line); the parts given as JSON become records."""
    if work.extensions:
        fields["extensions"] = tuple(work.extensions)
    if work.quantization is not None:
        fields["quantization"] = work.quantization(accuracy)
    if work.reference_verdict is not None and not work.reference_verdict["exact"]:
        fields["reference_inexact"] = work.reference_verdict["note"]
    if work.reference is not None:
        fields["reference"] = getattr(work.reference, "framework", "onnxruntime")
    if work.reference_unavailable is not None:
        fields["reference_unavailable"] = work.reference_unavailable
    rec = measured_row(
        work.name,
        label,
        config,
        execution=execution,
        family=work.family,
        dataset=work.dataset,
        **timed_fields(timed, config),
        driver_timing_us=driver_timing_us,
        accuracy=accuracy,
        compilation=compilation,
        memory_mb=memory_mb,
        retries=retries,
        **fields,
    )
    progress.log(unit_summary(rec))
    return rec


def _run_driver(work, backend: Backend, config: BenchmarkConfig, progress: Progress) -> BenchmarkRow:
    """One driver, or (nnapi-reference) the runtime's own placement of the model over every driver."""
    if backend.partitioned:
        return _run_partitioned(work, backend, config, progress)
    return _run_one_driver(work, backend, config, progress)


def _timed_session(
    work,
    session,
    label: str,
    config: BenchmarkConfig,
    progress: Progress,
    quality: DriverQualityProbe | None = None,
):
    """Warm-up and timed run, then the accuracy pass: (Timed, timed results, outputs).

    The calls cycle through the inputs from the first, the timed ones going on where the warm-up
    stopped. The accuracy pass scores the outputs of the first call on each input and runs only the
    inputs no warm-up or timed call reached. With `quality`, the first execution, the driver's CPU
    over the timed run and the cost of MeasureTiming are measured too (mlts.bench.driver_quality).
    """
    results: list = []
    feeds = work.feeds
    first: dict[int, list] = {}

    def call(_: int) -> None:
        k = len(results) % len(feeds)
        outputs, result = session.run(feeds[k])
        results.append(result)
        first.setdefault(k, outputs)

    progress.phase(work.name, label, "warm-up and timing")
    if quality is None:
        timed = config.control.run(call)
    else:
        timed = config.control.run(quality.wrap(call))
        quality.timed(timed.iterations)
        progress.phase(work.name, label, "latency with and without MeasureTiming")
        median = sorted(timed.samples)[len(timed.samples) // 2] if timed.samples else 0.0
        # A share of the timed run as it ran (shorter when the run stopped early).
        quality.timing_cost(session, feeds, median, timed.duration_seconds)
    progress.phase(work.name, label, f"accuracy over {len(feeds)} inputs ({len(first)} from the timed calls)")
    outputs = [first[k] if k in first else session.run(f)[0] for k, f in enumerate(feeds)]
    return timed, results[len(results) - timed.iterations :], outputs


def _run_one_driver(work, backend: Backend, config: BenchmarkConfig, progress: Progress) -> BenchmarkRow:
    label = backend.label
    watch = backend.memory_watch()
    progress.phase(work.name, label, "compilation timings")
    compilation = backend.compilation(work.model, config, progress)
    progress.phase(work.name, label, "prepare")
    session = backend.open_session(work.model, config)
    extra = {}
    quality = DriverQualityProbe(watch, driver_pid(backend.device))
    quality.prepared()
    try:
        timed, results, outputs = _timed_session(work, session, label, config, progress, quality)
        overhead = harness_overhead(backend.device)  # on the connection the timed calls used
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
        backend.mode,
        config,
        timed,
        progress,
        driver_timing_us=driver_timing(results),
        accuracy=work.score(outputs, against_reference=True),
        compilation=compilation,
        memory_mb=watch.result(),
        retries=retries,
        harness_overhead=overhead,
        driver_quality=DriverQuality.from_json(quality.to_json(_median_ms(timed.samples)), "driver_quality"),
        **extra,
    )


def _median_ms(samples: tuple[float, ...]) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    n = len(ordered)
    middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return middle * 1000.0


def _run_partitioned(work, backend: Backend, config: BenchmarkConfig, progress: Progress) -> BenchmarkRow:
    """The model split over the drivers by their capabilities, unsupported operations on the CPU path.

    The row adds `partition`: which operation ran where, the steps, coverage per device, each step's
    prepare time and any fallback to the CPU path. The driver timing sums the steps' timings.
    """
    label = backend.label
    watch = backend.memory_watch()
    progress.phase(work.name, label, "partition and prepare")
    session = backend.open_session(work.model, config)
    try:
        timed, results, outputs = _timed_session(work, session, label, config, progress)
        partition = session.describe()
        summary = session.summary()
    finally:
        session.close()
    return _row(
        work,
        label,
        backend.mode,
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


def unit_summary(rec: BenchmarkRow) -> str:
    """One detail line: calls, seconds and median of a finished run."""
    lat, run = rec.latency_ms, rec.run
    assert lat is not None and run is not None  # an ok row
    lo, hi = lat.median_ci95
    stopped = f", stopped {run.stopped}" if run.stop_rule is not None and run.stopped else ""
    return (
        f"{rec.model} on {rec.backend}: {run.iterations} timed calls in {run.seconds:.2f} s{stopped}, "
        f"median {lat.median:.3f} ms [{lo:.3f}, {hi:.3f}]"
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
    model so completed work survives an interruption, and once more when the
    run is interrupted in a model (KeyboardInterrupt, also SIGTERM as the
    caller's handler raises it), with the backends of that model that finished.
    """
    from mlts.bench.reference_choice import framework_of, resolve
    from mlts.runtime.discovery import open_device

    progress = progress or Progress()
    sources = resolve(list(sources), config.reference)
    if any(framework_of(s) == "litert" for s in sources):
        from mlts.bench.tflite_workload import require_litert

        require_litert()
    _build_missing_models(sources, progress)
    protos = [_load(source, progress) for source in sources]
    if protos and all(isinstance(p, str) for p in protos):
        raise ConversionError(protos[0])  # nothing to measure: bad input, before any driver starts
    images = open_imageset(config) if any(not _is_recurrent(s) for s in sources) else None
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "benchmark",
        "environment": {
            **environment(config.threads),
            "onnxruntime_integer": ort_probe(),
            **_litert_env(sources),
        },
        "config": {
            **config.to_json(),
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
        drivers = len(driver_backends(config, devices))
        # Per model: its drivers, its reference (none for an .nnm file) and a twin's second reference.
        units = sum(drivers + (0 if s.is_nnm else 1) + (s.twin is not None) for s in sources)
        progress.plan(units, config.seconds_per_unit(), models=len(sources))
        for source, proto in zip(sources, protos, strict=True):
            try:
                if isinstance(proto, str):
                    raise ConversionError(proto)
                doc["results"] += benchmark_model(source, proto, devices, config, progress, images)
            except KeyboardInterrupt as e:
                # Ctrl-C or SIGTERM: the finished backends of this model join the finished models.
                doc["results"] += getattr(e, "finished_rows", [])
                if checkpoint is not None:
                    checkpoint(doc)
                raise
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


def _litert_env(sources: list[ModelSource]) -> dict:
    """The LiteRT version, when a model runs on it."""
    from mlts.bench.reference_choice import framework_of

    if not any(framework_of(s) == "litert" for s in sources):
        return {}
    from mlts.bench.litert_reference import version

    return {"litert": version()}


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
    """The ModelProto of `source` (an .nnm file's NnFile), or the one-line reason it cannot be loaded."""
    from mlts.convert import load_model
    from mlts.hal import nnfile

    try:
        if source.is_nnm:
            return nnfile.load(source.onnx_path())
        return load_model(source.onnx_path())
    except (ConversionError, OSError, ValueError) as e:
        message = _model_error(source, e)
        progress.log(message)
        return message


def model_error_rows(source: ModelSource, message: str, devices: dict, config: BenchmarkConfig) -> list[dict]:
    """One error row per backend of a model that could not be loaded or converted."""
    from mlts.bench.reference_choice import reference_label

    family = family_of(source)
    rows = (
        [] if source.is_nnm else [error_record(source.name, family, reference_label(source), config, message)]
    )
    rows += [
        error_record(source.name, family, key.label, config, message, key.mode)
        for key in driver_backends(config, devices)
    ]
    return rows


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
