"""Buffers reused across executions: one Workspace per execution in flight, never shared by two.

A Plan keeps a pool of workspaces; each run takes one for its whole duration (a concurrent run
of the same plan takes another) and gives it back at the end. While a run holds it, kernels ask
for

- `scratch(name, shape, dtype)`: a temporary used only inside one operation (a patch matrix,
  float accumulators); operations of one run share it by name, so it must not be returned;
- `output(shape, dtype)`: the current operation's own output buffer, kept for this step of
  this plan, so later operations of the same run may read it.

Outside a run (getSupportedOperations, tests calling a kernel directly) both are `np.empty`.
A static plan fills one workspace at preparation (`driver.executor.Plan.warm`): its bound runs'
outputs and temporaries are allocated and written once then, so the first execution allocates
only what steps outside those runs ask for.
Arrays a run returns that live in its workspace are copied before the workspace is given back.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar, Token

import numpy as np


class Workspace:
    """The buffers of one execution context.

    A key asked for again with the same shape and dtype gets the same array object back, so its
    address is looked up once (`address`) and the compiled kernels pay no per-call conversion.
    """

    __slots__ = ("_buffers", "_views", "addresses", "step", "roots", "bound", "allocations")

    def __init__(self) -> None:
        self._buffers: dict[object, np.ndarray] = {}
        self._views: dict[object, tuple[np.ndarray, tuple[int, ...], np.dtype | type]] = {}
        #: id(view) -> (view, its address) of every array handed out: read by kernels that look an
        #: address up inline (`address`'s hit), written here and, for the views of driver buffers a
        #: request layout reads in place, by `driver.request_io.RequestIo.pin_inputs`.
        self.addresses: dict[int, tuple[np.ndarray, int]] = {}
        self.step = -1
        self.roots: set[int] = set()  # id() of every buffer, to tell which results live here
        self.bound: dict[
            object, object
        ] = {}  # runs of bound steps made for this workspace (driver.bound_steps)
        self.allocations = 0  # buffers allocated so far (a larger one replacing a smaller counts too)

    def get(self, key: object, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        cached = self._views.get(key)
        if cached is not None and cached[1] == shape and cached[2] == dtype:
            return cached[0]
        dt = np.dtype(dtype)
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= d
        buf = self._buffers.get(key)
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                self.roots.discard(id(buf.base))
            buf = aligned_bytes(nbytes)
            self.allocations += 1
            self._buffers[key] = buf
            self.roots.add(id(buf.base))  # views of buf have the whole allocation as their base
        view = buf[:nbytes].view(dt).reshape(shape)
        if cached is not None:
            self.addresses.pop(id(cached[0]), None)
        self._views[key] = (view, shape, dtype)
        self.addresses[id(view)] = (view, view.ctypes.data)
        return view

    def address(self, arr: np.ndarray) -> int:
        """The data address of `arr` (remembered for this workspace's own arrays)."""
        hit = self.addresses.get(id(arr))
        if hit is not None and hit[0] is arr:
            return hit[1]
        return arr.ctypes.data

    def owns(self, arr: np.ndarray) -> bool:
        """True if `arr` is (a view of) one of this workspace's buffers."""
        base: np.ndarray | None = arr
        while base is not None:
            if id(base) in self.roots:
                return True
            base = base.base if isinstance(base, np.ndarray) else None
        return False

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())

    def touch(self) -> None:
        """Write every buffer once (zeros), so its pages are resident before a run writes them: the
        page faults of fresh memory are paid here (at preparation) instead of by the first execution."""
        for buf in self._buffers.values():
            buf.fill(0)


#: Bytes every workspace buffer starts at a multiple of: a cache line, so the compiled kernels'
#: vector loads and stores of a row never straddle two lines more than its length makes them
#: (the heap's 16-byte alignment made a 3x3 depthwise convolution 1.3-1.7x slower).
ALIGN = 64


def aligned_bytes(nbytes: int) -> np.ndarray:
    """A uint8 buffer of `nbytes` (at least 1) starting at a multiple of ALIGN; its `base` is the allocation."""
    raw = np.empty(max(nbytes, 1) + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + max(nbytes, 1)]


_CURRENT: ContextVar[Workspace | None] = ContextVar("driver_workspace", default=None)
#: The variable `activate` sets (for a caller that sets and resets it itself, once per run).
CURRENT = _CURRENT


def current() -> Workspace | None:
    return _CURRENT.get()


def scratch(name: str, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A temporary of one operation, reused by later runs (never return it from a kernel)."""
    ws = _CURRENT.get()
    if ws is None:
        return np.empty(shape, dtype=dtype)
    cached = ws._views.get(name)  # the hit of `Workspace.get`, inlined
    if cached is not None and cached[1] == shape and cached[2] == dtype:
        return cached[0]
    return ws.get(name, shape, dtype)


def output(shape: tuple[int, ...], dtype: np.dtype | type, slot: int = 0) -> np.ndarray:
    """The current operation's output buffer `slot`, reused by later runs of this step."""
    ws = _CURRENT.get()
    if ws is None:
        return np.empty(shape, dtype=dtype)
    key = (ws.step, slot)
    cached = ws._views.get(key)  # the hit of `Workspace.get`, inlined: every operation asks once
    if cached is not None and cached[1] == shape and cached[2] == dtype:
        return cached[0]
    return ws.get(key, shape, dtype)


def address(arr: np.ndarray) -> int:
    """The data address of `arr`, cheap for the current workspace's arrays."""
    ws = _CURRENT.get()
    if ws is not None:
        # `Workspace.address` inlined: compiled kernels ask for a few addresses per operation.
        hit = ws.addresses.get(id(arr))
        if hit is not None and hit[0] is arr:
            return hit[1]
    return arr.ctypes.data


class WorkspacePool:
    """Free workspaces of one plan; `acquire` never hands one workspace to two runs at once."""

    def __init__(self) -> None:
        #: The free workspaces; `free.pop()` and `free.append(ws)` are `acquire` and `release` without
        #: the method calls (one each per execution): both are atomic, so one workspace goes to one caller.
        self.free: list[Workspace] = []
        self._lock = threading.Lock()
        self.created = 0

    def acquire(self) -> Workspace:
        # list.pop and list.append are atomic: one free workspace goes to one caller only.
        try:
            return self.free.pop()
        except IndexError:
            pass
        with self._lock:
            self.created += 1
        return Workspace()

    def release(self, ws: Workspace) -> None:
        self.free.append(ws)

    def drop_free(self) -> int:
        """Forget the free workspaces (their buffers go with them); in use ones come back as usual."""
        free, self.free = self.free, []
        return len(free)

    def __len__(self) -> int:
        """Free workspaces kept."""
        return len(self.free)


def activate(ws: Workspace) -> Token[Workspace | None]:
    """Make `ws` the workspace of the kernels this thread runs until `deactivate`."""
    return _CURRENT.set(ws)


def deactivate(token: Token[Workspace | None]) -> None:
    _CURRENT.reset(token)
