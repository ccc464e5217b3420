"""Progress of a distributed run: units done, running and left across the cluster, one line per change.

Starts arrive from the workers' event stream (on the engine's thread), ends from the client's loop;
a lock keeps the counts whole. A unit started again after its worker was lost counts as running
once, and its attempts are counted.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from mlts.cluster.units import UnitOutcome


class UnitProgress:
    """Counts of units done, failed, running and left; `lines` get one line per start and end."""

    def __init__(
        self, total: int, where: str, emit: Callable[[str], None] | None = None, stream: TextIO | None = None
    ) -> None:
        self.total = total
        self.where = where
        self.done = 0
        self.failed = 0
        self.running: dict[str, str] = {}  # unit id -> worker
        self.attempt_counts: dict[str, int] = {}
        self.labels: dict[str, str] = {}
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._stream = stream
        self._emit = emit

    def _say(self, text: str) -> None:
        if self._emit is not None:
            self._emit(text)
        elif self._stream is not None:
            self._stream.write(text + "\n")
            self._stream.flush()

    def counts(self) -> str:
        # Units whose worker is done but whose result is still on its way count as left for a moment.
        left = self.total - self.done - self.failed - len(self.running)
        bad = f", {self.failed} failed" if self.failed else ""
        return f"{self.done} done{bad}, {len(self.running)} running, {max(0, left)} left of {self.total}"

    def started(self, unit_id: str, worker: str | None, pid: int | None = None) -> None:
        with self._lock:
            n = self.attempt_counts[unit_id] = self.attempt_counts.get(unit_id, 0) + 1
            self.running[unit_id] = worker or "this process"
            again = f" (attempt {n}: its earlier worker was lost)" if n > 1 else ""
            line = f"[{self.counts()}] started {self.labels.get(unit_id, unit_id)} on {worker or self.where}{again}"
        self._say(line)

    def ended(self, unit_id: str) -> None:
        """The unit's worker is done with it (its result is on the way): no longer running there."""
        with self._lock:
            self.running.pop(unit_id, None)

    def finished(self, outcome: UnitOutcome) -> None:
        with self._lock:
            self.running.pop(outcome.unit.id, None)
            if outcome.ok:
                self.done += 1
                how = f"done in {outcome.seconds:.1f} s on {outcome.host or '?'}"
            else:
                self.failed += 1
                how = f"could not run: {(outcome.error or '')[:200]}"
            line = f"[{self.counts()}] {outcome.unit.label}: {how}"
        self._say(line)

    def attempts(self, unit_id: str) -> int:
        with self._lock:
            return max(1, self.attempt_counts.get(unit_id, 1))

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def stderr_progress(total: int, where: str, quiet: bool) -> UnitProgress:
    """The progress a command shows on stderr (nothing with `quiet`)."""
    return UnitProgress(total, where, emit=(lambda _line: None) if quiet else None, stream=sys.stderr)
