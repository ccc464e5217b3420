"""The sample driver's memory budgets: the device's (`max_memory_mb`) and each execution's.

A prepared model holds its constants (operand values and pools) for as long as it lives; an
execution holds its working set (every non-constant operand of every subgraph whose size is known,
an upper bound) while it runs. A model whose constants plus working set exceed the whole budget can
never run: RESOURCE_EXHAUSTED_PERSISTENT at prepare. Work that fits the budget but not what is left
of it now (other models and executions, of any client, hold the rest) gets
RESOURCE_EXHAUSTED_TRANSIENT: the same call may succeed once they are done.

Each execution also has its own budget (`max_execution_mb`, default `DEFAULT_EXECUTION_BYTES`): the
tensors it holds at once, in every subgraph it runs (an IF's branch, a WHILE's condition and body,
and the values a WHILE carries from one iteration to the next, all count together), may not exceed
it. Shapes are checked before a tensor is allocated wherever they can be known (driver.shapes), so a
model whose tensors grow with the data (a WHILE that doubles a tensor each iteration) fails with
RESOURCE_EXHAUSTED_PERSISTENT when it reaches the budget, not when the machine runs out of memory.
"""

from __future__ import annotations

import math
import threading

from mlts.hal.enums import DTYPE_NAME, ErrorStatus, OperandLifeTime, OperandType
from mlts.hal.errors import HalError
from mlts.hal.types import Model

_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)
#: Bytes of tensors one execution may hold at once unless `max_execution_mb` says otherwise (1 GiB).
DEFAULT_EXECUTION_BYTES = 1 << 30


class ExecutionMemory:
    """The bytes one execution holds in tensors right now, across every subgraph it runs, and its limit.

    One execution runs on one thread, so no lock: each subgraph run adds the tensors it keeps and takes
    them off again when they are dropped or handed back to the subgraph that called it.
    """

    __slots__ = ("limit", "live", "peak")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.live = 0
        self.peak = 0

    def hold(self, nbytes: int) -> None:
        live = self.live + nbytes
        self.live = live
        if live > self.peak:
            self.peak = live

    def drop(self, nbytes: int) -> None:
        self.live -= nbytes

    def room(self) -> int:
        """Bytes the execution may still take."""
        return self.limit - self.live


def constant_bytes(model: Model) -> int:
    return len(model.operand_values) + sum(p.size for p in model.pools)


def working_bytes(model: Model) -> int:
    """Bytes of every non-constant operand with fully known dimensions, across all subgraphs."""
    import numpy as np

    total = 0
    for sub in (model.main, *model.referenced):
        for operand in sub.operands:
            if operand.lifetime in _CONSTANT or operand.lifetime == OperandLifeTime.SUBGRAPH:
                continue
            try:
                itemsize = np.dtype(DTYPE_NAME[OperandType(operand.type)]).itemsize
            except (KeyError, ValueError):
                continue
            total += itemsize * math.prod(d for d in operand.dimensions if d)
    return total


class MemoryBudget:
    """Bytes in use against a limit (None: no limit); thread-safe.

    Without a limit nothing is ever refused, so what each running execution holds is only counted:
    `ledger` is then a list of those working sets, which an execution appends its own to and removes
    it from (each one C call, atomic under the interpreter lock; `used` adds them up). With a limit,
    `ledger` is None and executions `reserve` and `release` like everything else.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()
        #: The working sets of the executions running now, when there is no limit (else None).
        self.ledger: list[int] | None = [] if limit is None else None

    @property
    def used(self) -> int:
        with self._lock:
            return self._used + (sum(self.ledger) if self.ledger else 0)

    def check_fits(self, need: int, what: str) -> None:
        """RESOURCE_EXHAUSTED_PERSISTENT when `need` exceeds the whole budget."""
        if self.limit is not None and need > self.limit:
            raise HalError(
                ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                f"{what} needs {need} bytes; the driver's whole budget is {self.limit} bytes",
            )

    def reserve(self, need: int, what: str) -> int:
        """Take `need` bytes (give them back with `release`); TRANSIENT when they are not free now."""
        limit = self.limit
        if limit is None:  # no budget: only the count (every execution passes here)
            lock = self._lock
            lock.acquire()  # not `with`: this runs on every execution, and += cannot raise
            self._used += need
            lock.release()
            return need
        self.check_fits(need, what)
        with self._lock:
            if self._used + need > limit:
                raise HalError(
                    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                    f"{what} needs {need} bytes; {limit - self._used} of the driver's "
                    f"{limit} are free now (others hold the rest): retry later",
                )
            self._used += need
        return need

    def release(self, n: int) -> None:
        lock = self._lock
        lock.acquire()  # as in reserve: -= cannot raise
        self._used -= n
        lock.release()
