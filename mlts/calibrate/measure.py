"""Measure the getCapabilities numbers of a driver: time and cost per call against onnxruntime's CPU run.

Per workload, onnxruntime's CPU provider runs first, then the driver (a
Session over the open device), with the same inputs (a few seeded sets,
cycled) and the same thread count. Each run is a time-based warm-up,
discarded, then a timed run (RunControl) bracketed by a cost meter (RAPL
energy or CPU time, see mlts.calibrate.energy). A workload's ratios:

    exec_time  = driver median latency / CPU median latency
    power_usage = driver cost per call  / CPU cost per call

A type's PerformanceInfo is the geometric mean of its workloads' ratios.
When the driver is declared to compute relaxed float32 models in float16
(`relaxed`), the float workloads also run with relaxComputationFloat32toFloat16
set, and their ratios (against the same float32 CPU run) give both
relaxed_scalar and relaxed_tensor. No workload exercises IF or WHILE. Entries
without a measured workload are listed as not measured, with the reason, and
never given a number. Noise makes the document "confident": false with a warning
for every run whose median 95% CI reaches beyond ±5% of the median and for
every type whose ratios differ by more than 2x.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.bench.inputs import make_inputs
from mlts.bench.memory import driver_pid
from mlts.bench.stats import describe
from mlts.bench.timing import RunControl
from mlts.calibrate.energy import Meter, default_meter
from mlts.calibrate.workloads import TENSOR_FLOAT32, CalibrationWorkload
from mlts.errors import InputError
from mlts.hal.capabilities_file import FORMAT, OPERAND_TYPE_NAMES, VERSION
from mlts.hal.errors import HalError
from mlts.runtime.qos_settings import DEFAULT_QOS, QosSettings

CI_LIMIT = 0.05  # a median's 95% CI may reach ±5% of it before the run counts as noisy
SPREAD_LIMIT = 2.0  # a type's ratios may differ by up to 2x before its mean counts as noisy
RELAXED_ENTRIES = ("relaxed_scalar", "relaxed_tensor")
CONTROL_FLOW_ENTRIES = ("if", "while")
#: Every operand type a capabilities document can speak of (the HAL's, without the OEM types).
CAPABILITY_TYPES = OPERAND_TYPE_NAMES

Log = Callable[[str], None]


class CalibrationError(InputError):
    """Calibration cannot produce a document (e.g. no workload could be measured)."""


@dataclass(frozen=True, slots=True)
class CalibrationConfig:
    """Run lengths, threads, how many distinct inputs are cycled, and what else to measure."""

    threads: int = 1
    warmup_s: float = 1.0
    duration_s: float = 3.0
    min_iterations: int = 10
    inputs: int = 4
    seed: int = 0
    in_process: bool = False
    relaxed: bool = False  # the driver computes relaxed float32 models in float16: measure that too
    # Priority, preference, deadlines and loop timeout of every session.
    qos: QosSettings = DEFAULT_QOS

    def quick(self) -> CalibrationConfig:
        """The same settings with the short runs: 0.2 s warm-up, 0.5 s and 5 calls timed."""
        return dataclasses.replace(self, warmup_s=0.2, duration_s=0.5, min_iterations=5)

    def to_json(self) -> dict[str, Any]:
        """The settings as the capabilities document records them (QoS by names)."""
        return {**dataclasses.asdict(self), "qos": self.qos.to_json()}


# ---------------------------------------------------------------- one timed run


def timed_run(fn: Callable[[int], object], config: CalibrationConfig, meter: Meter, pid: int | None) -> dict:
    """Warm up (discarded), then time calls under the meter; latency and cost figures of the timed part."""
    warm = RunControl(config.warmup_s, 0.0, 1, max_iterations=1).run(fn)
    stop = meter.start(pid)
    timed = RunControl(0.0, config.duration_s, config.min_iterations).run(fn)
    cost = stop()
    stats = describe(timed.samples, p99_wanted=False)
    med = stats["median"]
    lo, hi = stats["median_ci95"]
    return {
        "median_ms": med,
        "median_ci95_ms": [lo, hi],
        "ci_halfwidth_rel": max(med - lo, hi - med) / med if med > 0 else None,
        "ci_note": stats["median_ci95_note"],
        "samples": timed.iterations,
        "seconds": timed.duration_seconds,
        "warmup_calls": warm.warmup_iterations + warm.iterations,
        "cost": cost.total,
        "cost_parts": cost.parts,
        "cost_per_call": cost.total / timed.iterations,
    }


def ratio(driver: float, cpu: float) -> float | None:
    """driver / cpu, or None when that is not a finite number > 0 (a zero or missing measurement)."""
    if not (cpu > 0 and driver > 0):
        return None
    value = driver / cpu
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------- one workload


def workload_feeds(
    conv: Any, workload: CalibrationWorkload, config: CalibrationConfig
) -> list[list[np.ndarray]]:
    """`config.inputs` seeded input sets in the converted model's input order, of each input's kind
    (mlts.bench.inputs; a user's file: what its graph says of each input); zeros for `zero_inputs`."""
    from mlts.bench.inputs import InputSpec

    graph = {i.name: i for i in workload.user.inputs} if workload.user is not None else {}
    specs = [
        InputSpec(
            t.name,
            tuple(t.shape),
            np.dtype(t.dtype),
            t.scale,
            t.zero_point,
            getattr(graph.get(t.name), "role", ""),
            getattr(graph.get(t.name), "vocab", None),
        )
        for t in conv.inputs
    ]
    feeds = make_inputs(specs, config.inputs, seed=config.seed)
    for k, tensor in enumerate(conv.inputs):
        if tensor.name in workload.zero_inputs:
            for feed in feeds:
                feed[k] = np.zeros_like(feed[k])
    return feeds


def skipped(workload: CalibrationWorkload, reason: str, **runs: Any) -> dict:
    """The record of a workload that gave no ratios, with why."""
    return {**_identity(workload), "status": "skipped", "reason": " ".join(reason.split()), **runs}


def _identity(workload: CalibrationWorkload) -> dict:
    return {
        "workload": workload.name,
        "operand_type": workload.operand_type,
        "types": list(workload.types),
        "model": str(workload.path) if workload.path is not None else workload.zoo_name,
    }


def unsupported_reason(device: Any, model: Any) -> str | None:
    """Why the driver cannot run the whole model (operations it does not support), else None."""
    from mlts.hal.enums import OperationType, name_of_code

    operations = model.main.operations
    supported = device.getSupportedOperations(model)
    if len(supported) != len(operations):
        return f"getSupportedOperations gave {len(supported)} answers for {len(operations)} operations"
    missing = {
        name_of_code(OperationType, op.type) for op, ok in zip(operations, supported, strict=True) if not ok
    }
    return f"the driver does not support {', '.join(sorted(missing))}" if missing else None


def cpu_run(
    proto: Any,
    feeds: Sequence[list[np.ndarray]],
    config: CalibrationConfig,
    meter: Meter,
    conv: Any = None,
    user: Any = None,
) -> dict:
    """Time the model on its CPU reference with the configured thread count (timed_run): onnxruntime's
    CPU provider for ONNX, LiteRT (TFLite's kernels) for .tflite models.

    With `conv`, `feeds` are the converted model's inputs: onnxruntime gets them by name in its own
    types and shapes, with the user's fixed input values (`user`, a UserModel) added."""
    from mlts.bench.reference import OnnxRuntimeReference
    from mlts.bench.reference_choice import reference_for_model
    from mlts.bench.user_model import reference_feeds

    reference = reference_for_model(proto, config.threads)
    if conv is not None and isinstance(reference, OnnxRuntimeReference):
        feeds = reference_feeds(proto, reference.input_names, [t.name for t in conv.inputs], feeds, user)
    return timed_run(lambda i: reference.run(feeds[i % len(feeds)]), config, meter, None)


def driver_run(
    device: Any, model: Any, feeds: Sequence[list[np.ndarray]], config: CalibrationConfig, meter: Meter
) -> dict:
    """Prepare `model` on the device and time it (timed_run); the prepared model is always released."""
    from mlts.runtime.session import Session

    session = Session(device, model, qos=config.qos)
    try:
        return timed_run(lambda i: session.run(feeds[i % len(feeds)]), config, meter, driver_pid(device))
    finally:
        session.close()


def measure_workload(
    device: Any, workload: CalibrationWorkload, config: CalibrationConfig, meter: Meter, log: Log
) -> dict:
    """CPU and driver runs of one workload and their ratios; a workload that cannot run is skipped."""
    from mlts.convert import convert

    log(f"{workload.name} ({workload.operand_type}): converting")
    user = workload.user
    if user is not None and user.is_nnm:
        return skipped(
            workload,
            f"{workload.path} is an NN graph file (.nnm): the CPU baseline is onnxruntime, which runs ONNX "
            "models; calibrate with the ONNX file it was converted from",
        )
    try:
        proto = workload.load()
        if user is None:
            conv = convert(proto)
        else:
            conv = convert(proto, input_shapes=user.convert_shapes(), input_values=dict(user.values) or None)
    except (ValueError, OSError) as e:
        return skipped(workload, f"cannot load or convert the model: {e}")
    try:
        reason = unsupported_reason(device, conv.model)
    except HalError as e:
        return skipped(workload, f"getSupportedOperations failed: {e}")
    if reason is not None:
        return skipped(workload, reason)
    feeds = workload_feeds(conv, workload, config)
    log(f"{workload.name}: CPU reference run")
    try:
        runs = {"cpu": cpu_run(proto, feeds, config, meter, conv, user)}
    except Exception as e:  # onnxruntime and LiteRT raise their own exception types
        return skipped(workload, f"the CPU reference cannot run the model: {e}")
    log(f"{workload.name}: driver run")
    try:
        runs["driver"] = driver_run(device, conv.model, feeds, config, meter)
    except HalError as e:
        return skipped(workload, f"the driver failed to prepare or run it: {e}", **runs)
    record = workload_ratios(workload, runs)
    if config.relaxed and record["status"] == "ok" and TENSOR_FLOAT32 in workload.types:
        log(f"{workload.name}: relaxed driver run")
        add_relaxed(record, device, conv.model, feeds, config, meter)
    return record


def workload_ratios(workload: CalibrationWorkload, runs: dict) -> dict:
    """The record of a workload with a CPU and a driver run: the runs and the exec_time/power ratios."""
    execution = ratio(runs["driver"]["median_ms"], runs["cpu"]["median_ms"])
    power = ratio(runs["driver"]["cost_per_call"], runs["cpu"]["cost_per_call"])
    if execution is None or power is None:
        return skipped(workload, "a median or a cost per call was 0: no ratio", **runs)
    return {**_identity(workload), "status": "ok", **runs, "exec_time_ratio": execution, "power_ratio": power}


def add_relaxed(
    record: dict,
    device: Any,
    model: Any,
    feeds: Sequence[list[np.ndarray]],
    config: CalibrationConfig,
    meter: Meter,
) -> None:
    """Run the model again with relaxComputationFloat32toFloat16 set; its ratios, or "relaxed_error"."""
    relaxed = dataclasses.replace(model, relax_computation_float32_to_float16=True)
    try:
        run = driver_run(device, relaxed, feeds, config, meter)
    except HalError as e:
        record["relaxed_error"] = " ".join(f"the driver failed to prepare or run it: {e}".split())
        return
    record["relaxed_driver"] = run
    execution = ratio(run["median_ms"], record["cpu"]["median_ms"])
    power = ratio(run["cost_per_call"], record["cpu"]["cost_per_call"])
    if execution is None or power is None:
        record["relaxed_error"] = "a median or a cost per call was 0: no ratio"
        return
    record["relaxed_exec_time_ratio"] = execution
    record["relaxed_power_ratio"] = power


# ---------------------------------------------------------------- per type


def geometric_mean(values: Sequence[float]) -> float:
    """exp(mean(log v)) of values > 0."""
    if not values or any(not (v > 0) for v in values):
        raise ValueError(f"a geometric mean needs values > 0, got {list(values)}")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def entry_records(records: Sequence[dict]) -> dict[str, list[tuple[dict, str]]]:
    """The measured records behind each capabilities entry, with the ratio prefix ("" or "relaxed_") to read."""
    out: dict[str, list[tuple[dict, str]]] = {}
    for rec in records:
        if rec["status"] != "ok":
            continue
        for t in rec["types"]:
            out.setdefault(t, []).append((rec, ""))
        if "relaxed_exec_time_ratio" in rec:
            for entry in RELAXED_ENTRIES:
                out.setdefault(entry, []).append((rec, "relaxed_"))
    return out


def entry_spread(rows: list[tuple[dict, str]]) -> dict:
    """Workloads, min/max/geometric mean of each ratio and the widest median CI of the runs behind one entry."""
    out: dict[str, Any] = {"workloads": [rec["workload"] for rec, _ in rows]}
    for key, field in (("exec_time", "exec_time_ratio"), ("power_usage", "power_ratio")):
        values = [rec[prefix + field] for rec, prefix in rows]
        out[key] = {"min": min(values), "max": max(values), "geometric_mean": geometric_mean(values)}
    widths = [
        rec[run]["ci_halfwidth_rel"]
        for rec, prefix in rows
        for run in ("cpu", "relaxed_driver" if prefix else "driver")
    ]
    out["max_ci_halfwidth_rel"] = max(widths)
    return out


def summarise(records: Sequence[dict], config: CalibrationConfig) -> dict:
    """capabilities, not_measured (with reasons) and spread from the workload records."""
    spread = {entry: entry_spread(rows) for entry, rows in entry_records(records).items()}

    def perf(entry: str) -> dict | None:
        if entry not in spread:
            return None
        s = spread[entry]
        return {
            "exec_time": s["exec_time"]["geometric_mean"],
            "power_usage": s["power_usage"]["geometric_mean"],
        }

    operand = {t: perf(t) for t in CAPABILITY_TYPES if t in spread}
    capabilities = {
        "relaxed_scalar": perf("relaxed_scalar"),
        "relaxed_tensor": perf("relaxed_tensor"),
        "operand_performance": operand,
        "if": perf("if"),
        "while": perf("while"),
    }
    reasons = not_measured_reasons(records, set(spread), config)
    return {
        "capabilities": capabilities,
        "not_measured": list(reasons),
        "not_measured_reasons": reasons,
        "spread": spread,
    }


def not_measured_reasons(
    records: Sequence[dict], measured: set[str], config: CalibrationConfig
) -> dict[str, str]:
    """Why each entry without a number has none, in the HAL's order (types, relaxed, if, while)."""
    tried: dict[str, list[str]] = {}
    for rec in records:
        for t in rec["types"]:
            tried.setdefault(t, []).append(f"{rec['workload']}: {rec.get('reason', 'no ratio')}")
    out: dict[str, str] = {}
    for t in CAPABILITY_TYPES:
        if t in measured:
            continue
        out[t] = (
            "every workload was skipped (" + "; ".join(tried[t]) + ")"
            if t in tried
            else "no workload of this type was measured"
        )
    relaxed_errors = [f"{r['workload']}: {r['relaxed_error']}" for r in records if "relaxed_error" in r]
    if not config.relaxed:
        relaxed_reason = (
            "not requested: the driver is not declared to compute relaxed float32 models in float16"
        )
    elif relaxed_errors:
        relaxed_reason = "every relaxed run failed (" + "; ".join(relaxed_errors) + ")"
    else:
        relaxed_reason = "relaxed computation was requested but no float workload was measured"
    for entry in RELAXED_ENTRIES:
        if entry not in measured:
            out[entry] = relaxed_reason
    for entry in CONTROL_FLOW_ENTRIES:
        if entry not in measured:
            out[entry] = (
                "every workload was skipped (" + "; ".join(tried[entry]) + ")"
                if entry in tried
                else f"no {entry.upper()} workload was measured (if_select, while_refine)"
            )
    return out


def noise_warnings(records: Sequence[dict], spread: dict) -> list[str]:
    """One line per noisy run (median CI beyond ±5%) and per entry whose ratios differ by more than 2x."""
    out = []
    for rec in records:
        for key in ("cpu", "driver", "relaxed_driver"):
            run = rec.get(key)
            if run is not None and (run["ci_halfwidth_rel"] or 0.0) > CI_LIMIT:
                out.append(
                    f"{rec['workload']} on {key.replace('_', ' ')}: the median's 95% CI reaches "
                    f"±{100 * run['ci_halfwidth_rel']:.1f}% of it (limit ±{100 * CI_LIMIT:.0f}%, "
                    f"{run['samples']} calls); close other programs, pin the CPU frequency or time longer runs"
                )
    for entries, s in _distinct(spread):
        for key in ("exec_time", "power_usage"):
            lo, hi = s[key]["min"], s[key]["max"]
            if hi > SPREAD_LIMIT * lo:
                out.append(
                    f"{entries}: {key} ratios differ by {hi / lo:.1f}x across {', '.join(s['workloads'])} "
                    f"({lo:.3g} to {hi:.3g}); one number hides that: check the slow workload or calibrate on "
                    "workloads like your models"
                )
    return out


def _distinct(spread: dict) -> list[tuple[str, dict]]:
    """Entries with the same spread (FLOAT32 beside TENSOR_FLOAT32, the two relaxed ones) named together."""
    groups: list[tuple[list[str], dict]] = []
    for entry, s in spread.items():
        for names, other in groups:
            if other == s:
                names.append(entry)
                break
        else:
            groups.append(([entry], s))
    return [(", ".join(names), s) for names, s in groups]


# ---------------------------------------------------------------- the document


def calibrate_device(
    device: Any,
    driver_name: str,
    workloads: Sequence[CalibrationWorkload],
    config: CalibrationConfig,
    *,
    meter: Meter | None = None,
    log: Log | None = None,
    environment: dict | None = None,
) -> dict:
    """The capabilities document (common format plus measurements, spread, warnings) for an open device.

    CalibrationError when no workload could be measured at all.
    """
    meter = meter if meter is not None else default_meter()
    log = log or (lambda message: None)
    records = [measure_workload(device, w, config, meter, log) for w in workloads]
    if not any(r["status"] == "ok" for r in records):
        why = "; ".join(f"{r['workload']}: {r['reason']}" for r in records) or "no workloads were given"
        raise CalibrationError(f"no workload could be measured on {driver_name}: {why}")
    summary = summarise(records, config)
    warnings = noise_warnings(records, summary["spread"])
    return {
        "format": FORMAT,
        "version": VERSION,
        "driver": driver_name,
        "driver_version": device.getVersionString(),
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "power_source": meter.source,
        "capabilities": summary["capabilities"],
        "not_measured": summary["not_measured"],
        "not_measured_reasons": summary["not_measured_reasons"],
        "confident": not warnings,
        "warnings": warnings,
        "cost_unit": meter.unit,
        "settings": config.to_json(),
        "measurements": records,
        "spread": summary["spread"],
        "environment": environment or {},
    }


def calibrate(
    spec: Any,
    workloads: Sequence[CalibrationWorkload],
    config: CalibrationConfig,
    *,
    meter: Meter | None = None,
    log: Log | None = None,
    environment: dict | None = None,
) -> dict:
    """Start the driver of `spec` (a DriverSpec), calibrate it (calibrate_device) and stop it."""
    from mlts.runtime.discovery import open_device

    device = open_device(spec, in_process=config.in_process, threads=config.threads)
    try:
        return calibrate_device(
            device, spec.name, workloads, config, meter=meter, log=log, environment=environment
        )
    finally:
        device.close()
