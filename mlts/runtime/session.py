"""Session: prepare a model once, then run NumPy inputs through it via one reused shared memory pool."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from mlts.hal import trace, vlog
from mlts.hal.enums import DTYPE_NAME, UINT64_MAX, ErrorStatus, MeasureTiming, OperandType
from mlts.hal.errors import HalError
from mlts.hal.interface import Device, PreparedModel
from mlts.hal.memory import SharedMemory
from mlts.hal.operation_times import check_result_times
from mlts.hal.types import DataLocation, ExecutionResult, Model, Operand, Request, RequestArgument
from mlts.runtime import allowlist
from mlts.runtime.compile_cache import CompilationCache
from mlts.runtime.execution import DEFAULT_MODE, ExecutionMode, Executor, forget_memory
from mlts.runtime.qos_settings import DEFAULT_QOS, QosSettings
from mlts.runtime.remote import RemoteDevice
from mlts.runtime.retry import DEFAULT_RETRY, RetryPolicy, RetryStats, call_with_retries

# A view's copy, with no Python frame per output (`map` over views).
_copy = np.ndarray.copy
#: Every input and output region starts at a multiple of this.
ALIGNMENT = 64
#: Layouts naming driver buffers a Session keeps (by their tokens), the most recent ones.
MAX_TOKEN_LAYOUTS = 8
_PAGE = 4096


def _align(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


def _dtype(operand: Operand, what: str) -> np.dtype:
    name = DTYPE_NAME.get(operand.type)
    if name is None:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT, f"{what} has operand type {operand.type}, which has no NumPy dtype"
        )
    return np.dtype(name)


@dataclass(eq=False)
class _Layout:
    """Where one run's inputs and outputs sit in the session's pool, and the request naming them.

    `key` says which runs may reuse it (input shapes, driver buffer tokens, output sizes); the views
    write the inputs and read the outputs in place.
    """

    key: tuple
    request: Request
    offsets: list[int]
    pool: SharedMemory
    in_views: list[np.ndarray | None]
    out_views: dict[int, np.ndarray] = field(default_factory=dict)
    #: The output shapes (that very tuple) of the last run read through the views in `read_views`.
    read_shapes: tuple | None = None
    read_views: list[np.ndarray] = field(default_factory=list)
    #: No driver buffer named: `Session.run` may reuse the layout after checking only the inputs.
    plain: bool = False
    #: Inputs taken from driver buffers (their arrays are ignored).
    skip_in: frozenset[int] = frozenset()
    #: Copies of the token mappings the layout was made for (input index -> token, output index -> token).
    token_maps: tuple[dict[int, int], dict[int, int]] = ({}, {})


class Session:
    """A prepared model plus the pool its executions use; not thread-safe (one run at a time).

    `mode` is the execution path of every run (`mlts.runtime.execution.ExecutionMode`).

    With `cache` the model is prepared through that compilation cache; `cache_outcome` then says
    how ("hit", "miss", "recompiled" or "uncached"), else it is None.

    `qos` (mlts.runtime.qos_settings) gives the preparation its priority, preference and deadline,
    and every execution its own deadline (the two are separate, as NNAPI's calls take them: a
    deadline fit for one execution is far too short for a compilation), each made when its call is
    made, and WHILE's loop timeout. TRANSIENT errors are retried as `retry` allows; `retry_stats`
    counts the retries and the errors by status.

    `profile` asks the driver for per-operation times with every execution (`Request.measure_operations`);
    a driver's record is checked against the model (`mlts.hal.operation_times.check_result_times`) and
    comes back as the result's `operation_times` (None from a driver that does not measure them). It can
    be switched on and off between runs.
    """

    def __init__(
        self,
        device: Device,
        model: Model,
        *,
        qos: QosSettings = DEFAULT_QOS,
        mode: ExecutionMode = DEFAULT_MODE,
        measure: bool = True,
        cache: CompilationCache | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        profile: bool = False,
    ) -> None:
        self.device = device
        self.profile = profile
        if not isinstance(qos, QosSettings):
            raise TypeError(f"qos must be a QosSettings, not {type(qos).__name__}")
        self.qos = qos
        self.retry = retry
        self.retry_stats = RetryStats()
        mode = ExecutionMode.parse(mode)
        allowlist.check_model(model)
        self.model = model
        sub = model.main
        self._inputs = [sub.operands[i] for i in sub.input_indexes]
        self._outputs = [sub.operands[i] for i in sub.output_indexes]
        self._in_dtypes = [_dtype(op, f"input {k}") for k, op in enumerate(self._inputs)]
        self._out_dtypes = [_dtype(op, f"output {k}") for k, op in enumerate(self._outputs)]
        # Bytes reserved per output; unknown sizes are learnt from the driver's answers.
        self._out_bytes: list[int | None] = [
            op.byte_size() if op.is_fully_specified else None for op in self._outputs
        ]
        self._out_key = tuple(self._out_bytes)  # as layouts' keys hold it
        if mode == ExecutionMode.FENCED and None in self._out_bytes:
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                "fenced execution needs fully specified outputs (executeFenced reports no output shapes)",
            )
        self._pool: SharedMemory | None = None
        self._layout: _Layout | None = None
        # Layouts of runs naming driver buffers, by their tokens: a caller alternating buffers (the state
        # of a recurrent model kept in the driver) sends each one's very Request object again.
        self._token_layouts: dict[tuple, _Layout] = {}
        # The token mappings callers passed recently and their layouts (see `_token_layout`).
        self._token_seen: list[tuple[Mapping[int, int], Mapping[int, int], _Layout]] = []
        self.cache_outcome: str | None = None
        self.prepared: PreparedModel | None
        started = time.perf_counter()
        start_ns = trace.now_ns()
        preference, priority = qos.preference, qos.priority
        if cache is None:
            self.prepared = call_with_retries(
                lambda: device.prepareModel(model, preference, priority, qos.preparation_deadline()),
                retry,
                self.retry_stats,
            )
        else:
            self.prepared, self.cache_outcome = call_with_retries(
                lambda: cache.prepare(device, model, preference, priority, qos.preparation_deadline()),
                retry,
                self.retry_stats,
            )
        assert self.prepared is not None
        #: The execution seam every run goes through (mlts.runtime.execution), bound to this model.
        self.executor = Executor(
            self.prepared, mode, MeasureTiming.YES if measure else MeasureTiming.NO, qos.loop_timeout_ns
        )
        if trace.enabled:
            trace.span(
                "prepare",
                "compilation",
                start_ns,
                trace.now_ns(),
                driver=getattr(device, "name", "driver"),
                operations=len(model.main.operations),
                cache=self.cache_outcome,
            )
        if vlog.on("compilation"):
            vlog.log(
                "compilation",
                "prepared %d operations on %s in %.3f ms (preference %s, priority %s, deadline %s, cache %s)",
                len(model.main.operations),
                getattr(device, "name", "driver"),
                (time.perf_counter() - started) * 1e3,
                preference.name,
                priority.name,
                "none" if qos.prepare_deadline_ms is None else f"{qos.prepare_deadline_ms:g} ms",
                self.cache_outcome or "not used",
            )

    def _execute(self, request: Request) -> ExecutionResult:
        """`request` run through the seam (`self.executor`), TRANSIENT errors retried as `retry` allows;
        with a QoS deadline, each attempt gets its own, made when it starts."""
        ex = self.executor
        qos = self.qos
        try:
            return ex.call(
                request,
                ex.measure,
                None if qos.deadline_ms is None else qos.execution_deadline(),
                ex.loop_timeout,
            )
        except HalError as e:
            return self._retried(e, request)

    def _retried(self, first: HalError, request: Request) -> ExecutionResult:
        """After the first attempt at `request` failed with `first`: the retries `retry` allows (the
        first error counted by the same rules), their result or the last error."""
        failed = [first]
        run = self.executor.run
        qos = self.qos

        def again() -> ExecutionResult:
            if failed:  # the first attempt, made by the caller: retried (or not) by the same rules
                raise failed.pop()
            return run(request, None if qos.deadline_ms is None else qos.execution_deadline())

        return call_with_retries(again, self.retry, self.retry_stats)

    @property
    def mode(self) -> ExecutionMode:
        """The execution path of every run (the executor's)."""
        return self.executor.mode

    @property
    def measure(self) -> MeasureTiming:
        """Whether runs ask the driver for timing; may be changed between runs."""
        return self.executor.measure

    @measure.setter
    def measure(self, value: MeasureTiming) -> None:
        self.executor.measure = MeasureTiming(value)

    @property
    def loop_timeout_ns(self) -> int | None:
        """WHILE's loop timeout of every run (from the QoS settings); may be changed between runs."""
        return self.executor.loop_timeout

    @loop_timeout_ns.setter
    def loop_timeout_ns(self, value: int | None) -> None:
        self.executor.loop_timeout = value

    # ------------------------------------------------------------ layout

    def _check_inputs(
        self, inputs: Sequence[np.ndarray | None], skip: Mapping[int, int] = {}
    ) -> list[np.ndarray]:
        if len(inputs) != len(self._inputs):
            raise HalError(
                ErrorStatus.INVALID_ARGUMENT,
                f"the model has {len(self._inputs)} inputs, {len(inputs)} arrays were given",
            )
        arrays = []
        for k, (value, dtype) in enumerate(zip(inputs, self._in_dtypes, strict=True)):
            if k in skip:
                arrays.append(np.empty(0, dtype))  # taken from a driver buffer
                continue
            arr = np.asarray(value)
            if arr.dtype != dtype:
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"input {k} has dtype {arr.dtype}; the model's operand is {OperandType(self._inputs[k].type).name} "
                    f"({dtype})",
                )
            arrays.append(arr)
        return arrays

    def _ensure_pool(self, size: int) -> SharedMemory:
        pool = self._pool
        if pool is not None and pool.size >= size:
            return pool
        self._release_pool()
        grown = max(size, 2 * pool.size if pool is not None else 0)
        self._pool = SharedMemory.create(_align(max(grown, ALIGNMENT), _PAGE), "mlts-session")
        return self._pool

    def _release_pool(self) -> None:
        self._layout = None  # its views point into the pool
        self._token_layouts.clear()
        self._token_seen = []
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if isinstance(self.device, RemoteDevice):
            try:
                if self.mode == ExecutionMode.BURST:
                    forget_memory(self.prepared, pool)
                self.device.freeMemory([pool])
            except HalError:
                pass  # a dead driver holds no mappings any more
        pool.close()

    def _request(
        self, arrays: list[np.ndarray], in_tokens: Mapping[int, int] = {}, out_tokens: Mapping[int, int] = {}
    ) -> _Layout:
        """Write the inputs into the pool; the layout (request, each output's offset) they were written by.

        Inputs and outputs named in `in_tokens`/`out_tokens` use those driver buffers instead. The
        layout of the previous run is reused when shapes, tokens and output sizes are the same, so a
        repeated run sends the very same Request object (which the driver and the service recognise).
        """
        key = (
            tuple(a.shape for a in arrays),
            tuple(in_tokens.items()),
            tuple(out_tokens.items()),
            tuple(self._out_bytes),
            self.profile,
        )
        layout = self._layout
        if layout is None or layout.key != key or layout.pool is not self._pool:
            tokens = key[1:3]
            layout = self._token_layouts.get(tokens) if in_tokens or out_tokens else None
            if layout is None or layout.key != key or layout.pool is not self._pool:
                layout = self._new_layout(key, arrays, in_tokens, out_tokens)
                if in_tokens or out_tokens:
                    if len(self._token_layouts) >= MAX_TOKEN_LAYOUTS:
                        del self._token_layouts[next(iter(self._token_layouts))]
                    self._token_layouts[tokens] = layout
            self._layout = layout
        for arr, view in zip(arrays, layout.in_views, strict=True):
            if view is not None:
                view[...] = arr
        return layout

    def _new_layout(
        self,
        key: tuple,
        arrays: list[np.ndarray],
        in_tokens: Mapping[int, int],
        out_tokens: Mapping[int, int],
    ) -> _Layout:
        guess = max([ALIGNMENT, *(a.nbytes for a in arrays)])
        offset = 0
        in_locs = []
        for arr in arrays:
            in_locs.append(DataLocation(0, offset, arr.nbytes))
            offset = _align(offset + arr.nbytes)
        out_locs = []
        for k, size in enumerate(self._out_bytes):
            if k in out_tokens:
                out_locs.append(DataLocation(0, 0, 0))
                continue
            size = guess if size is None else size
            out_locs.append(DataLocation(0, offset, size))
            offset = _align(offset + size)
        pool = self._ensure_pool(offset)
        in_views = [
            np.ndarray(arr.shape, arr.dtype, buffer=pool.buffer, offset=loc.offset)
            if arr.nbytes and k not in in_tokens
            else None
            for k, (arr, loc) in enumerate(zip(arrays, in_locs, strict=True))
        ]
        pools: list = [pool]

        def token_arg(token: int) -> RequestArgument:
            pools.append(token)
            return RequestArgument(False, DataLocation(len(pools) - 1, 0, 0), ())

        inputs = tuple(
            token_arg(in_tokens[k])
            if k in in_tokens
            else RequestArgument(False, loc, tuple(int(d) for d in arr.shape))
            for k, (arr, loc) in enumerate(zip(arrays, in_locs, strict=True))
        )
        outputs = tuple(
            token_arg(out_tokens[k]) if k in out_tokens else RequestArgument(False, loc, ())
            for k, loc in enumerate(out_locs)
        )
        request = Request(inputs, outputs, tuple(pools), self.profile)
        plain = not in_tokens and not out_tokens
        layout = _Layout(key, request, [loc.offset for loc in out_locs], pool, in_views, plain=plain)
        layout.skip_in = frozenset(in_tokens)
        layout.token_maps = (dict(in_tokens), dict(out_tokens))
        return layout

    # ------------------------------------------------------------ running

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        in_tokens: Mapping[int, int] = {},
        out_tokens: Mapping[int, int] = {},
    ) -> tuple[list[np.ndarray | None], ExecutionResult]:
        """Execute once; returns copies of the outputs (shaped as the driver reports) and the result.

        Inputs in `in_tokens` and outputs in `out_tokens` (index -> buffer token) stay in driver
        buffers (memory domains): such an input's array is ignored, such an output is None.
        """
        if self.prepared is None:
            raise HalError(ErrorStatus.INVALID_ARGUMENT, "the session is closed")
        layout = self._layout
        if in_tokens or out_tokens:
            # Driver buffers: the layout made for these tokens, when the other inputs fit it.
            layout = self._token_layout(in_tokens, out_tokens)
            if (
                layout is None
                or layout.pool is not self._pool
                or layout.key[3] != self._out_key
                or layout.key[4] != self.profile
                or not self._refill(layout, inputs, layout.skip_in)
            ):
                layout = self._request(self._check_inputs(inputs, in_tokens), in_tokens, out_tokens)
            else:
                self._layout = layout  # refilled: the inputs fit it
        elif (
            layout is None
            or not layout.plain
            or layout.key[4] != self.profile
            or not self._refill(layout, inputs)
        ):
            layout = self._request(self._check_inputs(inputs, in_tokens), in_tokens, out_tokens)
        if trace.enabled or "execution" in vlog.enabled:
            return self._logged_run(inputs, in_tokens, out_tokens, layout)
        # `_run_layout` inlined (and `_execute`'s first attempt), with `_read_outputs`'s usual case: the
        # output shapes read last time.
        ex = self.executor
        request = layout.request
        try:
            try:
                deadline = None if self.qos.deadline_ms is None else self.qos.execution_deadline()
                result = ex.call(request, ex.measure, deadline, ex.loop_timeout)
            except HalError as e:
                result = self._retried(e, request)
        except HalError as e:
            layout, result = self._after_error(e, inputs, in_tokens, out_tokens, request)
        if result.operation_times is None and result.output_shapes is layout.read_shapes and not out_tokens:
            return list(map(_copy, layout.read_views)), result
        return self._finish(layout, result, out_tokens)

    def _run_layout(
        self,
        inputs: Sequence[np.ndarray | None],
        in_tokens: Mapping[int, int],
        out_tokens: Mapping[int, int],
        layout: _Layout,
    ) -> tuple[list[np.ndarray | None], ExecutionResult]:
        """Execute the request of `layout` (its inputs written); outputs too small for a result whose
        shape was unknown are laid out again and the execution repeated once."""
        request = layout.request
        try:
            result = self._execute(request)
        except HalError as e:
            layout, result = self._after_error(e, inputs, in_tokens, out_tokens, request)
        return self._finish(layout, result, out_tokens)

    def _after_error(
        self,
        e: HalError,
        inputs: Sequence[np.ndarray | None],
        in_tokens: Mapping[int, int],
        out_tokens: Mapping[int, int],
        request: Request,
    ) -> tuple[_Layout, ExecutionResult]:
        """After `request` failed with `e`: outputs too small for a result whose shape was unknown are
        laid out again and the execution repeated once (its layout and result); any other error raised."""
        unknown = [k for k, op in enumerate(self._outputs) if not op.is_fully_specified]
        if (
            e.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
            or not unknown
            or len(e.output_shapes) != len(self._outputs)
        ):
            raise e
        for k in unknown:
            shape = e.output_shapes[k]
            needed = int(np.prod(shape.dimensions, dtype=np.int64)) * self._out_dtypes[k].itemsize
            self._out_bytes[k] = max(needed, request.outputs[k].location.length)
        self._out_key = tuple(self._out_bytes)
        self._layout = None  # laid out for the old output sizes
        self._token_layouts.clear()
        self._token_seen = []
        layout = self._request(self._check_inputs(inputs, in_tokens), in_tokens, out_tokens)
        return layout, self._execute(layout.request)

    def _finish(
        self, layout: _Layout, result: ExecutionResult, out_tokens: Mapping[int, int]
    ) -> tuple[list[np.ndarray | None], ExecutionResult]:
        """The outputs of `result` and the result (its operation times checked, or dropped when not
        asked for)."""
        times = result.operation_times
        if times is not None:
            if not self.profile:
                result = replace(result, operation_times=None)  # not asked for: not passed on
            else:
                check_result_times(
                    times,
                    len(self.model.main.operations),
                    result.timing.time_in_driver,
                    getattr(self.device, "name", "driver"),
                )
        return self._read_outputs(layout, result, out_tokens), result

    def _logged_run(
        self,
        inputs: Sequence[np.ndarray | None],
        in_tokens: Mapping[int, int],
        out_tokens: Mapping[int, int],
        layout: _Layout,
    ) -> tuple[list[np.ndarray | None], ExecutionResult]:
        """`_run_layout` logged (MLTS_VLOG's `execution` tag) and traced (`--trace`): path, time, outcome."""
        started = time.perf_counter()
        start_ns = trace.now_ns()
        name = getattr(self.device, "name", "driver")
        try:
            outs, result = self._run_layout(inputs, in_tokens, out_tokens, layout)
        except HalError as e:
            ms = (time.perf_counter() - started) * 1e3
            vlog.log("execution", "%s %s: %s after %.3f ms", name, self.mode, e, ms)
            trace.span(
                f"execute/{self.mode}", "execution", start_ns, trace.now_ns(), driver=name, error=str(e)
            )
            raise
        timing = result.timing
        trace.span(
            f"execute/{self.mode}",
            "execution",
            start_ns,
            trace.now_ns(),
            driver=name,
            driver_buffers=len(in_tokens) + len(out_tokens),
            time_on_device_us=None if timing.time_on_device == UINT64_MAX else timing.time_on_device,
            time_in_driver_us=None if timing.time_in_driver == UINT64_MAX else timing.time_in_driver,
        )
        if "execution" not in vlog.enabled:
            return outs, result
        timing = result.timing
        vlog.log(
            "execution",
            "%s %s: %.3f ms, %d driver buffer(s); output shapes %s; on device %s us, in driver %s us",
            name,
            self.mode,
            (time.perf_counter() - started) * 1e3,
            len(in_tokens) + len(out_tokens),
            [list(s.dimensions) for s in result.output_shapes],
            "-" if timing.time_on_device == UINT64_MAX else timing.time_on_device,
            "-" if timing.time_in_driver == UINT64_MAX else timing.time_in_driver,
        )
        return outs, result

    def _token_layout(self, in_tokens: Mapping[int, int], out_tokens: Mapping[int, int]) -> _Layout | None:
        """The layout made for these tokens: found by the mappings' identity when the caller passes the
        same ones again (a DriverState does) and they still hold the same tokens, else by their items."""
        for seen_in, seen_out, seen in self._token_seen:
            if seen_in is in_tokens and seen_out is out_tokens:
                maps = seen.token_maps
                if maps[0] == in_tokens and maps[1] == out_tokens:
                    return seen
                break
        layout = self._token_layouts.get((tuple(in_tokens.items()), tuple(out_tokens.items())))
        if layout is not None:
            self._token_seen = [(in_tokens, out_tokens, layout), *self._token_seen[: MAX_TOKEN_LAYOUTS - 1]]
        return layout

    def _refill(
        self, layout: _Layout, inputs: Sequence[np.ndarray | None], skip: frozenset[int] = frozenset()
    ) -> bool:
        """Write `inputs` into a layout's input regions if they are arrays of the shapes and dtypes it
        was made for (inputs in `skip` come from driver buffers and are ignored); False when one is not
        (the caller then lays all of them out again)."""
        shapes = layout.key[0]
        dtypes = self._in_dtypes
        views = layout.in_views
        if len(inputs) != len(shapes):
            return False
        for k, value in enumerate(inputs):
            if skip and k in skip:
                continue
            if type(value) is not np.ndarray or value.shape != shapes[k]:
                return False
            dtype = value.dtype
            if dtype is not dtypes[k] and dtype != dtypes[k]:
                return False
            view = views[k]
            if view is not None:
                view[...] = value
        return True

    def _read_outputs(
        self, layout: _Layout, result: ExecutionResult, skip: Mapping[int, int] = {}
    ) -> list[np.ndarray | None]:
        # The common case: every output read has a view of the shape the driver reports.
        shapes = result.output_shapes
        if shapes is layout.read_shapes:  # the very shapes read last time (a repeated result)
            if not skip:
                return list(map(_copy, layout.read_views))
            return [None if view is None else view.copy() for view in layout.read_views]
        views = layout.out_views
        if len(shapes) == len(self._outputs) and len(views) + len(skip) == len(shapes):
            copies: list[np.ndarray | None] = []
            read: list = []
            for k, shape in enumerate(shapes):
                known = views.get(k)
                if known is None:
                    if k not in skip:
                        break
                    copies.append(None)
                    read.append(None)
                    continue
                if not shape.dimensions or known.shape != shape.dimensions:
                    break
                copies.append(known.copy())
                read.append(known)
            else:
                layout.read_shapes, layout.read_views = shapes, read
                return copies
        pool = layout.pool
        request = layout.request
        outputs: list[np.ndarray | None] = []
        for k, (op, dtype, offset) in enumerate(
            zip(self._outputs, self._out_dtypes, layout.offsets, strict=True)
        ):
            if k in skip:
                outputs.append(None)
                continue
            reported = result.output_shapes[k].dimensions if k < len(result.output_shapes) else ()
            dims = tuple(reported) if reported or op.is_scalar_type else tuple(op.dimensions)
            view = layout.out_views.get(k)
            if view is not None and view.shape == dims:
                outputs.append(view.copy())
                continue
            count = int(np.prod(dims, dtype=np.int64))
            if count * dtype.itemsize > request.outputs[k].location.length:
                raise HalError(
                    ErrorStatus.GENERAL_FAILURE,
                    f"output {k}: the driver reports shape {list(dims)}, larger than the "
                    f"{request.outputs[k].location.length} bytes it was given",
                )
            view = np.frombuffer(pool.buffer, dtype, count, offset).reshape(dims)
            layout.out_views[k] = view
            outputs.append(view.copy())
        return outputs

    def close(self) -> None:
        """Release the prepared model and the pool; idempotent."""
        prepared, self.prepared = self.prepared, None
        if prepared is not None:
            prepared.close()
        self._release_pool()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
