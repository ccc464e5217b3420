"""Where a request's inputs and outputs live, worked out once per Request and reused by later executions.

A `Request` is immutable, and a prepared model's model never changes, so once
a request has passed `bind_buffers` and `validate_request` for a prepared
model, where each input and output sits in its pools is fixed. `RequestIo`
is that layout plus the reads and writes that use it; `IoCache` keeps the
layouts of a prepared model's last few requests by identity, so a client
that repeats its request object (a Session, the service's request cache, a
burst) is not validated and laid out again on every execution.

A request that names driver buffers is bound to them once as well: an input
buffer's array is the operand's value as it is (a read-only view), an output
buffer's array is where the result is written in place (the NNAPI sample
driver maps a buffer as a request pool the same way). A buffer's state can
change between executions (freed, resized, written for the first time), so
such a layout records each buffer's `stamp` and is used only while every
stamp is the same (`RequestIo.fresh`); otherwise the request is bound and
validated again. The stamps are compared only after some buffer of the device
changed (the tracker's `epoch` moved on since the layout last looked): in a
steady run (driver buffers swapped every step, none freed or resized) a
layout naming any number of buffers is recognised by one comparison. And since
a driver buffer's input view lives as long as its layout, the workspace that
runs the layout is given its address once (`RequestIo.pin_inputs`), so the
kernels find it as they find their own arrays' instead of asking NumPy at
every execution, as they must for a pool's input. Pools are read through on
every use, so a pool closed after caching fails exactly as it would uncached.
"""

from __future__ import annotations

import operator
import threading
from typing import Any, cast

import numpy as np

from driver.buffers import BufferTracker
from driver.operands import dtype_of
from driver.ops._workspace import current as current_workspace
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError
from mlts.hal.types import Model, OutputShape, Request

_SHAPE = operator.attrgetter("shape")
_STAMP = operator.attrgetter("stamp")

#: Request layouts a prepared model keeps (the most recent ones).
CACHED_REQUESTS = 8
#: Results up to this size are written into their pools through their bytes, larger ones through a view.
SMALL_COPY_BYTES = 4096
#: Distinct results (output shapes and timing) a layout keeps for reuse (`RequestIo.results`).
CACHED_RESULTS = 64
#: Layouts whose driver-buffer inputs a workspace keeps the addresses of (`RequestIo.pin_inputs`).
MAX_PINNED_LAYOUTS = 16
#: The key of those layouts in a workspace's `bound`.
PINNED = "driver.request_io pinned inputs"

# Where an argument lives: ("pool", pool index, offset, length, dtype, dims) or ("token", token, dtype, dims);
# None for an omitted argument.
_Where = tuple[Any, ...] | None
# One output's write: (pool index, offset, dtype, destination view, driver buffer, destination bytes, shape).
_Write = tuple[int, int, np.dtype, np.ndarray | None, Any, memoryview | None, tuple[int, ...] | None]


def _token(pool: object) -> int | None:
    return pool if isinstance(pool, int) and not isinstance(pool, bool) else None


class RequestIo:
    """The layout of one bound, validated request for one model; read-only once built, except for
    what executions note on it: the result shapes last checked and whether the plan checked every
    size in advance for these output buffers (`static_fits`, for the plan's `checked_budget`)."""

    __slots__ = (
        "request",
        "key",
        "bound",
        "stamps",
        "tracker",
        "epoch",
        "_in_template",
        "_settle",
        "_interned",
        "inputs",
        "outputs",
        "limits",
        "cacheable",
        "static_fits",
        "checked_budget",
        "_shapes",
        "_reads",
        "_writes",
        "_one_pool",
        "_bufs",
        "_pins",
        "results",
    )

    def __init__(
        self,
        model: Model,
        request: Request,
        buffers: BufferTracker | None = None,
        key: Request | None = None,
        interned: dict[tuple[OutputShape, ...], tuple[OutputShape, ...]] | None = None,
    ) -> None:
        self.request = request
        # Equal output shapes of the prepared model's layouts as one tuple (`IoCache.shapes`): a caller
        # alternating requests (driver buffers swapped every step) gets the very same shapes back.
        self._interned = interned
        #: The request object executions name (before `bind_buffers` filled in input dimensions).
        self.key = request if key is None else key
        sub = model.main
        pools = request.pools
        has_tokens = any(_token(p) is not None for p in pools)
        # A request naming driver buffers is cached only when they are bound here (`buffers` given).
        self.cacheable = not has_tokens or buffers is not None
        self.inputs: list[_Where] = []
        for arg, idx in zip(request.inputs, sub.input_indexes, strict=True):
            operand = sub.operands[idx]
            self.inputs.append(_where(arg, operand, pools, arg.dimensions or operand.dimensions, True))
        self.outputs: list[_Where] = []
        limits: list[int | None] = []
        for arg, idx in zip(request.outputs, sub.output_indexes, strict=True):
            where = _where(arg, sub.operands[idx], pools, tuple(arg.dimensions), False)
            self.outputs.append(where)
            # A driver buffer's size is the buffer's own check.
            limits.append(where[3] if where is not None and where[0] == "pool" else None)
        #: Bytes each output may take (None: no limit known here), for the plan's shape pass.
        self.limits = limits
        # The result shapes last seen and what they were reported as: the same shapes pass the same checks.
        self._shapes: tuple[tuple, tuple[OutputShape, ...]] | None = None
        #: Whether the plan checked everything in advance for these output sizes (set by the driver).
        self.static_fits = False
        self.checked_budget: int | None = None  # the plan's memory budget `static_fits` was worked out for
        #: The driver buffers this layout is bound to and their stamps then (see `fresh`), and the
        #: tracker's epoch at which they were known to be those.
        self.bound: tuple[Any, ...] = ()
        self.stamps: list[int] = []
        self.tracker = buffers
        self.epoch = -1
        # Inputs from driver buffers: their views, in place; None where the input is read from a pool.
        self._in_template: list[np.ndarray | None] | None = None
        # Output buffers that become initialised (or change dimensions) with the first write.
        self._settle: tuple[tuple[Any, tuple[int, ...]], ...] = ()
        # The input views in driver buffers' arrays, which live as long as the layout: pinned in the
        # workspaces that run it (`pin_inputs`).
        self._pins: tuple[np.ndarray, ...] = ()
        # Every input in a pool (or a bound driver buffer) and every output present (the common case):
        # the reads as (input index, pool index, offset, dims, dtype) and the writes as (pool index, offset,
        # dtype, destination view or None, driver buffer or None, the destination's bytes when a result
        # fits SMALL_COPY_BYTES, the destination's shape), done without looking at the layout again.
        self._reads: tuple[tuple[int, int, int, tuple[int, ...], np.dtype], ...] | None = None
        self._writes: tuple[_Write, ...] | None = None
        if has_tokens and buffers is not None:
            self._bind(buffers)
        elif all(
            w is not None and w[0] == "pool" and w[3] == w[4].itemsize * _count(w[5]) for w in self.inputs
        ):
            self._reads = tuple((k, w[1], w[2], w[5], w[4]) for k, w in enumerate(self.inputs))  # type: ignore[index]
        if not has_tokens and all(w is not None for w in self.outputs):
            self._writes = tuple((w[1], w[2], w[4], None, None, None, None) for w in self.outputs)  # type: ignore[index]
        self._one_pool = (
            self._reads is not None and self._in_template is None and all(r[1] == 0 for r in self._reads)
        )
        # Each pool's memory (its `buffer`, the same object for the pool's life; None for a driver
        # buffer's token), looked up once: the reads and writes index it instead of asking the pool.
        self._bufs: tuple[memoryview | None, ...] = tuple(
            None if _token(p) is not None else getattr(p, "buffer", None) for p in pools
        )
        #: The driver's ExecutionResults of this layout by (time on device, time in driver): immutable,
        #: so an execution with the same output shapes and timing as an earlier one returns that object.
        self.results: dict[tuple[int, int], Any] = {}

    def _bind(self, buffers: BufferTracker) -> None:
        """Resolve the driver buffers the (bound, validated) request names: input views and output
        destinations in their arrays, and the stamps they are valid for."""
        epoch = buffers.epoch  # before the stamps: a change after reading them shows as a new epoch
        bound: list[Any] = []
        stamps: list[int] = []
        template: list[np.ndarray | None] = []
        reads = []
        simple = True
        for k, w in enumerate(self.inputs):
            if w is not None and w[0] == "token":
                buffer = buffers.lookup(w[1])
                stamps.append(buffer.stamp)  # before the view: a change in between is seen as stale
                bound.append(buffer)
                template.append(buffer.read(w[2], w[3]))
            elif w is not None and w[3] == w[4].itemsize * _count(w[5]):
                template.append(None)
                reads.append((k, w[1], w[2], w[5], w[4]))
            else:
                simple = False
                template.append(None)
        writes: list[_Write] | None = []
        settle = []
        for w in self.outputs:
            if w is None:
                writes = None
                continue
            if w[0] == "pool":
                if writes is not None:
                    writes.append((w[1], w[2], w[4], None, None, None, None))
                continue
            buffer = buffers.lookup(w[1])
            found = buffer.destination(w[2])
            raw = None
            shape = None
            if found is None:
                stamps.append(buffer.stamp)
                dest = None
            else:
                dest, stamp = found
                stamps.append(stamp)
                shape = dest.shape
                if dest.nbytes <= SMALL_COPY_BYTES:
                    raw = memoryview(dest).cast("B")  # type: ignore[arg-type]  # the bytes, for the small-copy path
                if not buffer.initialized:
                    settle.append((buffer, shape))
            bound.append(buffer)
            if writes is not None:
                writes.append((0, 0, w[2], dest, buffer, raw, shape))
        self.bound, self.stamps = tuple(bound), stamps
        self.epoch = epoch
        self._settle = tuple(settle)
        if simple:
            self._in_template = template
            self._reads = tuple(reads)
        self._pins = tuple(v for v in template if v is not None)
        if writes is not None:
            self._writes = tuple(writes)

    def pin_inputs(self) -> None:
        """Give the workspace of the execution running now (`write_outputs` runs inside it) the
        addresses of this layout's inputs in driver buffers, for the executions after it.

        A kernel looks an input's data address up among its workspace's arrays (`Workspace.addresses`,
        keyed by the array's id and checked by identity) before it asks NumPy (`arr.ctypes.data`,
        some 16 000 instructions for each input of each execution). An input from a pool is a new
        view at every execution, so only NumPy can say; a driver buffer's input is the very view
        this layout made when it bound the buffer, so its address can be known once. The workspace
        keeps the views of the last MAX_PINNED_LAYOUTS layouts that ran on it (`PINNED` in its
        `bound`), oldest dropped first; a workspace the driver lets go takes them with it.
        """
        ws = current_workspace()
        if ws is None:
            return
        pinned = cast("dict[RequestIo, tuple[np.ndarray, ...]] | None", ws.bound.get(PINNED))
        if pinned is None:
            pinned = {}
            ws.bound[PINNED] = pinned
        elif self in pinned:
            return
        addresses = ws.addresses
        for view in self._pins:
            addresses[id(view)] = (view, view.ctypes.data)
        pinned[self] = self._pins
        while len(pinned) > MAX_PINNED_LAYOUTS:
            for view in pinned.pop(next(iter(pinned))):  # a layout's views are its own
                hit = addresses.get(id(view))
                if hit is not None and hit[0] is view:
                    del addresses[id(view)]

    def fresh(self) -> bool:
        """Every driver buffer the layout is bound to is as it was then (always True without buffers):
        no buffer of the device changed since the layout last looked (its tracker's epoch), or its own
        buffers' stamps are the same."""
        tracker = self.tracker
        if tracker is None or not self.bound:
            return True
        epoch = tracker.epoch  # before the stamps (as when binding)
        if epoch == self.epoch:
            return True
        if list(map(_STAMP, self.bound)) != self.stamps:
            return False
        self.epoch = epoch  # another buffer changed, not these: one comparison again from now on
        return True

    def read_inputs(self, buffers: BufferTracker) -> list[np.ndarray | None]:
        """Zero-copy, read-only views of the inputs (from pools or driver buffers)."""
        pools: tuple[Any, ...] = self.request.pools  # the layout's entries name memories, not tokens
        result: list[np.ndarray | None] = []
        reads = self._reads
        if reads is not None:
            # Validation put each region inside its pool with the size of its dims; NumPy checks it again.
            # A read-only view of the pool's memory gives a read-only array without a flags update.
            if self._one_pool:
                buf = self._bufs[0].toreadonly()  # type: ignore[union-attr]  # a pool, not a token
                for _k, _p, offset, dims, dtype in reads:
                    result.append(np.ndarray(dims, dtype, buf, offset))
                return result
            template = self._in_template
            if template is None:
                for _k, p, offset, dims, dtype in reads:
                    result.append(np.ndarray(dims, dtype, pools[p].buffer.toreadonly(), offset))
                return result
            result = template.copy()  # the driver buffers' views, bound in place
            for k, p, offset, dims, dtype in reads:
                result[k] = np.ndarray(dims, dtype, pools[p].buffer.toreadonly(), offset)
            return result
        for where in self.inputs:
            if where is None:
                result.append(None)
            elif where[0] == "token":
                result.append(buffers.lookup(where[1]).read(where[2], where[3]))
            else:
                # Validation put the region inside its pool; NumPy checks it again.
                _, p, offset, length, dtype, dims = where
                arr = np.frombuffer(pools[p].buffer, dtype, length // dtype.itemsize, offset).reshape(dims)
                arr.flags.writeable = False
                result.append(arr)
        return result

    def write_outputs(
        self, outputs: list[np.ndarray], buffers: BufferTracker | None = None
    ) -> tuple[OutputShape, ...]:
        """Copy results into the output regions (or driver buffers), or report which are too small;
        `buffers` defaults to the tracker the layout was made with (a bound method with one argument
        is the executor's sink)."""
        if buffers is None:
            # None only for a layout made without a tracker, which names no driver buffer to look up.
            tracker: Any = self.tracker  # (not typing.cast: a call per execution)
            buffers = tracker
        got = (outputs[0].shape,) if len(outputs) == 1 else tuple(map(_SHAPE, outputs))
        shapes = self._shapes
        if shapes is None or shapes[0] != got:
            reported = self._check_outputs(outputs, buffers)
            interned = self._interned
            if interned is not None:
                if len(interned) >= CACHED_RESULTS:
                    interned.clear()
                reported = interned.setdefault(reported, reported)
            shapes = self._shapes = (got, reported)
        elif not self.cacheable:
            self._check_outputs(outputs, buffers)
        if self._pins:
            self.pin_inputs()
        pools: tuple[Any, ...] = self.request.pools
        writes = self._writes
        if writes is not None:
            bufs = self._bufs
            # The checks above put every result inside its region (or made it fit its driver buffer).
            for k, (p, offset, dtype, dest, buffer, raw, shape) in enumerate(writes):
                arr = outputs[k]
                if buffer is not None:
                    if dest is None or arr.shape != shape:
                        buffer.write(arr)  # sizes the buffer (or resizes it): bound again next time
                    elif raw is not None:  # the destination's size, so the result's, is small
                        raw[:] = arr.tobytes()  # in place, in the buffer's own array (as a pool's region)
                    else:
                        dest[...] = arr  # in place
                    continue
                buf = bufs[p]
                if buf is None:
                    buf = pools[p].buffer
                if buf.readonly:
                    raise HalError(ErrorStatus.INVALID_ARGUMENT, f"output {k}: its pool is read-only")
                n = arr.nbytes
                if n <= SMALL_COPY_BYTES and (arr.dtype is dtype or arr.dtype == dtype):
                    # A small result's bytes in C order, copied by a slice assignment: less fixed cost
                    # than a NumPy view of the region (the extra copy is negligible at this size).
                    buf[offset : offset + n] = arr.tobytes()
                else:
                    np.ndarray(arr.shape, dtype, buf, offset)[...] = arr
            for buffer, dims in self._settle:
                buffer.written(dims)  # first write: initialised now (its stamp changes)
            return shapes[1]
        for k, (where, arr) in enumerate(zip(self.outputs, outputs, strict=True)):
            if where is None:
                continue
            if where[0] == "token":
                buffers.lookup(where[1]).write(arr)
                continue
            buf = pools[where[1]].buffer
            if buf.readonly:
                raise HalError(ErrorStatus.INVALID_ARGUMENT, f"output {k}: its pool is read-only")
            np.frombuffer(buf, where[4], arr.size, where[2])[...] = arr.reshape(-1)
        return shapes[1]

    def _check_outputs(self, outputs: list[np.ndarray], buffers: BufferTracker) -> tuple[OutputShape, ...]:
        """The output shapes; errors when a result disagrees with its request's dimensions or does not fit."""
        shapes = []
        insufficient = []
        for k, (where, arr) in enumerate(zip(self.outputs, outputs, strict=True)):
            shape = tuple(int(d) for d in arr.shape)
            if where is None:
                shapes.append(OutputShape(shape, True))
                continue
            if where[0] == "token":
                buffers.lookup(where[1]).check_output(shape, f"output {k}")
                shapes.append(OutputShape(shape, True))
                continue
            dims = where[5]
            if dims and dims != shape and all(dims):
                raise HalError(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"output {k}: request gives dimensions {list(dims)} but the result is {list(shape)}",
                )
            ok = arr.nbytes <= where[3]
            shapes.append(OutputShape(shape, ok))
            if not ok:
                insufficient.append(f"output {k} needs {arr.nbytes} bytes, has {where[3]}")
        if insufficient:
            raise HalError(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "; ".join(insufficient), tuple(shapes))
        return tuple(shapes)


def _count(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _where(arg: Any, operand: Any, pools: tuple, dims: tuple[int, ...], is_input: bool) -> _Where:
    if arg.has_no_value:
        return None
    loc = arg.location
    dtype = dtype_of(operand.type)
    token = _token(pools[loc.pool_index])
    if token is not None:
        return ("token", token, dtype, tuple(dims))
    if is_input and loc.length % dtype.itemsize:
        raise HalError(
            ErrorStatus.INVALID_ARGUMENT,
            f"input location length {loc.length} is not a whole number of {dtype} elements",
        )
    return ("pool", loc.pool_index, loc.offset, loc.length, dtype, tuple(dims))


class IoCache:
    """The layouts of a prepared model's recent requests, by request identity; thread-safe.

    Entries hold their Request (so its identity stays unique), not views of its pools: a pool closed
    by its owner is unmapped as usual.
    """

    def __init__(self, size: int = CACHED_REQUESTS) -> None:
        self.size = size
        self.entries: dict[int, RequestIo] = {}  # id(request) -> layout; read without the lock
        #: Output shapes reported by the layouts, each equal tuple once (see RequestIo's `interned`).
        self.shapes: dict[tuple[OutputShape, ...], tuple[OutputShape, ...]] = {}
        self._lock = threading.Lock()

    def get(self, request: Request) -> RequestIo | None:
        """The layout of this very request object while its driver buffers are unchanged, or None."""
        io = self.entries.get(id(request))
        return io if io is not None and io.key is request and io.fresh() else None

    def put(self, io: RequestIo) -> None:
        if not io.cacheable:
            return
        with self._lock:
            self.entries.pop(id(io.key), None)
            self.entries[id(io.key)] = io
            while len(self.entries) > self.size:
                del self.entries[next(iter(self.entries))]

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()

    def __len__(self) -> int:
        return len(self.entries)
