"""The benchmark: each model on each selected driver and on the onnxruntime CPU reference.

Measurement: warm-up iterations are run and discarded; each timed iteration is
the wall clock around one whole execution call (inputs in, outputs out), with
inputs cycling through a set of distinct, non-zero procedural images. Backends
run in a random (seeded) order per model so slow drift does not favour one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from mlts.bench.accuracy import (
    QUANT_TOLERANCE_UNITS,
    QUANT_TOLERANCE_UNITS_MOBILENET,
    compare,
    compare_quantized,
    top1_agreement,
)
from mlts.bench.inputs import make_inputs
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.sources import ModelSource
from mlts.bench.stats import PERCENTILE_ESTIMATOR, describe
from mlts.hal.enums import UINT64_MAX
from mlts.hal.errors import HalError
from mlts.report.environment import environment
from mlts.report.results import SCHEMA_VERSION

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchmarkConfig:
    threads: int = 1
    warmup: int = 5
    iterations: int = 30
    inputs: int = 8
    seed: int = 0
    in_process: bool = False
    plugin_files: tuple[str, ...] = field(default_factory=tuple)
    sequences: int = 50  # recurrent models: how many of the dataset's sequences to run


def _timed(fn, inputs_sets, warmup: int, iterations: int) -> tuple[list[float], list]:
    for i in range(warmup):
        fn(inputs_sets[i % len(inputs_sets)])
    samples = []
    extras = []
    for i in range(iterations):
        feed = inputs_sets[i % len(inputs_sets)]
        t0 = time.perf_counter()
        extra = fn(feed)
        samples.append(time.perf_counter() - t0)
        extras.append(extra)
    return samples, extras


def timing_summary(results) -> dict | None:
    dev = [r.timing.time_on_device for r in results if r.timing.time_on_device != UINT64_MAX]
    drv = [r.timing.time_in_driver for r in results if r.timing.time_in_driver != UINT64_MAX]
    if not dev and not drv:
        return None
    return {
        "time_on_device_us_median": float(np.median(dev)) if dev else None,
        "time_in_driver_us_median": float(np.median(drv)) if drv else None,
    }


def record(model: str, backend: str, config: BenchmarkConfig, **extra) -> dict:
    rec = {
        "model": model,
        "backend": backend,
        "status": "ok",
        "threads": config.threads,
        "warmup_iterations": config.warmup,
        "iterations": config.iterations,
        "inputs": config.inputs,
        "percentile_estimator": PERCENTILE_ESTIMATOR,
    }
    rec.update(extra)
    return rec


def benchmark_model(
    source: ModelSource, proto, devices: dict, config: BenchmarkConfig, progress: Progress
) -> list[dict]:
    """All backends on one loaded ONNX model; a failing driver gives an error row, not an exception."""
    from mlts.convert import convert
    from mlts.runtime.session import Session

    entry = _zoo_entry(source)
    if entry is not None and entry.recurrent:
        from mlts.bench.speech_runner import benchmark_recurrent

        return benchmark_recurrent(source, entry, proto, devices, config, progress)
    conv = convert(proto)
    specs = [(t.shape, t.dtype, t.scale, t.zero_point) for t in conv.inputs]
    feeds = make_inputs(specs, config.inputs, seed=config.seed)
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)
    expected = [reference.run(f) for f in feeds]
    quantized = bool(conv.outputs) and all(t.dtype in ("uint8", "int8") for t in conv.outputs)
    if quantized:
        units = QUANT_TOLERANCE_UNITS_MOBILENET if "mobilenet" in source.name else QUANT_TOLERANCE_UNITS
        scales = [t.scale for t in conv.outputs]

        def score(outputs: list) -> dict:
            return compare_quantized(outputs, expected, scales, units)

        float_check = _float_model_top1(source, conv, config, progress)
    else:

        def score(outputs: list) -> dict:
            return compare(outputs, expected)

        float_check = None

    rows: dict[str, dict] = {}
    for backend in backend_order(config, source.name, devices):
        if backend == "ref":
            progress(f"{source.name}: {reference.backend}")
            samples, _ = _timed(reference.run, feeds, config.warmup, config.iterations)
            rows[backend] = record(source.name, reference.backend, config, latency_ms=describe(samples))
            if float_check is not None:
                rows[backend]["quantization"] = float_check(expected)
            continue
        label = f"driver:{backend}"
        progress(f"{source.name}: {label}")
        try:
            session = Session(devices[backend], conv.model)
            try:
                samples, results = _timed(session.run, feeds, config.warmup, config.iterations)
                outputs = [session.run(f)[0] for f in feeds]
            finally:
                session.close()
        except HalError as e:
            rows[backend] = record(source.name, label, config, status="error", error=str(e))
            continue
        rows[backend] = record(
            source.name,
            label,
            config,
            latency_ms=describe(samples),
            driver_timing=timing_summary([r[1] for r in results]),
            accuracy=score(outputs),
        )
        if float_check is not None:
            rows[backend]["quantization"] = float_check(outputs)
    return [rows["ref"]] + [rows[d] for d in sorted(devices)]


def _zoo_entry(source: ModelSource):
    if source.zoo_name is None:
        return None
    from mlts.models import zoo

    return zoo.get(source.zoo_name)


def backend_order(config: BenchmarkConfig, name: str, devices: dict) -> list[str]:
    backends = ["ref"] + sorted(devices)
    random.Random(f"{config.seed}:{name}").shuffle(backends)
    return backends


def _float_model_top1(source: ModelSource, conv, config: BenchmarkConfig, progress: Progress):
    """For a quantized zoo model: a function giving a backend's top-1 agreement with the float model.

    The float model runs on onnxruntime over the float images that the
    quantized inputs were made from, so the figure is the top-1 agreement lost
    by quantizing (input quantization included). None for models without a
    float counterpart.
    """
    if source.zoo_name is None:
        return None
    from mlts.models import zoo

    float_name = zoo.get(source.zoo_name).float_name
    if float_name is None:
        return None
    progress(f"{source.name}: float model {float_name} on onnxruntime")
    float_ref = OnnxRuntimeReference(zoo.model_path(float_name).read_bytes(), config.threads)
    specs = [(t.shape, "float32") for t in conv.inputs]
    float_outputs = [float_ref.run(f)[0] for f in make_inputs(specs, config.inputs, seed=config.seed)]

    def check(outputs: list) -> dict:
        return {
            "float_model": float_name,
            "top1_agreement_with_float": top1_agreement([o[0] for o in outputs], float_outputs),
        }

    return check


def run_benchmark(
    sources: list[ModelSource], driver_specs: list, config: BenchmarkConfig, progress: Progress
) -> dict:
    """The whole benchmark; returns the results document (see docs/results-schema.md).

    Every model is loaded before any driver starts, so a bad model file fails
    the run at once instead of after the other models were measured.
    """
    from mlts.convert import load_model
    from mlts.runtime.discovery import open_device

    protos = [load_model(source.onnx_path()) for source in sources]
    devices = {}
    records: list[dict] = []
    try:
        for spec in driver_specs:
            progress(f"starting driver {spec.name}")
            devices[spec.name] = open_device(spec, in_process=config.in_process, threads=config.threads)
        for source, proto in zip(sources, protos, strict=True):
            records += benchmark_model(source, proto, devices, config, progress)
    finally:
        for dev in devices.values():
            dev.close()
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "benchmark",
        "environment": environment(config.threads),
        "config": {
            **asdict(config),
            "models": [s.name for s in sources],
            "drivers": [s.name for s in driver_specs],
        },
        "results": records,
    }
