"""The sample driver's Device and PreparedModel, parameterised by a variant's support rule and capabilities."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from driver import cache, native
from driver._malloc import tune_allocator
from driver.budget import DEFAULT_EXECUTION_BYTES, MemoryBudget, constant_bytes, working_bytes
from driver.buffers import DEFAULT_BUDGET, BufferTracker, SampleBuffer, size_of
from driver.burst import SampleBurst
from driver.executor import Plan, prepare_operation
from driver.idle import MAX_IDLE_MS, IdleWatchdog
from driver.request_io import CACHED_RESULTS, IoCache, RequestIo
from mlts.hal import capabilities_file, deadlines, qos, validate, vlog
from mlts.hal import extensions as ext
from mlts.hal.buffer_use import bind_buffers, validate_memory_desc
from mlts.hal.enums import (
    SCALAR_TYPES,
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperationType,
    Priority,
    codes,
)
from mlts.hal.errors import HalError
from mlts.hal.interface import Buffer, Device, PreparedModel
from mlts.hal.operation_times import from_pairs
from mlts.hal.types import (
    BufferDesc,
    BufferRole,
    CacheFilesNeeded,
    Capabilities,
    ExecutionResult,
    Extension,
    Model,
    Operation,
    OptionalTimePoint,
    Request,
    Timing,
)

VERSION = "mlts-sample-1.3.0"

log = logging.getLogger("driver.cache")
caps_log = logging.getLogger("driver.capabilities")

#: The factory options (`--option key=value`) every sample variant accepts.
OPTION_KEYS = ("capabilities", "max_memory_mb", "buffer_budget", "max_execution_mb", "idle_release_ms")

#: The largest memory budget `max_memory_mb` accepts (1 TiB).
MAX_MEMORY_MB = 1 << 20

# A variant's rule: may this driver run operation `op` of `model` at all (before asking the kernel)?
SupportRule = Callable[[Model, Operation], bool]


@dataclass(frozen=True)
class Variant:
    name: str
    supports: SupportRule
    capabilities: Capabilities
    extensions: tuple[ext.ExtensionSpec, ...] = ()  # the vendor extensions it declares and runs


_check_deadline_before = deadlines.check_before
_perf_ns = time.perf_counter_ns
_rest = native.rest
_NOT_MEASURED = Timing()
_YES = MeasureTiming.YES
_UNMEASURED_KEY = (_NOT_MEASURED.time_on_device, _NOT_MEASURED.time_in_driver)


def _memory_option(text: str | None, name: str, key: str = "max_memory_mb") -> int | None:
    """Option `key` (MiB) in bytes (None: not given); ValueError naming the bad value."""
    if text is None:
        return None
    try:
        mb = float(text)
    except (TypeError, ValueError):
        mb = -1.0
    if not 0 < mb <= MAX_MEMORY_MB:
        raise ValueError(f"{name}: option {key} must be a number in (0, {MAX_MEMORY_MB}], got {text!r}")
    return int(mb * 1024 * 1024)


def _operation_name(code: int, model: Model) -> str:
    if code in codes(OperationType):
        return OperationType(code).name
    try:
        found = ext.resolve(model, code)
    except HalError:
        found = None
    return str(code) if found is None else f"{found[0]}:{found[1]}"


class SampleDevice(Device):
    """NumPy reference driver: its Variant says what it accepts and what it reports unless calibrated.

    Option `capabilities=PATH` names the file; without it the driver looks for
    <config dir>/capabilities/<name>.json (mlts.hal.capabilities_file.locate).
    Option `max_memory_mb=N` gives the driver a memory budget (driver.budget); `max_execution_mb=N`
    sets each execution's (default 1024).

    Executions of one client are ordered by their models' priorities: a running execution pauses at
    its next operation while a higher-priority execution of the same client runs (mlts.hal.qos).
    Option `idle_release_ms=N` lets a prepared model's kept workspaces and request layouts go once
    it has run nothing for N ms (driver.idle); 0, the default, keeps them.
    """

    variant: Variant

    def __init__(self, **options: str) -> None:
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            raise ValueError(
                f"{self.variant.name}: unknown option {unknown[0]!r}; known: {', '.join(OPTION_KEYS)}"
            )
        self.name = self.variant.name
        self._capabilities, self.capabilities_source = self._load_capabilities(options.get("capabilities"))
        self.budget = MemoryBudget(_memory_option(options.get("max_memory_mb"), self.name))
        #: Bytes of tensors one execution may hold at once, in all its subgraphs (driver.budget).
        self.execution_budget = (
            _memory_option(options.get("max_execution_mb"), self.name, "max_execution_mb")
            or DEFAULT_EXECUTION_BYTES
        )
        self.gate = qos.PriorityGate()
        self.buffers = BufferTracker(_budget(self.name, options.get("buffer_budget")))
        idle_ms = _idle_option(options.get("idle_release_ms"), self.name)
        #: Releases what idle prepared models keep between executions (driver.idle); None: kept.
        self.idle = IdleWatchdog(idle_ms / 1000) if idle_ms else None
        tune_allocator()

    def close(self) -> None:
        if self.idle is not None:
            self.idle.close()

    def _load_capabilities(self, explicit: str | None) -> tuple[Capabilities, capabilities_file.Source]:
        """The variant's defaults merged with the located capabilities file (read once); logs the source."""
        if explicit is not None and (not isinstance(explicit, str) or not explicit):
            raise ValueError(f"{self.name}: option capabilities needs a file path, got {explicit!r}")
        path = capabilities_file.locate(self.name, explicit)
        caps, source = capabilities_file.load_capabilities(path, self.name, self.variant.capabilities)
        level = logging.WARNING if source["error"] else logging.INFO
        caps_log.log(level, "%s: capabilities: %s", self.name, capabilities_file.describe_source(source))
        return caps, source

    def getCapabilities(self) -> Capabilities:
        return self._capabilities

    def getType(self) -> DeviceType:
        return DeviceType.CPU

    def getVersionString(self) -> str:
        return VERSION

    def getSupportedExtensions(self) -> tuple[Extension, ...]:
        return tuple(spec.to_hal() for spec in self.variant.extensions)

    def getNumberOfCacheFilesNeeded(self) -> CacheFilesNeeded:
        return CacheFilesNeeded(cache.NUM_MODEL_CACHE, cache.NUM_DATA_CACHE)

    def getSupportedOperations(self, model: Model) -> tuple[bool, ...]:
        validate.validate_model(model)
        result = []
        for index, op in enumerate(model.main.operations):
            ok = self.variant.supports(model, op)
            if ok:
                try:
                    prepare_operation(model, index, self.variant.extensions)
                except HalError:
                    ok = False
            result.append(ok)
        return tuple(result)

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
        validate.validate_execution_preference(preference)
        validate.validate_priority(priority)
        validate.validate_model(model)
        caching = cache.caching_requested(model_cache, data_cache, token, "prepareModel")
        _check_deadline_before(deadline, "prepareModel")
        self._check_supported(model)
        held = self._reserve(model, "prepareModel")
        started = _perf_ns()
        try:
            # The packed arrays are kept only for the cache; otherwise each goes once its kernel has
            # made what it reads (no copy of the weights beyond the model's and the kernels' own).
            plan = Plan(
                model,
                extensions=self.variant.extensions,
                progress=_abandon_at(deadline, "prepareModel"),
                keep_packed=caching,
            )
            plan.memory_budget = self.execution_budget
            _check_deadline_after(deadline, "prepareModel")
            if caching:
                self._save(model_cache[0], data_cache[0], token, plan, priority)
                plan.release_packed()
            plan.warm()  # the first execution's allocations and binding, done now (Plan.warm)
            _check_deadline_after(deadline, "prepareModel")
        except BaseException as e:
            self.budget.release(held)
            if isinstance(e, HalError):
                vlog.log("driver", "%s prepareModel failed: %s", self.name, e)
            raise
        vlog.log(
            "driver",
            "%s prepareModel: %d operations in %.3f ms (preference %s, priority %s, deadline %s%s)",
            self.name,
            len(model.main.operations),
            (_perf_ns() - started) / 1e6,
            ExecutionPreference(preference).name,
            Priority(priority).name,
            "none" if deadline is None else f"{(deadline - _now_ns()) / 1e6:.3f} ms ahead",
            ", cache written" if caching else "",
        )
        return SamplePreparedModel(model, plan, self, Priority(priority), held)

    def _reserve(self, model: Model, what: str) -> int:
        """The model's constants from the budget; PERSISTENT when model and working set can never fit."""
        self.budget.check_fits(constant_bytes(model) + working_bytes(model), f"{what}: the model")
        return self.budget.reserve(constant_bytes(model), f"{what}: the model's constants")

    def prepareModelFromCache(
        self,
        model_cache: Sequence[int],
        data_cache: Sequence[int],
        token: bytes,
        deadline: OptionalTimePoint = None,
    ) -> PreparedModel:
        """Rebuild a plan saved by prepareModel: every check of a fresh compile, packing skipped."""
        cache.caching_requested(model_cache, data_cache, token, "prepareModelFromCache")
        _check_deadline_before(deadline, "prepareModelFromCache")
        model, packed, priority = cache.load(model_cache[0], data_cache[0], token, VERSION, self.name)
        try:
            validate.validate_model(model)
            self._check_supported(model)
        except HalError as e:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"compilation cache: {e.message}") from None
        held = self._reserve(model, "prepareModelFromCache")
        try:
            try:
                plan = Plan(
                    model,
                    packed,
                    self.variant.extensions,
                    progress=_abandon_at(deadline, "prepareModelFromCache"),
                )
            except HalError as e:
                if e.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT:
                    raise
                raise HalError(ErrorStatus.GENERAL_FAILURE, f"compilation cache: {e.message}") from None
            plan.memory_budget = self.execution_budget
            plan.warm()
            _check_deadline_after(deadline, "prepareModelFromCache")
        except BaseException:
            self.budget.release(held)
            raise
        return SamplePreparedModel(model, plan, self, Priority(priority), held)

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[PreparedModel],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> Buffer:
        """A buffer for the roles; dimensions the roles leave open are set by its first write."""

        def model_of(prepared: object) -> Model | None:
            if (
                isinstance(prepared, SamplePreparedModel)
                and prepared.buffers is self.buffers
                and not prepared._closed.is_set()
            ):
                return prepared.model
            return None

        mdesc = validate_memory_desc(desc, prepared_models, input_roles, output_roles, model_of)
        capacity = 0
        if mdesc.operand.type in SCALAR_TYPES or (mdesc.dimensions and 0 not in mdesc.dimensions):
            capacity = size_of(mdesc.operand.type, mdesc.dimensions)
        client = qos.current_client()
        self.buffers.reserve(capacity, "allocate", client)
        try:
            return self.buffers.add(lambda token: SampleBuffer(self.buffers, token, mdesc, prepared_models))
        except BaseException:
            self.buffers.reserve(-capacity, "allocate", client)
            raise

    def _check_supported(self, model: Model) -> None:
        """Every operation within the variant's rule; extension operands and operations validated here,
        since the runtime cannot validate them."""
        ext.check_operand_types(model, self.variant.extensions)
        for index, op in enumerate(model.main.operations):
            if not self.variant.supports(model, op):
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"{self.name} does not support operation {index} ({_operation_name(op.type, model)}); "
                    "it can prepare only models it fully supports",
                )
            if ext.resolve(model, op.type) is not None:
                ext.validate_operation(model, index, self.variant.extensions)

    def _save(self, model_fd: int, data_fd: int, token: bytes, plan: Plan, priority: int) -> None:
        """Write the plan to the cache files; a cache that cannot be written costs only the next compile."""
        try:
            cache.save(model_fd, data_fd, token, VERSION, self.name, plan, int(priority))
        except Exception as e:
            log.warning("%s: cannot write the compilation cache: %s: %s", self.name, type(e).__name__, e)


class SamplePreparedModel(PreparedModel):
    """A prepared plan; executions may run concurrently (the plan is read-only).

    Deadlines: MISSED_DEADLINE_PERSISTENT when the deadline passed before the work started, or
    when less time is left than this model's fastest execution so far (it cannot be met even in
    ideal conditions); MISSED_DEADLINE_TRANSIENT when it passes during the work (checked before
    every operation). Either way the execution's memory and gate ticket are given back.
    """

    def __init__(
        self,
        model: Model,
        plan: Plan,
        device: SampleDevice,
        priority: Priority = Priority.MEDIUM,
        held_bytes: int = 0,
    ) -> None:
        self.model = model
        self.plan = plan
        self.device = device
        self.device_name = device.name
        self.priority = priority
        self._gate_priority = int(priority)  # what the gate keys on (a plain int is cheaper to hash)
        self._held = held_bytes
        self._work_bytes = working_bytes(model)
        self._fastest_ns: int | None = None
        self._lock = threading.Lock()
        self.buffers = device.buffers
        self._closed = threading.Event()
        self._released = False  # what executions check: `_closed.is_set()` as a plain attribute
        self._io = IoCache()
        #: The live bursts of this model (driver.burst): each keeps its own workspace and layouts.
        self.bursts: weakref.WeakSet[SampleBurst] = weakref.WeakSet()
        self._idle = device.idle
        if self._idle is not None:
            self._idle.watch(self, self.release_kept)

    def release_kept(self) -> None:
        """Let go of what is kept for the next execution (free workspaces, request layouts, and those
        of the model's idle bursts); the next execution makes them again. Executions in flight keep
        their own."""
        self.plan.workspaces.drop_free()
        self._io.clear()
        for burst in list(self.bursts):
            burst.release_kept()

    def configureExecutionBurst(self, *, polling_us: int | None = None) -> SampleBurst:
        """A burst of this model that keeps a workspace and request layouts of its own for its life
        (driver.burst; an idle watchdog may let them go meanwhile: `release_kept`)."""
        if self._released:
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT, "configureExecutionBurst: prepared model was released"
            )
        burst = SampleBurst(self, polling_us)
        with self._lock:
            self.bursts.add(burst)
        return burst

    def burst_closed(self, burst: SampleBurst) -> None:
        with self._lock:
            self.bursts.discard(burst)

    def executeSynchronously(
        self,
        request: Request,
        measure: MeasureTiming = MeasureTiming.NO,
        deadline: OptionalTimePoint = None,
        loop_timeout_duration: int | None = None,
        *,
        kept: SampleBurst | None = None,
    ) -> ExecutionResult:
        """Run `request`; `kept`, a burst of this model, lends its own workspace and request layouts
        (its executions run one at a time: see driver.burst)."""
        t0 = _perf_ns()
        if self._released:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "prepared model was released")
        device = self.device
        gate = device.gate
        # The ticket covers the whole call, checks and output copies included: the client's lower-priority
        # executions pause at their next operation from the moment this one arrives until its outputs
        # are written, so none of this execution's own work competes with them for the CPU.
        ticket = gate.enter(self._gate_priority)
        try:
            # A request object seen before was validated then: reuse its layout while the driver buffers
            # it names are unchanged (IoCache.get inlined). A burst lends its own layouts and workspace.
            if kept is None:
                layouts, workspace = self._io, None
            else:
                layouts, workspace = kept.io, kept.workspace
            io = layouts.entries.get(id(request))
            if io is not None and (io.key is not request or (io.bound and not io.fresh())):
                io = None
            buffers = self.buffers
            if io is None:
                # Read before the buffers are: a layout whose buffers changed while it was validated
                # is used for this execution but not kept (its stamps would be the changed ones').
                epoch = buffers.epoch
                bound = bind_buffers(request, self, buffers.lookup)
                validate.validate_request(bound, self.model)
            if loop_timeout_duration is not None:
                validate.validate_loop_timeout(loop_timeout_duration)
            if deadline is not None:
                _check_deadline_before(deadline, "executeSynchronously")
                self._check_feasible(deadline)
            budget, plan = device.budget, self.plan
            work = self._work_bytes
            ledger = budget.ledger  # no limit: only counted, by one list operation each way
            if ledger is None:
                held = budget.reserve(work, "the execution's working set")
            else:
                ledger.append(work)
            try:
                if io is None:
                    io = RequestIo(self.model, bound, buffers, request, layouts.shapes)
                    if buffers.epoch == epoch:
                        layouts.put(io)
                inputs = io.read_inputs(buffers)
                # Output buffers too small for shapes known in advance fail here, before any kernel runs.
                if io.checked_budget != plan.memory_budget:
                    io.static_fits = plan.static_fits(io.limits)
                    io.checked_budget = plan.memory_budget
                # MLTS_VLOG's cpuexe tag wants every operation's time too (logged, not returned).
                op_times: list[tuple[int, int]] | None = (
                    [] if request.measure_operations or (vlog.enabled and "cpuexe" in vlog.enabled) else None
                )
                # Without a deadline the ticket is the checkpoint (`qos.checkpoint`, inlined).
                checkpoint = (
                    ticket if deadline is None and gate.enabled else qos.checkpoint(deadline, gate, ticket)
                )
                # Results are copied out of the plan's workspace straight into the request's pools by the
                # sink (`write_outputs`), while the run still holds its workspace: the time on device
                # includes that write, as the NNAPI CPU executor writes its outputs into the request's memory.
                sink = io.write_outputs
                t1 = _perf_ns()
                # A burst's workspace is passed only when there is one: what wraps the plan's methods (a
                # plugin changing results) sees the calls it always saw.
                if io.static_fits and op_times is None:  # a static plan has no WHILE: no loop timeout either
                    if workspace is None:
                        shapes = plan.run_into(inputs, checkpoint, sink)
                    else:
                        shapes = plan.run_into(inputs, checkpoint, sink, workspace=workspace)
                else:
                    checked = io.static_fits
                    lent: dict[str, Any] = {} if workspace is None else {"workspace": workspace}
                    shapes = plan.run(
                        inputs,
                        checkpoint,
                        loop_timeout_duration,
                        op_times=op_times,
                        checked=checked,
                        predicted=None if checked else plan.shape_pass(inputs, io.limits),
                        sink=sink,
                        **lent,
                    )
                t2 = _perf_ns()
                if not ticket.paused:
                    fastest = self._fastest_ns
                    if fastest is None or t2 - t1 < fastest:
                        self._record(t2 - t1)
            finally:
                if ledger is None:
                    budget.release(held)
                else:
                    ledger.remove(work)
                # The kernels' idle workers sleep now, not after their spin window, so they take no
                # core from the threads returning this result and reading the next request (every
                # path, a burst's steps included, and after a failed execution too).
                _rest()
        finally:
            gate.leave(ticket)
            if self._idle is not None:
                self._idle.touch(self)
        measured = measure == _YES
        if vlog.enabled:
            self._log_execution(t0, t1, t2, request, op_times)
        if op_times is not None and request.measure_operations:
            timing = Timing((t2 - t1) // 1000, (_perf_ns() - t0) // 1000) if measured else _NOT_MEASURED
            return ExecutionResult(shapes, timing, from_pairs(op_times))
        # Results are immutable: an execution of a cached layout with the output shapes and timing of an
        # earlier one returns the earlier ExecutionResult.
        key = ((t2 - t1) // 1000, (_perf_ns() - t0) // 1000) if measured else _UNMEASURED_KEY
        results = io.results
        result = results.get(key)
        if result is None or result.output_shapes is not shapes:
            result = ExecutionResult(shapes, Timing(*key) if measured else _NOT_MEASURED)
            if len(results) >= CACHED_RESULTS:
                results.clear()
            results[key] = result
        return result

    def _log_execution(
        self, t0: int, t1: int, t2: int, request: Request, op_times: list[tuple[int, int]] | None
    ) -> None:
        """MLTS_VLOG: the call (tag driver) and each operation with its time (tag cpuexe)."""
        if vlog.on("driver"):
            tokens = sum(1 for p in request.pools if type(p) is int)
            vlog.log(
                "driver",
                "%s executeSynchronously: %.3f ms (kernels %.3f ms), %d pools, %d driver buffers",
                self.device_name,
                (_perf_ns() - t0) / 1e6,
                (t2 - t1) / 1e6,
                len(request.pools) - tokens,
                tokens,
            )
        if op_times is not None and vlog.on("cpuexe"):
            operations = self.model.main.operations
            for index, ns in op_times:
                vlog.log(
                    "cpuexe",
                    "operation %d %s: %.3f ms",
                    index,
                    _operation_name(operations[index].type, self.model),
                    ns / 1e6,
                )

    def _record(self, ns: int) -> None:
        with self._lock:
            if self._fastest_ns is None or ns < self._fastest_ns:
                self._fastest_ns = ns

    def _check_feasible(self, deadline: OptionalTimePoint) -> None:
        fastest = self._fastest_ns
        if deadline is None or fastest is None:
            return
        left = deadline - time.monotonic_ns()
        if left < fastest:
            raise HalError(
                ErrorStatus.MISSED_DEADLINE_PERSISTENT,
                f"executeSynchronously: {left / 1e6:.3f} ms left before the deadline, but this model's "
                f"fastest execution so far took {fastest / 1e6:.3f} ms",
            )

    def close(self) -> None:
        if not self._closed.is_set():
            self._released = True
            self._closed.set()
            self._io.clear()
            for burst in list(self.bursts):  # what they keep goes with the model
                burst.close()
            if self._idle is not None:
                self._idle.unwatch(self)
            with self._lock:
                held, self._held = self._held, 0
            self.device.budget.release(held)


def _check_deadline_after(deadline: OptionalTimePoint, what: str) -> None:
    """A preparation that ran past its deadline: MISSED_DEADLINE_TRANSIENT (the caller frees what it held)."""
    if deadline is not None and _now_ns() > deadline:
        raise HalError(
            ErrorStatus.MISSED_DEADLINE_TRANSIENT, f"{what}: the deadline passed during preparation"
        )


def _abandon_at(deadline: OptionalTimePoint, what: str) -> Callable[[int], None] | None:
    """The plan's progress check: a preparation still running at its deadline is abandoned before its
    next operation, MISSED_DEADLINE_TRANSIENT (as the HAL allows: the work stops, what it held is freed)."""
    if deadline is None:
        return None

    def check(step: int) -> None:
        if _now_ns() > deadline:
            raise HalError(
                ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                f"{what}: the deadline passed during preparation; abandoned before operation {step}",
            )

    return check


def _now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of deadlines (one place, so tests can drive it)."""
    return time.monotonic_ns()


def _idle_option(text: str | None, name: str) -> float:
    """`idle_release_ms` in ms (0: never release); ValueError naming the bad value."""
    if text is None:
        return 0.0
    try:
        ms = float(text)
    except (TypeError, ValueError):
        ms = -1.0
    if not 0 <= ms <= MAX_IDLE_MS:
        raise ValueError(
            f"{name}: option idle_release_ms must be a number of ms in [0, {MAX_IDLE_MS}], got {text!r}"
        )
    return ms


def _budget(name: str, text: str | None) -> int:
    if text is None:
        return DEFAULT_BUDGET
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise ValueError(f"{name}: option buffer_budget needs a byte count >= 0, got {text!r}")
    return value
