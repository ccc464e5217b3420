"""Consecutive operations whose kernels are compiled calls only, run in one foreign call.

In a static plan's straight-line function (driver.straight_line) every operation is a Python call
into its kernel, which makes one or two ctypes calls: each of them releases the interpreter lock and
takes it back, and the Python around them runs under it. Two executions in one process then take
turns on the lock at least once per operation.

A kernel that can tell in advance exactly which compiled calls it makes for inputs of given shapes
at given addresses (its run's `bind`, giving a `driver.ops._bind.BoundStep` with one buffer per
output of the operation: LSTM's four outputs as much as ADD's one) lets a run of such consecutive
operations (a `Chunk`) be bound once per workspace: every address is fixed, because the outputs are
the workspace's own buffers, reused by every execution. Later executions run the chunk
with one call of `mk_run_calls`: the same functions with the same arguments in the same order, so
the same results bit for bit, with the lock released once (or kept, through `native.LIB_HELD`, for
a chunk of less work than HOLD_BELOW_MACS).

Before running bound, a chunk checks that every step still has the kernel it was bound with (a
replaced kernel takes effect as in the loop) and that each value from outside the chunk is a
C-contiguous array of the shape and dtype it was bound for (its address is written into the calls);
otherwise the straight-line function runs the chunk's operations one by one as before. Binding
itself checks each output against its operand's declared shape and dtype.

Checkpoints: the checkpoint is called before the chunk starts. A checkpoint of mlts.hal.qos (the
execution's priority ticket, or its deadline check) is then watched by the compiled loop itself
(`mk_run_calls_watched`): before each call it reads the word holding the highest priority running
and the clock, and stops when the execution is outranked or its deadline has passed; the checkpoint
is called with the index of the next call's operation (it waits out the preemption, or raises) and
the rest of the calls run. So preemption and deadlines take effect between compiled calls, inside a
chunk, at the cost of one load (and a clock read with a deadline) per call. Any other checkpoint
is called between pieces of at most MAX_PIECE_MACS multiply-adds (about half a millisecond on one
core). Without one, the whole chunk is a single call.

`Plan(model, bind=False)` (driver.executor) turns binding off, to compare the two paths.
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from driver import native
from driver.operands import dtype_of as operand_dtype
from driver.operation_kernel import kernel_failed
from driver.ops import _bind
from driver.ops._workspace import CURRENT, Workspace, address
from mlts.hal import qos
from mlts.hal.enums import ErrorStatus
from mlts.hal.errors import HalError

#: The most multiply-adds run between two checkpoints of a bound chunk.
MAX_PIECE_MACS = 1 << 24
#: The fewest steps of a chunk: a lone step gains nothing from binding (its kernel makes one or two
#: calls already), and writing its inputs' addresses costs about what its Python call does.
MIN_STEPS = 2
#: A chunk of less work (multiply-adds, or elements of a sum) keeps the interpreter lock: a few µs,
#: less than taking the lock back from another thread costs.
HOLD_BELOW_MACS = 1 << 16

_ROW_INTS = _bind.CALL_INTS
# The address of external value k while binding: _EXTERNAL + k * _SPAN, plus the offset of a call
# that reads from inside it (below _SPAN bytes). No size, address or integer argument a kernel passes
# comes near them; nor does the scratch's placeholder, _bind.Scratch.PLACEHOLDER.
_EXTERNAL = -(1 << 50)
_SPAN = 1 << 32
_ROW_FLOATS = 2
_NDARRAY = np.ndarray
_watch = qos.watch


def _data_reader() -> Callable[[np.ndarray], int] | None:
    """How a chunk reads the data address of a value from outside it, at about a sixth of the cost of
    `arr.ctypes.data` (some 11 000 instructions: NumPy builds a ctypes helper object for it, importing
    a module each time), which an input from a request's pool pays at every execution (it is a new
    view each time): NumPy's array object (PyArrayObject) holds its data pointer right after the
    object header (`object.__basicsize__` bytes), which CPython's id() locates. Checked here on
    arrays of each kind a chunk reads (owning, a view, a read-only view of a buffer) against NumPy's
    own answer; None (use `address`) on another Python or where the check fails."""
    if sys.implementation.name != "cpython":
        return None
    offset = object.__basicsize__
    at = ctypes.c_void_p.from_address
    base = np.zeros((3, 8), np.float32)
    probes = (base, base[1:], np.ndarray((2, 4), np.float32, memoryview(bytearray(96)).toreadonly(), 32))
    for a in probes:
        if type(a) is not np.ndarray or at(id(a) + offset).value != a.ctypes.data:
            return None

    def data(a: np.ndarray) -> int:
        return at(id(a) + offset).value or 0

    return data


#: The data address of an external value (exactly an np.ndarray, checked before it is read).
_data_address: Callable[[np.ndarray], int] = _data_reader() or address


def variables(step: Any) -> tuple[int, ...] | None:
    """The operands a bindable step reads at run time (its binding's input positions), or None for a
    step whose kernel does not bind (or that runs subgraphs)."""
    binding = step.binding
    if binding is None or step.control is not None or not step.outputs:
        return None
    positions = binding.inputs
    if len(step.inputs) <= max(positions):
        return None
    return tuple(int(step.inputs[p]) for p in positions)


def fits(step: Any, outs: Sequence[np.ndarray]) -> bool:
    """The bound outputs are one C-contiguous array per output of the step, each of its operand's
    declared shape and dtype."""
    if len(outs) != len(step.outputs):
        return False
    for out, shape, dtype in zip(outs, step.out_shapes, step.out_dtypes, strict=True):
        if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
            return False
    return True


class _Program:
    """A chunk bound for one workspace: the calls' arguments and what they point into."""

    __slots__ = (
        "ints",
        "floats",
        "ints_ptr",
        "floats_ptr",
        "count",
        "pieces",
        "patches",
        "last",
        "outs",
        "keep",
        "run",
        "watched",
        "status",
        "status_ptr",
        "owners",
        "produced",
    )

    def __init__(self, calls: list[_bind.Call], keep: list[Any]) -> None:
        self.count = len(calls)
        self.ints = np.zeros((self.count, _ROW_INTS), dtype=np.int64)
        self.floats = np.zeros((self.count, _ROW_FLOATS), dtype=np.float32)
        for r, (kind, ints, floats) in enumerate(calls):
            self.ints[r, 0] = kind
            self.ints[r, 1 : 1 + len(ints)] = ints
            self.floats[r, : len(floats)] = floats
        self.ints_ptr = self.ints.ctypes.data
        self.floats_ptr = self.floats.ctypes.data
        self.pieces: list[tuple[int, int, int]] = []  # (first operation's index, first call, call count)
        self.patches: list[list[tuple[int, int, int]]] = []  # per external value: (call, argument, offset)s
        self.last: list[weakref.ref | None] = []  # per external value: the array last written in
        self.outs: list[np.ndarray] = []
        self.keep = keep
        self.run: Any = None  # mk_run_calls, of LIB or (for little work) LIB_HELD
        self.watched: Any = None  # mk_run_calls_watched of LIB (None: runs of little work keep the lock)
        self.status = np.zeros(1, dtype=np.int64)  # a failed call's status
        self.status_ptr = self.status.ctypes.data
        self.owners: list[tuple[Any, _bind.BoundStep]] = []  # per call: its step and what the step bound
        self.produced: dict[int, np.ndarray] = {}  # the steps' outputs, by operand


class Chunk:
    """Consecutive bindable steps of one plan (see the module docstring).

    `externals`: the operands the chunk reads from outside it, passed to `__call__` in this order;
    `shapes` and `dtypes`: those of every operand a step reads; `needed`: the chunk's outputs read
    after it, returned in this order; `constants`: the plan's operand values before a run.
    """

    def __init__(
        self,
        steps: Sequence[Any],
        externals: Sequence[int],
        shapes: Mapping[int, tuple[int, ...]],
        dtypes: Mapping[int, np.dtype],
        needed: Sequence[int],
        constants: Sequence[Any] = (),
    ) -> None:
        self.steps = tuple(steps)
        self.kernels = tuple(st.direct for st in steps)
        self.pairs = tuple(zip(self.steps, self.kernels, strict=True))
        self.externals = tuple(externals)
        self.ext_shapes = tuple(shapes[i] for i in externals)
        self.ext_dtypes = tuple(np.dtype(dtypes[i]) for i in externals)
        self.ext_specs = tuple(zip(self.ext_shapes, self.ext_dtypes, strict=True))
        self.constants = constants  # the plan's operand values before a run (for error messages)
        self.shapes = dict(shapes)
        self.needed = tuple(needed)
        self.last_number = int(steps[-1].number)
        # Dead: the steps always run one by one (no compiled kernels, or a kernel declined to bind).
        self.dead = native.LIB is None

    def __call__(self, ws: Workspace, checkpoint: Any, *values: Any) -> list[np.ndarray] | None:
        """Run the chunk bound and return its `needed` outputs; None (nothing run) when it cannot."""
        if self.dead:
            return None
        for st, kernel in self.pairs:
            if st.direct is not kernel:
                return None
        specs, k = self.ext_specs, 0
        for v in values:  # (a loop without zip: the check runs at every execution)
            shape, dtype = specs[k]
            k += 1
            if (
                type(v) is not _NDARRAY
                or v.shape != shape
                or (v.dtype is not dtype and v.dtype != dtype)
                or not v.flags.c_contiguous
            ):
                return None
        prog: Any = ws.bound.get(self)
        if prog is None:
            prog = self._bind(ws)
            if prog is None:
                self.dead = True
                return None
            ws.bound[self] = prog
        last = prog.last
        for k, v in enumerate(values):
            seen = last[k]
            if seen is None or seen() is not v:  # a new array: its address goes into the calls
                at = _data_address(v)
                ints = prog.ints
                for row, col, offset in prog.patches[k]:
                    ints[row, col] = at + offset
                last[k] = weakref.ref(v)
        run = prog.run
        if checkpoint is None:
            failed = run(prog.ints_ptr, prog.floats_ptr, prog.count, prog.status_ptr)
            if failed:
                self._fail(prog, failed - 1, values)
        elif prog.watched is not None and (watch := _watch(checkpoint)) is not None:
            self._run_watched(prog, checkpoint, watch, values)
        else:
            for first, start, count in prog.pieces:
                checkpoint(first)
                ints_at, floats_at = (
                    prog.ints_ptr + start * _ROW_INTS * 8,
                    prog.floats_ptr + start * _ROW_FLOATS * 4,
                )
                failed = run(ints_at, floats_at, count, prog.status_ptr)
                if failed:
                    self._fail(prog, start + failed - 1, values)
        ws.step = self.last_number
        return prog.outs

    def bind_into(self, ws: Workspace) -> bool:
        """Bind the chunk for `ws` now (what its first run there would do: its steps' output buffers
        and its scratch allocated in `ws`); a preparation's call (driver.executor.Plan.warm). True when
        `ws` holds the chunk bound; False when it cannot be (the chunk is then dead, as its first run
        would have found)."""
        if self.dead:
            return False
        if self in ws.bound:
            return True
        token = CURRENT.set(ws)
        try:
            prog = self._bind(ws)
        finally:
            CURRENT.reset(token)
            ws.step = -1
        if prog is None:
            self.dead = True
            return False
        ws.bound[self] = prog
        return True

    def _run_watched(
        self, prog: _Program, checkpoint: Any, watch: tuple[int, int, int], values: Sequence[Any]
    ) -> None:
        """Run the calls with the compiled loop watching the priority word and the deadline; whenever
        it stops, the checkpoint (which waits or raises) is called, and the rest runs."""
        word, mine, deadline = watch
        watched, count, owners = prog.watched, prog.count, prog.owners
        ints_ptr, floats_ptr, status_ptr = prog.ints_ptr, prog.floats_ptr, prog.status_ptr
        checkpoint(prog.pieces[0][0])
        start = 0
        while True:
            stopped = watched(
                ints_ptr + start * _ROW_INTS * 8,
                floats_ptr + start * _ROW_FLOATS * 4,
                count - start,
                status_ptr,
                word,
                mine,
                deadline,
            )
            if not stopped:
                return
            if stopped > 0:
                self._fail(prog, start + stopped - 1, values)
            start += -stopped - 1
            checkpoint(int(owners[start][0].index))

    def _fail(self, prog: _Program, call: int, values: Sequence[Any]) -> None:
        """Raise what the failed call's step raises when it runs alone (its kernel's exception, as
        the straight-line function reports it), or a GENERAL_FAILURE for a call the library refused."""
        st, bound = prog.owners[call]
        status = int(prog.status[0])
        if status == 0 or bound.fail is None:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"{st.label}: bound compiled call {call} was refused")
        given = dict(zip(self.externals, values, strict=True))
        args = [
            prog.produced.get(i, given.get(i, self.constants[i] if i < len(self.constants) else None))
            for i in st.inputs
        ]
        raise kernel_failed(st, args, bound.fail(status))

    def _bind(self, ws: Workspace) -> _Program | None:
        """The chunk's calls with this workspace's buffers; None when a kernel declines to bind."""
        scratch = _bind.Scratch()
        produced: dict[int, np.ndarray] = {}
        calls: list[_bind.Call] = []
        keep: list[Any] = []
        pieces: list[tuple[int, int, int]] = []
        piece_macs = total = 0
        owners: list[tuple[Any, _bind.BoundStep]] = []
        for st in self.steps:
            ws.step = st.number
            reads = variables(st) or ()
            ptrs = []
            for i in reads:
                x = produced.get(i)
                ptrs.append(x.ctypes.data if x is not None else _EXTERNAL + self.externals.index(i) * _SPAN)
            bound = st.binding.bind([self.shapes[i] for i in reads], ptrs, scratch)
            if bound is None or not fits(st, bound.outs):
                return None
            for i, out in zip(st.outputs, bound.outs, strict=True):
                produced[int(i)] = out
            keep.append(bound.keep)
            if not pieces or piece_macs + bound.macs > MAX_PIECE_MACS:
                pieces.append((int(st.index), len(calls), 0))
                piece_macs = 0
            piece_macs += bound.macs
            total += bound.macs
            calls.extend(bound.calls)
            owners += [(st, bound)] * len(bound.calls)
            first, start, _ = pieces[-1]
            pieces[-1] = (first, start, len(calls) - start)
        prog = _Program(calls, keep)
        prog.pieces, prog.owners, prog.produced = pieces, owners, produced
        lib: Any = native.LIB_HELD if total < HOLD_BELOW_MACS else native.LIB  # loaded: else dead
        prog.run = lib.mk_run_calls
        if lib is native.LIB:
            prog.watched = getattr(lib, "mk_run_calls_watched", None)
        prog.outs = [produced[i] for i in self.needed]
        buffer = None
        if scratch.floats:
            buffer = ws.get(("bound scratch", id(self)), (scratch.floats,), np.float32)
            keep.append(buffer)
        prog.patches = [[] for _ in self.externals]
        prog.last = [None] * len(self.externals)
        ints = prog.ints
        for r in range(prog.count):
            for c in range(1, _ROW_INTS):
                v = int(ints[r, c])
                if v == _bind.Scratch.PLACEHOLDER:
                    assert buffer is not None
                    ints[r, c] = buffer.ctypes.data
                elif _EXTERNAL <= v < _EXTERNAL + len(self.externals) * _SPAN:
                    k, offset = divmod(v - _EXTERNAL, _SPAN)
                    prog.patches[k].append((r, c, offset))
        return prog


def find_chunks(
    steps: Sequence[Any],
    inputs: set[int],
    written: set[int],
    output_indexes: Sequence[int],
    operands: Sequence[Any],
    template: Sequence[Any] = (),
) -> dict[int, tuple[int, Chunk]]:
    """The runs of at least MIN_STEPS consecutive bindable steps of a static plan, by first step:
    (end, chunk).

    A step joins when its kernel binds, the inputs it reads at run time (`variables`) are the only
    ones that are model inputs (`inputs`) or results (`written`), their shapes are known and its
    kernel binds them into an output of the declared shape and dtype.
    """
    shape_of: dict[int, tuple[int, ...] | None] = {}
    dtype_of: dict[int, np.dtype] = {}
    for i in inputs:
        dims = operands[i].dimensions
        shape_of[i] = tuple(int(d) for d in dims) if dims and all(dims) else None
        dtype_of[i] = operand_dtype(operands[i].type)
    for st in steps:
        for i, shape, dtype in zip(st.outputs, st.out_shapes, st.out_dtypes, strict=True):
            shape_of[int(i)] = shape
            dtype_of[int(i)] = dtype

    def reads(st: Any) -> tuple[int, ...] | None:
        found = variables(st)
        if found is None or any(shape_of.get(i) is None for i in found):
            return None
        given = {int(i) for i in st.inputs if i in inputs or i in written}
        if given != set(found):
            return None
        # The kernel binds these shapes (tried outside any workspace: fresh arrays, addresses unused).
        token = CURRENT.set(None)
        try:
            bound = st.binding.bind([shape_of[i] for i in found], [0] * len(found), _bind.Scratch())
        except Exception:  # a kernel that cannot bind these inputs runs (and reports) as before
            bound = None
        finally:
            CURRENT.reset(token)
        if bound is None or not fits(st, bound.outs):
            return None
        return found

    joined = [reads(st) for st in steps]
    chunks: dict[int, tuple[int, Chunk]] = {}
    s = 0
    while s < len(steps):
        if joined[s] is None:
            s += 1
            continue
        end = s
        while end < len(steps) and joined[end] is not None:
            end += 1
        if end - s < MIN_STEPS:
            s = end
            continue
        run = steps[s:end]
        made: set[int] = set()
        externals: list[int] = []
        shapes: dict[int, tuple[int, ...]] = {}
        dtypes: dict[int, np.dtype] = {}
        for k, st in enumerate(run):
            for i in joined[s + k] or ():
                shape = shape_of[i]
                assert shape is not None  # part of `reads`
                shapes[i], dtypes[i] = shape, dtype_of[i]
                if i not in made and i not in externals:
                    externals.append(i)
            made.update(int(i) for i in st.outputs)
        later = {int(i) for st in steps[end:] for i in st.inputs} | {int(i) for i in output_indexes}
        needed = [int(i) for st in run for i in st.outputs if int(i) in later]
        chunks[s] = (end, Chunk(run, externals, shapes, dtypes, needed, template))
        s = end
    return chunks
