"""Fault injection: a sample-all driver that crashes, hangs, slows down, lies, fails or leaks on request.

The crash and stress suites test themselves against this driver: every fault
has a known expected outcome. Faults come from the factory's keyword options
(`--option key=value` of the service) or, when no option is given, from the
environment variable MLTS_FAULT (`key=value,key=value`). Without faults the
driver behaves exactly like sample-all. docs/faulty-driver.md lists the options.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import math
import os
import random
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn

import numpy as np

from driver.burst import SampleBurst
from driver.device import SampleDevice, SamplePreparedModel, Variant
from driver.faulty_busy import busy_execution
from driver.faulty_conformance import UnvalidatedPreparedModel, has_operation, unstable, unvalidated
from driver.operands import dtype_of, pool_view
from mlts.hal import qos
from mlts.hal.enums import (
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperandType,
    OperationType,
    Priority,
)
from mlts.hal.errors import HalError
from mlts.hal.interface import Buffer, Burst, PreparedModel
from mlts.hal.types import (
    BufferDesc,
    BufferRole,
    Capabilities,
    ExecutionResult,
    Model,
    Operation,
    OptionalTimePoint,
    PerformanceInfo,
    Request,
)

log = logging.getLogger("driver.faulty")

ENV_VAR = "MLTS_FAULT"
#: The HAL methods whose calls are counted (1-based, per process) and may carry a fault.
COUNTED_METHODS = (
    "getSupportedOperations",
    "prepareModel",
    "prepareModelFromCache",
    "executeSynchronously",
    "configureExecutionBurst",
)
#: The calls whose results `wrong` may spoil: one execution, or every execution of one prepared model.
WRONG_METHODS = ("prepareModel", "prepareModelFromCache", "executeSynchronously")
CRASH_KINDS = ("segv", "abort", "exit")
#: The driver options that break its priority handling (flags, 0 or 1; see SampleFaulty).
PRIORITY_FAULTS = ("ignore_priority", "no_preemption", "client_priority")
#: The status a `crash=exit` driver exits with.
EXIT_STATUS = 3
_MIB = 1 << 20


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True, slots=True)
class CallPoint:
    """The n-th call (1-based, counted per process) of one HAL method."""

    method: str
    n: int

    def __str__(self) -> str:
        return f"{self.method} call {self.n}"


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults to inject; the defaults inject none."""

    crash: str | None = None
    crash_at: CallPoint | None = None
    crash_rate: float = 0.0
    hang: CallPoint | None = None
    slow_ms: float = 0.0
    slow_method: str | None = None  # None: every counted method
    wrong: CallPoint | None = None
    wrong_always: bool = False
    error: ErrorStatus | None = None
    error_at: CallPoint | None = None
    error_rate: float = 0.0
    leak_mb: float = 0.0
    output_offset: float = 0.0  # added to every output value (quantized outputs: rounded, in units)
    signed_offset: int = (
        0  # units added to every TENSOR_QUANT8_ASYMM_SIGNED output (signed kernels that drift)
    )
    seed: int = 0
    busy_us: float | None = None  # executions only busy-wait this long, no model work (0: empty ones)
    busy_every: int = 1  # with busy_us: executions 1, N+1, 2N+1, ... busy-wait, the others are empty
    # Conformance faults (what `mlts validate` must catch).
    skip_validation: bool = False
    wrong_op: int | None = None  # an OperationType code
    unstable_capabilities: bool = False
    ignore_deadlines: bool = False
    token_cache: bool = False
    burst_error: ErrorStatus | None = None  # executions through the driver's burst object fail so
    # A driver whose compiler shares the device with its executions: while a compilation runs, every
    # execution takes this many milliseconds longer.
    compile_contention_ms: float = 0.0

    def describe(self) -> str:
        """The fields that differ from no faults, as `name=value` pairs, or 'no faults'."""
        idle = FaultPlan()
        changed = [
            f"{f.name}={_option_text(getattr(self, f.name))}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(idle, f.name)
        ]
        return " ".join(changed) or "no faults"


def _option_text(value: object) -> str:
    """A plan field's value as an option would spell it."""
    if isinstance(value, CallPoint):
        return f"{value.method}:{value.n}"
    if isinstance(value, ErrorStatus):
        return value.name
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


def _call_point(key: str, text: str, methods: Sequence[str] = COUNTED_METHODS) -> CallPoint:
    method, sep, count = text.partition(":")
    if not sep or method not in methods or not (count.isascii() and count.isdigit()) or int(count) < 1:
        raise ValueError(
            f"{key}={text!r} must be METHOD:N with METHOD one of {', '.join(methods)} and N a count from 1"
        )
    return CallPoint(method, int(count))


def _number(key: str, text: str, low: float, high: float, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # also rejects nan
        raise ValueError(f"{key}={text!r} must be {what}")
    return value


def _choice(key: str, text: str, choices: Sequence[str]) -> str:
    if text not in choices:
        raise ValueError(f"{key}={text!r} must be one of {', '.join(choices)}")
    return text


def _crash(key: str, text: str) -> dict[str, Any]:
    return {"crash": _choice(key, text, CRASH_KINDS)}


def _crash_at(key: str, text: str) -> dict[str, Any]:
    return {"crash_at": _call_point(key, text)}


def _rate(field: str) -> Callable[[str, str], dict[str, Any]]:
    return lambda key, text: {field: _number(key, text, 0.0, 1.0, "a probability between 0 and 1")}


def _hang(key: str, text: str) -> dict[str, Any]:
    return {"hang": _call_point(key, text)}


def _slow_ms(key: str, text: str) -> dict[str, Any]:
    return {"slow_ms": _number(key, text, 0.0, 3_600_000.0, "milliseconds between 0 and 3600000")}


def _slow_method(key: str, text: str) -> dict[str, Any]:
    return {"slow_method": _choice(key, text, COUNTED_METHODS)}


def _wrong(key: str, text: str) -> dict[str, Any]:
    if text == "always":
        return {"wrong_always": True}
    try:
        return {"wrong": _call_point(key, text, WRONG_METHODS)}
    except ValueError:
        raise ValueError(
            f"{key}={text!r} must be 'always' or METHOD:N with METHOD one of {', '.join(WRONG_METHODS)}"
        ) from None


def _error(key: str, text: str) -> dict[str, Any]:
    names = [s.name for s in ErrorStatus if s != ErrorStatus.NONE]
    return {"error": ErrorStatus[_choice(key, text, names)]}


def _burst_error(key: str, text: str) -> dict[str, Any]:
    names = [s.name for s in ErrorStatus if s != ErrorStatus.NONE]
    return {"burst_error": ErrorStatus[_choice(key, text, names)]}


def _error_at(key: str, text: str) -> dict[str, Any]:
    return {"error_at": _call_point(key, text)}


def _leak_mb(key: str, text: str) -> dict[str, Any]:
    return {"leak_mb": _number(key, text, 0.0, 65536.0, "MiB between 0 and 65536")}


def _output_offset(key: str, text: str) -> dict[str, Any]:
    return {"output_offset": _number(key, text, -1000.0, 1000.0, "a number between -1000 and 1000")}


def _busy_us(key: str, text: str) -> dict[str, Any]:
    return {"busy_us": _number(key, text, 0.0, 10_000_000.0, "microseconds between 0 and 10000000")}


def _busy_every(key: str, text: str) -> dict[str, Any]:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 1000:
        raise ValueError(f"{key}={text!r} must be an integer between 1 and 1000")
    return {"busy_every": n}


def _compile_contention_ms(key: str, text: str) -> dict[str, Any]:
    return {"compile_contention_ms": _number(key, text, 0.0, 60_000.0, "milliseconds between 0 and 60000")}


def _flag(field: str) -> Callable[[str, str], dict[str, Any]]:
    def parse(key: str, text: str) -> dict[str, Any]:
        return {field: _choice(key, text, ("0", "1")) == "1"}

    return parse


def _wrong_op(key: str, text: str) -> dict[str, Any]:
    return {"wrong_op": int(OperationType[_choice(key, text, [op.name for op in OperationType])])}


def _signed_offset(key: str, text: str) -> dict[str, Any]:
    what = "a whole number between -255 and 255"
    value = _number(key, text, -255, 255, what)
    if value != int(value):
        raise ValueError(f"{key}={text!r} must be {what}")
    return {"signed_offset": int(value)}


def _seed(key: str, text: str) -> dict[str, Any]:
    try:
        return {"seed": int(text)}
    except ValueError:
        raise ValueError(f"{key}={text!r} must be an integer") from None


#: Option key -> parser of its value into FaultPlan fields.
_PARSERS: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "crash": _crash,
    "crash_at": _crash_at,
    "crash_rate": _rate("crash_rate"),
    "hang": _hang,
    "slow_ms": _slow_ms,
    "slow_method": _slow_method,
    "wrong": _wrong,
    "error": _error,
    "error_at": _error_at,
    "error_rate": _rate("error_rate"),
    "leak_mb": _leak_mb,
    "output_offset": _output_offset,
    "signed_offset": _signed_offset,
    "seed": _seed,
    "busy_us": _busy_us,
    "busy_every": _busy_every,
    "skip_validation": _flag("skip_validation"),
    "wrong_op": _wrong_op,
    "unstable_capabilities": _flag("unstable_capabilities"),
    "ignore_deadlines": _flag("ignore_deadlines"),
    "token_cache": _flag("token_cache"),
    "burst_error": _burst_error,
    "compile_contention_ms": _compile_contention_ms,
}
OPTION_KEYS = tuple(_PARSERS)


def _check_combination(options: Mapping[str, str]) -> None:
    """Options that only mean something together must come together."""
    needs = (
        ("crash", ("crash_at", "crash_rate"), "|".join(CRASH_KINDS)),
        ("error", ("error_at", "error_rate"), "STATUS"),
    )
    for kind, triggers, values in needs:
        has_trigger = any(t in options for t in triggers)
        if kind in options and not has_trigger:
            raise ValueError(f"{kind}={options[kind]!r} needs {' or '.join(triggers)} to say when")
        if has_trigger and kind not in options:
            raise ValueError(f"{' and '.join(t for t in triggers if t in options)} needs {kind}={values}")
    if "slow_method" in options and "slow_ms" not in options:
        raise ValueError("slow_method needs slow_ms=X")
    if "busy_every" in options and "busy_us" not in options:
        raise ValueError("busy_every needs busy_us=X")


def parse_options(options: Mapping[str, object], source: str = "option") -> FaultPlan:
    """The FaultPlan of `options` (values as text); ValueError with one line naming `source` if any is bad."""
    try:
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            raise ValueError(f"unknown fault option {unknown[0]!r}; known: {', '.join(OPTION_KEYS)}")
        texts = {key: str(value) for key, value in options.items()}
        values: dict[str, Any] = {}
        for key, text in texts.items():
            values.update(_PARSERS[key](key, text))
        _check_combination(texts)
    except ValueError as e:
        raise ValueError(f"sample-faulty: {source}: {e}") from None
    return FaultPlan(**values)


def parse_fault_text(text: str) -> dict[str, str]:
    """`key=value,key=value` (the MLTS_FAULT syntax) as a dict; ValueError with one line if malformed."""
    options: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"sample-faulty: {ENV_VAR}: {item!r} must look like key=value")
        if key in options:
            raise ValueError(f"sample-faulty: {ENV_VAR}: {key!r} is given twice")
        options[key] = value.strip()
    return options


def plan_from(options: Mapping[str, object], environ: Mapping[str, str] = os.environ) -> FaultPlan:
    """The plan of the factory's options or, when there are none, of the MLTS_FAULT variable."""
    if options:
        return parse_options(options, "option")
    return parse_options(parse_fault_text(environ.get(ENV_VAR, "")), ENV_VAR)


# ------------------------------------------------------------------ the faults


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()


def _set_handler(signum: int, handler: signal.Handlers) -> None:
    """Set a signal's disposition; only the main thread may, and a driver run in process may be elsewhere."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, handler)


def die(kind: str, point: CallPoint) -> NoReturn:
    """End this process the way `kind` says: a real SIGSEGV, SIGABRT, or exit status 3."""
    log.warning("injected fault: crash=%s at %s", kind, point)
    _flush_logs()
    if kind == "exit":
        os._exit(EXIT_STATUS)
    try:
        # A test oracle must not litter core files.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    if faulthandler.is_enabled():
        faulthandler.disable()
    if kind == "abort":
        os.abort()
    _set_handler(signal.SIGSEGV, signal.SIG_DFL)
    # To this very thread: a process-directed signal may be taken by another thread after kill returns.
    signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
    os._exit(128 + signal.SIGSEGV)  # not reached: the signal is delivered before pthread_kill returns


def hang_forever(point: CallPoint) -> NoReturn:
    """Never return; from the main thread SIGTERM and SIGINT are ignored first, so only SIGKILL ends it."""
    log.warning("injected fault: hang at %s", point)
    _flush_logs()
    _set_handler(signal.SIGTERM, signal.SIG_IGN)
    _set_handler(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def spoil(values: np.ndarray) -> None:
    """Overwrite `values` in place with results no tolerance check accepts.

    Floats become x + 1 + |x| (off by at least 1 and by more than 100 %);
    integers and quantized values get bit (width - 2) flipped (off by 64 units
    for 8-bit types); booleans are negated.
    """
    if values.dtype == np.bool_:
        np.logical_not(values, out=values)
    elif np.issubdtype(values.dtype, np.floating):
        values += 1 + np.abs(values)
    else:
        np.bitwise_xor(values, values.dtype.type(1 << (8 * values.dtype.itemsize - 2)), out=values)


def shift(values: np.ndarray, offset: float) -> None:
    """Add `offset` to `values` in place: a small, uniform error a tolerance may or may not accept.

    Floats get `offset` itself; integer and quantized values `round(offset)` units, saturated to the
    type's range (as a requantizing kernel would); booleans are left alone.
    """
    if values.dtype == np.bool_:
        return
    if np.issubdtype(values.dtype, np.floating):
        values += values.dtype.type(offset)
        return
    info = np.iinfo(values.dtype)
    shifted = np.clip(values.astype(np.int64) + round(offset), info.min, info.max)
    values[...] = shifted.astype(values.dtype)


def spoil_outputs(
    model: Model,
    request: Request,
    result: ExecutionResult,
    change: Callable[[np.ndarray], None] = spoil,
    only_type: int | None = None,
) -> None:
    """Spoil (or otherwise `change`) every output an execution of `model` wrote into the request's pools
    (of operand type `only_type`, when given)."""
    sub = model.main
    for k, (arg, shape) in enumerate(zip(request.outputs, result.output_shapes, strict=True)):
        if arg.has_no_value:
            continue
        if only_type is not None and sub.operands[sub.output_indexes[k]].type != only_type:
            continue
        dtype = dtype_of(sub.operands[sub.output_indexes[k]].type)
        count = math.prod(shape.dimensions)
        change(np.frombuffer(pool_view(request.pools, arg.location, f"output {k}"), dtype, count))


class FaultInjector:
    """Counts the calls of the counted methods and injects the plan's faults into them."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.calls = dict.fromkeys(COUNTED_METHODS, 0)
        # The k-th counted call uses the k-th draw of each generator, whatever the method.
        self._crash_draws = random.Random(f"{plan.seed}:crash")
        self._error_draws = random.Random(f"{plan.seed}:error")
        self._leaked: list[np.ndarray] = []
        self._lock = threading.Lock()

    def enter(self, method: str) -> CallPoint:
        """Count a call of `method` and inject what the plan holds for it; returns which call it is."""
        plan = self.plan
        with self._lock:
            self.calls[method] += 1
            point = CallPoint(method, self.calls[method])
            crash_drawn = plan.crash_rate > 0 and self._crash_draws.random() < plan.crash_rate
            error_drawn = plan.error_rate > 0 and self._error_draws.random() < plan.error_rate
        if plan.crash is not None and (crash_drawn or plan.crash_at == point):
            die(plan.crash, point)
        if plan.hang == point:
            hang_forever(point)
        if plan.slow_ms and plan.slow_method in (None, method):
            time.sleep(plan.slow_ms / 1000)
        if plan.error is not None and (error_drawn or plan.error_at == point):
            log.warning("injected fault: error=%s at %s", plan.error.name, point)
            raise HalError(plan.error, f"injected fault: {plan.error.name} at {point}")
        if plan.leak_mb and method == "executeSynchronously":
            self._leak()
        return point

    def spoils(self, point: CallPoint) -> bool:
        """Whether the results of call `point` (an execution or a preparation) are to be wrong."""
        return self.plan.wrong_always or self.plan.wrong == point

    def _leak(self) -> None:
        # np.full writes every byte, so every page of the block counts in the resident set.
        self._leaked.append(np.full(int(self.plan.leak_mb * _MIB), 0xA5, dtype=np.uint8))


# ------------------------------------------------------------------ the driver


def _supports_everything(model: Model, op: Operation) -> bool:
    return True


class Compilations:
    """How many preparations of one driver are in progress (for compile_contention_ms)."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    def running(self) -> bool:
        return self._count > 0


class FaultyBurst(Burst):
    """The sample driver's burst of a faulty model: its executions go through the fault injector (and,
    with `burst_error=STATUS`, fail with STATUS: proof that an execution came through the burst object
    the driver made, not through the model)."""

    def __init__(self, model: FaultyPreparedModel, inner: SampleBurst) -> None:
        self.model = model
        self.inner = inner

    @property
    def closed(self) -> bool:
        return self.inner.closed

    def execute(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: int | None = None,
    ) -> ExecutionResult:
        status = self.model.faults.plan.burst_error
        if status is not None:
            log.warning("injected fault: burst_error=%s", status.name)
            raise HalError(
                status, f"injected fault: {status.name} for an execution through the driver's burst"
            )
        if self.inner.closed:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "burst: the burst was released")
        return self.model.executeSynchronously(
            request, measure, deadline, loop_timeout_duration, kept=self.inner
        )

    def freeMemory(self, memory: object) -> None:
        self.inner.freeMemory(memory)

    def close(self) -> None:
        self.inner.close()


class FaultyPreparedModel(PreparedModel):
    """A sample prepared model whose executions go through the fault injector."""

    def __init__(
        self,
        inner: SamplePreparedModel,
        faults: FaultInjector,
        always_wrong: bool,
        compilations: Compilations | None = None,
    ) -> None:
        self.priority = inner.priority
        self.inner = inner
        self.faults = faults
        self.always_wrong = always_wrong
        self.compilations = compilations or Compilations()

    def executeSynchronously(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: int | None = None,
        *,
        kept: SampleBurst | None = None,
    ) -> ExecutionResult:
        point = self.faults.enter("executeSynchronously")
        plan = self.faults.plan
        if plan.ignore_deadlines:
            deadline = None
        if plan.compile_contention_ms and self.compilations.running():
            time.sleep(plan.compile_contention_ms / 1000)
        if plan.busy_us is not None:
            busy = plan.busy_us if (point.n - 1) % plan.busy_every == 0 else 0.0
            return busy_execution(self.inner.model, busy, measure, request)
        try:
            result = self.inner.executeSynchronously(
                request, measure, deadline, loop_timeout_duration, kept=kept
            )
        except HalError as e:
            if plan.skip_validation and e.status == ErrorStatus.INVALID_ARGUMENT:
                raise unvalidated(e) from None
            raise
        offset = plan.output_offset
        if offset:
            spoil_outputs(self.inner.model, request, result, lambda values: shift(values, offset))
        if plan.signed_offset:
            units = plan.signed_offset
            spoil_outputs(
                self.inner.model,
                request,
                result,
                lambda values: shift(values, units),
                OperandType.TENSOR_QUANT8_ASYMM_SIGNED,
            )
        if self.always_wrong or self.faults.spoils(point):
            log.warning("injected fault: wrong results at %s", point)
            spoil_outputs(self.inner.model, request, result)
        return result

    def configureExecutionBurst(self, *, polling_us: int | None = None) -> FaultyBurst:
        """The sample driver's burst (counted: `crash_at`, `hang`, `error_at` may name it)."""
        self.faults.enter("configureExecutionBurst")
        return FaultyBurst(self, self.inner.configureExecutionBurst(polling_us=polling_us))

    def close(self) -> None:
        self.inner.close()


class SampleFaulty(SampleDevice):
    """sample-all (same support rule and capabilities) with the faults its options or MLTS_FAULT ask for."""

    variant = Variant("sample-faulty", _supports_everything, Capabilities.uniform(PerformanceInfo(1.1, 1.1)))

    def __init__(self, **options: str) -> None:
        """Fault options (or MLTS_FAULT), plus the sample variants' `capabilities=PATH` and
        `max_memory_mb=N`, and the priority faults: `ignore_priority=1`, a driver that runs every model
        at MEDIUM, never preempting (what priority-stress must catch); `no_preemption=1`, one that
        reports its models' priorities (so executions queue in priority order) but never pauses a
        running execution; `client_priority=1`, one that preempts only the same client's executions,
        ignoring other clients' priorities (what mlts validate's behaviour suite must catch)."""
        own = ("capabilities", "max_memory_mb", *PRIORITY_FAULTS)
        faults = {k: v for k, v in options.items() if k not in own}
        self.faults = FaultInjector(plan_from(faults))
        flags = {}
        for key in PRIORITY_FAULTS:
            flags[key] = options.get(key, "0")
            if flags[key] not in ("0", "1"):
                raise ValueError(f"sample-faulty: option {key} must be 0 or 1, got {flags[key]!r}")
        super().__init__(**{k: v for k, v in options.items() if k in own[:2]})
        self.ignore_priority = flags["ignore_priority"] == "1"
        self._unstable: Capabilities | None = None
        self._by_token: dict[bytes, SamplePreparedModel] = {}
        self._token_lock = threading.Lock()
        self.compilations = Compilations()  # preparations in progress (compile_contention_ms)
        if flags["client_priority"] == "1":
            self.gate = qos.PriorityGate(qos.SCOPE_CLIENT)
        if self.ignore_priority or flags["no_preemption"] == "1":
            self.gate.enabled = False
        log.info("%s: %s", self.name, self.faults.plan.describe())

    def getCapabilities(self) -> Capabilities:
        if self.faults.plan.unstable_capabilities:
            if self._unstable is None:
                self._unstable = unstable(super().getCapabilities())
            return self._unstable
        return super().getCapabilities()

    def getSupportedOperations(self, model: Model) -> tuple[bool, ...]:
        self.faults.enter("getSupportedOperations")
        if self.faults.plan.skip_validation:
            return tuple(True for _ in model.main.operations)
        return super().getSupportedOperations(model)

    def prepareModel(
        self,
        model: Model,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority = Priority.MEDIUM,
        deadline: OptionalTimePoint = None,
        model_cache: Sequence[int] = (),
        data_cache: Sequence[int] = (),
        token: bytes = b"",
    ) -> PreparedModel:
        # compile_contention_ms: the whole call, an injected delay included, counts as compiling.
        with self.compilations.one():
            return self._prepare(model, preference, priority, deadline, model_cache, data_cache, token)

    def _prepare(
        self,
        model: Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline: OptionalTimePoint,
        model_cache: Sequence[int],
        data_cache: Sequence[int],
        token: bytes,
    ) -> PreparedModel:
        point = self.faults.enter("prepareModel")
        plan = self.faults.plan
        if self.ignore_priority:
            priority = Priority.MEDIUM
        if plan.ignore_deadlines:
            deadline = None
        try:
            inner = super().prepareModel(
                model, preference, priority, deadline, model_cache, data_cache, token
            )
        except HalError as e:
            if plan.skip_validation and e.status == ErrorStatus.INVALID_ARGUMENT:
                log.warning("injected fault: an invalid model accepted at %s", point)
                return UnvalidatedPreparedModel(e)
            raise
        if plan.token_cache and token:
            with self._token_lock:
                self._by_token[bytes(token)] = inner  # type: ignore[assignment]
        return self._wrap(inner, point)

    def prepareModelFromCache(
        self,
        model_cache: Sequence[int],
        data_cache: Sequence[int],
        token: bytes,
        deadline: OptionalTimePoint = None,
    ) -> PreparedModel:
        with self.compilations.one():
            return self._prepare_from_cache(model_cache, data_cache, token, deadline)

    def _prepare_from_cache(
        self, model_cache: Sequence[int], data_cache: Sequence[int], token: bytes, deadline: OptionalTimePoint
    ) -> PreparedModel:
        point = self.faults.enter("prepareModelFromCache")
        plan = self.faults.plan
        if plan.ignore_deadlines:
            deadline = None
        if plan.token_cache:
            with self._token_lock:
                known = self._by_token.get(bytes(token))
            if known is not None:
                log.warning("injected fault: prepared model served from memory by token at %s", point)
                twin = SamplePreparedModel(known.model, known.plan, self, Priority(known.priority))
                return self._wrap(twin, point)
        inner = super().prepareModelFromCache(model_cache, data_cache, token, deadline)
        return self._wrap(inner, point)

    def _wrap(self, inner: PreparedModel, point: CallPoint) -> FaultyPreparedModel:
        assert isinstance(inner, SamplePreparedModel)
        wrong = self.faults.spoils(point) or has_operation(inner.model, self.faults.plan.wrong_op)
        return FaultyPreparedModel(inner, self.faults, wrong, self.compilations)

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[PreparedModel],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> Buffer:
        # Roles name the wrapped models; the sample driver knows only what they wrap.
        inner = [p.inner if isinstance(p, FaultyPreparedModel) else p for p in prepared_models]
        return super().allocate(desc, inner, input_roles, output_roles)
