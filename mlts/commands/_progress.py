"""Progress on stderr: a live status line on a terminal, plain lines otherwise, nothing with --quiet.

The status names where the run is — "model 7 of 27 · backend 2 of 2 ·" the
model, backend and phase, with the steps of a long phase — then the elapsed
time and an ETA. The ETA starts from the planned seconds per model × backend
run and, once runs have finished, uses their measured average. When stderr is
not a terminal nothing is redrawn: each phase becomes one plain line, and a
long phase prints its status again at most every PLAIN_PERIOD_S seconds (with
elapsed time and ETA), so CI logs show the run advancing without flooding.
With -v or MLTS_VLOG the detail lines are shown too.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

from mlts.bench.progress import Progress

#: Off a terminal: the least time between two status lines within one phase.
PLAIN_PERIOD_S = 15.0


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def detail_wanted(verbose: bool) -> bool:
    """-v, or MLTS_VLOG set to anything but empty/0."""
    return verbose or os.environ.get("MLTS_VLOG", "") not in ("", "0")


class TerminalProgress(Progress):
    def __init__(
        self, stream: TextIO | None = None, *, detail: bool = False, live: bool | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.detail = detail
        self.live = self.stream.isatty() if live is None else live
        self.units = 0
        self.models = 0
        self.done = 0
        self.per_unit = 0.0
        self.start = time.monotonic()
        self.unit_start = self.start
        self.finished_seconds = 0.0
        self.where = ""
        self.steps = ""
        self.model = ""
        self.model_index = 0
        self.backends: list[str] = []
        self._drawn = False
        self._last_line = self.start

    def plan(self, units: int, seconds_per_unit: float, models: int = 0) -> None:
        self.units = units
        self.models = models
        self.per_unit = seconds_per_unit
        self.start = self.unit_start = time.monotonic()
        # Phases before the plan (building zoo models) are not one of the planned models.
        self.model, self.model_index, self.backends = "", 0, []

    def eta(self) -> float:
        left = max(0, self.units - self.done)
        per = self.finished_seconds / self.done if self.done else self.per_unit
        current = time.monotonic() - self.unit_start
        return max(0.0, left * per - min(current, per))

    def count(self) -> str:
        """ "model 7 of 27 · backend 2 of 2" (as much of it as is known)."""
        parts = []
        if self.model_index:
            parts.append(f"model {self.model_index}" + (f" of {self.models}" if self.models else ""))
        if self.backends:
            per_model = self.units // self.models if self.models else 0
            parts.append(f"backend {len(self.backends)}" + (f" of {per_model}" if per_model else ""))
        return " · ".join(parts)

    def status(self) -> str:
        head = " · ".join(p for p in (self.count(), self.where) if p)
        return f"{head}{self.steps}"

    def phase(self, model: str, backend: str, phase: str) -> None:
        if model != self.model:
            self.model = model
            self.model_index += 1 if self.units else 0  # phases before the plan belong to no model
            self.backends = []
        if backend != "-" and backend not in self.backends:
            self.backends.append(backend)
        self.where = f"{model} · {backend} · {phase}" if backend != "-" else f"{model} · {phase}"
        self.steps = ""
        if self.live:
            self._draw()
        else:
            self._line(f"  {self.status()}")

    def advance(self, done: int, total: int | None = None) -> None:
        self.steps = f" ({done}/{total})" if total else f" ({done})"
        if self.live:
            self._draw()
        elif time.monotonic() - self._last_line >= PLAIN_PERIOD_S:
            self._line(f"  {self.status()} · {self._times()}")

    def unit_done(self) -> None:
        now = time.monotonic()
        self.finished_seconds += now - self.unit_start
        self.unit_start = now
        self.done += 1
        if self.live:
            self._draw()

    def log(self, message: str) -> None:
        if self.detail or not self.live:
            self._line(f"  {message}")

    def close(self) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._drawn = False

    def _times(self) -> str:
        return f"{_clock(time.monotonic() - self.start)} elapsed, ETA {_clock(self.eta())}"

    def _line(self, text: str) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_line = time.monotonic()
        if self.live and self._drawn:
            self._draw()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        # The count and the times first: a narrow terminal cuts the end of the line.
        head = " · ".join(p for p in (self.count(), self._times(), self.where) if p)
        text = f"{head}{self.steps}"
        self.stream.write("\r\x1b[2K" + text[: max(10, width - 1)])
        self.stream.flush()
        self._drawn = True


def make_progress(quiet: bool, verbose: bool) -> Progress:
    """Silent with --quiet; otherwise a status line on a terminal or plain lines (stderr)."""
    if quiet:
        return Progress()
    return TerminalProgress(detail=detail_wanted(verbose))
