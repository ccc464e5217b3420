"""The records of one benchmark row (one model × backend) and their parts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mlts.records import _json as j
from mlts.records.endpoint import Endpoint
from mlts.records.stats import Stats, stats_or_not_measured

STATUSES = ("ok", "error")
TOPK = ("top1", "top2", "top3", "top4", "top5")
COMPILE_TIMINGS = ("without_cache", "save_to_cache", "prepare_from_cache")
STEP_MODES = ("step-by-step", "whole-sequence")


@dataclass(frozen=True)
class Warmup(j.Record):
    """Untimed calls run first and how long they took (s); the time-based warm-up asked for."""

    iterations: int = j.value(j.count)
    seconds: float = j.value(j.number)
    target_seconds: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    # What ended it: "bound" (target_seconds passed) or "stable" (the early-stop rule, stop_rule).
    stopped: str | None = j.value(j.one_of(("bound", "stable")), default=None, omit=True)
    stop_rule: dict | None = j.value(j.nullable(j.obj), default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class Run(j.Record):
    """The timed run and its stopping rule."""

    iterations: int = j.value(j.count)
    seconds: float = j.value(j.number)
    min_seconds: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    min_iterations: int | None = j.value(j.nullable(j.count), default=None, omit=True)
    # What ended it: "bound" (the limits above) or "precise" (the early-stop rule, stop_rule), the
    # median's 95% interval at the end (its farther end from the median, % of the median) and how
    # often the rule looked.
    stopped: str | None = j.value(j.one_of(("bound", "precise")), default=None, omit=True)
    stop_rule: dict | None = j.value(j.nullable(j.obj), default=None, omit=True)
    ci95_percent: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    checks: int | None = j.value(j.count, default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class Dataset(j.Record):
    name: str | None = j.value(j.text, default=None, omit=True)
    size: int | None = j.value(j.nullable(j.count), default=None, omit=True)
    labels: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class Memory(j.Record):
    """Peak resident memory in MiB of the client and the driver process; null where not measured."""

    client_peak_rss: float | None = j.value(j.nullable(j.number), default=None)
    driver_peak_rss: float | None = j.value(j.nullable(j.number), default=None)
    method: str | None = j.value(j.text, default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class Compilation(j.Record):
    """MLTS's three compilation timings (ms statistics, or null) and the cache they wrote."""

    without_cache: Stats | None = j.value(j.nullable(j.record_check(Stats)))
    save_to_cache: Stats | None = j.value(j.nullable(j.record_check(Stats)))
    prepare_from_cache: Stats | None = j.value(j.nullable(j.record_check(Stats)))
    cache_size_bytes: int | None = j.value(j.nullable(j.count), default=None, omit=True)
    cache_files: dict | None = j.value(j.obj, default=None, omit=True)
    note: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    # The early-stop rule of the three timings (mlts.bench.stopping), null when they ran to their bounds.
    stop_rule: dict | None = j.value(j.nullable(j.obj), default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class DriverTiming(j.Record):
    """The driver's own Timing over the timed calls: µs statistics, or "not measured", per field."""

    time_on_device: Stats | str = j.value(stats_or_not_measured)
    time_in_driver: Stats | str = j.value(stats_or_not_measured)
    extra: dict = j.extra()


@dataclass(frozen=True)
class DriverQuality(j.Record):
    """A driver row's quality figures (mlts.bench.driver_quality): its first execution against the
    steady median, latency with MeasureTiming YES and NO, the driver process's CPU time per execution
    and its resident memory after preparation and at peak while executing; null where not measured."""

    first_execution_ms: float | None = j.value(j.nullable(j.number), default=None)
    steady_median_ms: float | None = j.value(j.nullable(j.number), default=None)
    timing_on_median_ms: float | None = j.value(j.nullable(j.number), default=None)
    timing_off_median_ms: float | None = j.value(j.nullable(j.number), default=None)
    timing_pairs: int | None = j.value(j.nullable(j.count), default=None)
    driver_cpu_ms_per_execution: float | None = j.value(j.nullable(j.number), default=None)
    driver_cpu_share: float | None = j.value(j.nullable(j.number), default=None)
    driver_cpu_executions: int | None = j.value(j.nullable(j.count), default=None)
    driver_rss_after_prepare_mb: float | None = j.value(j.nullable(j.number), default=None)
    driver_rss_peak_execution_mb: float | None = j.value(j.nullable(j.number), default=None)
    method: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    extra: dict = j.extra()

    @property
    def first_vs_steady(self) -> float | None:
        """The first execution's time over the steady median (1.0: no first-call cost)."""
        if self.first_execution_ms is None or not self.steady_median_ms:
            return None
        return self.first_execution_ms / self.steady_median_ms

    @property
    def timing_overhead_ms(self) -> float | None:
        """What measuring the Timing costs per execution: the YES median minus the NO one (may be < 0)."""
        if self.timing_on_median_ms is None or self.timing_off_median_ms is None:
            return None
        return self.timing_on_median_ms - self.timing_off_median_ms

    @property
    def timing_overhead(self) -> float | None:
        """That cost relative to the NO median (0.05: 5% slower with timing)."""
        cost = self.timing_overhead_ms
        if cost is None or not self.timing_off_median_ms:
            return None
        return cost / self.timing_off_median_ms


@dataclass(frozen=True)
class Retries(j.Record):
    """TRANSIENT errors retried by the runtime, and every error status seen, by name and by class."""

    retries: int = j.value(j.count, default=0)
    errors: dict[str, int] = j.value(j.map_of(j.count), default={})
    error_classes: dict[str, int] = j.value(j.map_of(j.count), default={})
    extra: dict = j.extra()

    @property
    def total_errors(self) -> int:
        return sum(self.errors.values())


@dataclass(frozen=True)
class Violation(j.Record):
    """A broken accuracy rule: the metric, its value and the limit it broke, and the sentence saying so.

    Version 2 files stored only the sentence; read from them, metric, value and limit are null.
    """

    message: str = j.value(j.text)
    metric: str | None = j.value(j.nullable(j.text), default=None)
    value: float | None = j.value(j.nullable(j.signed), default=None)
    limit: float | None = j.value(j.nullable(j.signed), default=None)
    extra: dict = j.extra()

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Violation:
        if isinstance(data, str):
            return cls(message=data)
        if not isinstance(data, dict):
            j.fail(where, f"expected a string or an object, got {j.got(data)}")
        return j.decode(cls, data, where)

    def to_json(self) -> dict:
        return j.encode_fields(self)

    def masked(self) -> str:
        """The message with its decimal numbers masked: the same rule broken by another value reads the same."""
        return re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "#", self.message)


@dataclass(frozen=True)
class VerdictCheck(j.Record):
    """One condition of the whole-network verdict: `value` must not exceed `limit` (or reach `limit`, for
    agreements, when `at_least`)."""

    metric: str = j.value(j.text)
    value: float | None = j.value(j.nullable(j.signed))
    limit: float = j.value(j.signed)
    passed: bool = j.value(j.boolean, key="pass")
    at_least: bool = j.value(j.boolean, default=False)
    extra: dict = j.extra()


@dataclass(frozen=True)
class Verdict(j.Record):
    """The whole-network accuracy verdict of a driver row against golden and the reference backend."""

    passed: bool = j.value(j.boolean, key="pass")
    profile: str = j.value(j.text)
    rule: str = j.value(j.text)
    checks: tuple[VerdictCheck, ...] = j.value(j.list_of(j.record_check(VerdictCheck)))
    # Which rule judged the row ("classifier-top1", "dense-error", "quant8-rms", ...) and what the first
    # output is (mlts.bench.output_kind); absent in results written before they were recorded.
    rule_name: str | None = j.value(j.text, default=None, omit=True)
    output_kind: str | None = j.value(j.text, default=None, omit=True)
    extra: dict = j.extra()

    def failures(self) -> list[VerdictCheck]:
        return [c for c in self.checks if not c.passed]


@dataclass(frozen=True)
class Metric(j.Record):
    """MLTS's speech metrics: PhoneErrorRate or MelCepLogF0 (null log_f0_rms: no frame voiced in both)."""

    name: str | None = j.value(j.text, default=None, omit=True)
    phone_error_rate: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    mel_cep_distortion: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    log_f0_rms: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    ok: bool | None = j.value(j.boolean, default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class OutputErrors(j.Record):
    mse: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    max_abs_error: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    extra: dict = j.extra()


@dataclass(frozen=True)
class Evaluator(j.Record):
    """One accuracy evaluator's figures (topk, vs_golden, vs_reference); readers skip what they do not know."""

    n: int | None = j.value(j.count, default=None, omit=True)
    labels: str | None = j.value(j.nullable(j.text), default=None, omit=True)
    top1: float | None = j.value(j.nullable(j.fraction), default=None, omit=True)
    top2: float | None = j.value(j.nullable(j.fraction), default=None, omit=True)
    top3: float | None = j.value(j.nullable(j.fraction), default=None, omit=True)
    top4: float | None = j.value(j.nullable(j.fraction), default=None, omit=True)
    top5: float | None = j.value(j.nullable(j.fraction), default=None, omit=True)
    top1_agreement: float | None = j.value(j.nullable(j.fraction), default=None, omit=True)
    mse: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    max_abs_error: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    golden_max_abs: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    cts_ratio: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    max_quant_deviation: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    rms_quant_deviation: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    output_scale: float | None = j.value(j.nullable(j.number), default=None, omit=True)
    cts_pass: bool | None = j.value(j.boolean, default=None, omit=True)
    reference_exact: bool | None = j.value(j.nullable(j.boolean), default=None, omit=True)
    tolerance: str | None = j.value(j.text, default=None, omit=True)
    metric: Metric | None = j.value(j.record_check(Metric), default=None, omit=True)
    outputs: dict[str, OutputErrors] | None = j.value(
        j.map_of(j.record_check(OutputErrors)), default=None, omit=True
    )
    extra: dict = j.extra()

    def topk(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in TOPK}

    def largest_output_error(self) -> float | None:
        """The largest max_abs_error over `outputs` (LSTM rows), else the evaluator's own."""
        if self.outputs:
            found = [o.max_abs_error for o in self.outputs.values() if o.max_abs_error is not None]
            return max(found) if found else None
        return self.max_abs_error


# Evaluators whose JSON is an object of figures; any other name is kept as it is.
accuracy_check = j.map_of(j.record_check(Evaluator))

# An ok row must have all of these (the nullable ones as null).
REQUIRED_OK = (
    "warmup",
    "run",
    "latency_ms",
    "accuracy",
    "validation_errors",
    "compilation",
    "driver_timing_us",
    "memory_mb",
)


@dataclass(frozen=True)
class BenchmarkRow(j.Record):
    """One model × backend: identity and status, then the measurements of an ok row (see docs/results-schema.md)."""

    model: str = j.value(j.text)
    backend: str = j.value(j.text)
    status: str = j.value(j.one_of(STATUSES))
    family: str | None = j.value(j.text, default=None, omit=True)
    execution: str | None = j.value(j.text, default=None, omit=True)
    error: str | None = j.value(j.text, default=None, omit=True)
    threads: int | None = j.value(j.count, default=None, omit=True)
    qos: dict | None = j.value(j.obj, default=None, omit=True)
    retries: Retries | None = j.value(j.record_check(Retries), default=None, omit=True)
    percentile_estimator: str | None = j.value(j.text, default=None, omit=True)
    mode: str | None = j.value(j.text, default=None, omit=True)
    sequences: int | None = j.value(j.count, default=None, omit=True)
    steps: int | None = j.value(j.count, default=None, omit=True)
    dataset: Dataset | None = j.value(j.record_check(Dataset), default=None, omit=True)
    warmup: Warmup | None = j.value(j.record_check(Warmup), default=None, omit=True)
    run: Run | None = j.value(j.record_check(Run), default=None, omit=True)
    iterations: int | None = j.value(j.count, default=None, omit=True)
    warmup_steps: int | None = j.value(j.count, default=None, omit=True)
    warmup_calls_per_sequence: int | None = j.value(j.count, default=None, omit=True)
    latency_ms: Stats | None = j.value(j.record_check(Stats), default=None, omit=True)
    latency_unit: str | None = j.value(j.text, default=None, omit=True)
    sequence_latency_ms: Stats | None = j.value(j.record_check(Stats), default=None, omit=True)
    step_latency_ms: Stats | None = j.value(j.record_check(Stats), default=None, omit=True)
    driver_timing_us: DriverTiming | None = j.value(
        j.nullable(j.record_check(DriverTiming)), default=None, omit=True
    )
    accuracy: dict[str, Evaluator] | None = j.value(accuracy_check, default=None, omit=True)
    verdict: Verdict | None = j.value(j.record_check(Verdict), default=None, omit=True)
    validation_errors: tuple[Violation, ...] | None = j.value(
        j.list_of(j.record_check(Violation)), default=None, omit=True
    )
    compilation: Compilation | None = j.value(
        j.nullable(j.record_check(Compilation)), default=None, omit=True
    )
    memory_mb: Memory | None = j.value(j.record_check(Memory), default=None, omit=True)
    quantization: dict | None = j.value(j.obj, default=None, omit=True)
    reference_inexact: str | None = j.value(j.text, default=None, omit=True)
    # The CPU reference this row's vs_reference compares against (the reference rows: their own framework).
    reference: str | None = j.value(j.text, default=None, omit=True)
    # Why a model has no onnxruntime reference row (an .nnm file is no ONNX model).
    reference_unavailable: str | None = j.value(j.text, default=None, omit=True)
    extensions: tuple[str, ...] | None = j.value(j.texts, default=None, omit=True)
    harness_overhead: dict | None = j.value(j.nullable(j.obj), default=None, omit=True)
    driver_quality: DriverQuality | None = j.value(
        j.nullable(j.record_check(DriverQuality)), default=None, omit=True
    )
    profile: dict | None = j.value(j.obj, default=None, omit=True)
    selection: str | None = j.value(j.text, default=None, omit=True)
    partition: dict | None = j.value(j.obj, default=None, omit=True)
    partitioned_models: int | None = j.value(j.count, default=None, omit=True)
    device_memory: dict | None = j.value(j.obj, default=None, omit=True)
    endpoint: Endpoint | None = j.value(j.record_check(Endpoint), default=None, omit=True)
    extra: dict = j.extra()

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> BenchmarkRow:
        source = j.obj(data, where)
        for key in ("model", "backend", "status"):
            if key not in source:
                j.fail(j.at(where, key), "missing")
        j.text(source["model"], j.at(where, "model"))
        j.text(source["backend"], j.at(where, "backend"))
        status = j.one_of(STATUSES)(source["status"], j.at(where, "status"))
        if status == "error" and "error" not in source:
            j.fail(j.at(where, "error"), "missing (error rows need it)")
        if status == "ok":
            for key in REQUIRED_OK:
                if key not in source:
                    j.fail(j.at(where, key), "missing (ok rows need it)")
        return j.decode(cls, source, where)

    def to_json(self) -> dict:
        out = j.encode_fields(self)
        # Nullable keys an ok row always has: written as null rather than left out.
        if self.ok:
            for key in ("compilation", "driver_timing_us"):
                out.setdefault(key, None)
        return out

    # --- what readers ask ------------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def key(self) -> tuple[str, str]:
        return self.model, self.backend

    @property
    def is_reference(self) -> bool:
        return self.backend.startswith("cpu:")

    @property
    def step_wise(self) -> bool:
        return self.mode in STEP_MODES

    def evaluator(self, name: str) -> Evaluator | None:
        return (self.accuracy or {}).get(name)

    @property
    def per_call_latency(self) -> Stats | None:
        """The latency the report compares: per step for LSTM rows (whole-sequence ones divided by steps)."""
        if self.mode == "whole-sequence" and self.step_latency_ms is not None:
            return self.step_latency_ms
        return self.latency_ms

    @property
    def violations(self) -> tuple[Violation, ...]:
        return self.validation_errors or ()


def violation(
    message: str, metric: str | None = None, value: float | None = None, limit: float | None = None
) -> dict:
    """The JSON of a Violation, as producers write it into a row's validation_errors."""
    return Violation(message=message, metric=metric, value=value, limit=limit).to_json()


def violation_message(item: Any) -> str:
    """The sentence of a validation error in JSON: a version 3 object or a version 2 string."""
    return str(item.get("message", "")) if isinstance(item, dict) else str(item)
