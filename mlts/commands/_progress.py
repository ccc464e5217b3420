"""Progress on stderr: a live status line on a terminal, plain lines otherwise, nothing with --quiet.

The status names where the run is — "model 7 of 27 · backend 2 of 2 ·" the
model, backend and phase, with the steps of a long phase — then the elapsed
time and an ETA. The ETA adds the time left in the current phase (from the
rate of its steps, when it counts them), the rest of the running model ×
backend run, the runs not started (at the planned seconds each until runs
have finished, then at their measured mean) and the preparation (convert,
references, golden outputs) of the models not reached yet, at the measured
mean preparation. The live line is redrawn every TICK_S seconds, so its
times move on in a phase that reports nothing. When stderr is not a terminal
nothing is redrawn: each phase becomes one plain line, and a long phase
prints its status again (with elapsed time and ETA) when nothing was printed
for PLAIN_PERIOD_S seconds, so CI logs show the run advancing without
flooding. With -v or MLTS_VLOG the detail lines are shown too.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
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
    """The status line; `clock` gives the time (a fake one in tests); with `tick_every` a thread redraws
    it that often (and, off a terminal, prints it every PLAIN_PERIOD_S), so its times stay true in a
    phase that reports nothing for a while."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        detail: bool = False,
        live: bool | None = None,
        clock: Callable[[], float] | None = None,
        tick_every: float | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.detail = detail
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock or (lambda: time.monotonic())
        self.units = 0
        self.models = 0
        self.done = 0
        self.per_unit = 0.0
        self.start = self.clock()
        self.finished_seconds = 0.0
        self.where = ""
        self.steps = ""
        self.model = ""
        self.model_index = 0
        self.backends: list[str] = []
        # The ETA's clocks: the running unit (a backend's run), the model's preparation (convert,
        # references, golden outputs: the phases of backend "-") and the current phase's steps.
        self.unit_start: float | None = None
        self.prep_start: float | None = None
        self.prepared = 0
        self.prep_seconds = 0.0
        self.phase_start = self.start
        self.step_count: tuple[int, int | None] | None = None
        self.step_time = self.start
        self._drawn = False
        self._last_line = self.start
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if tick_every:
            self._ticker = threading.Thread(target=self._tick_loop, args=(tick_every,), daemon=True)
            self._ticker.start()

    def plan(self, units: int, seconds_per_unit: float, models: int = 0) -> None:
        with self._lock:
            self.units = units
            self.models = models
            self.per_unit = seconds_per_unit
            self.start = self.phase_start = self.clock()
            # Phases before the plan (building zoo models) are not one of the planned models.
            self.model, self.model_index, self.backends = "", 0, []
            self.unit_start = self.prep_start = None

    def _phase_rest(self, now: float) -> float:
        """The current phase's time left at the rate of its steps so far (0 when it counts none): the
        steps left, less the time the step under way has already taken (but never below the steps
        after it)."""
        if self.step_count is None:
            return 0.0
        done, total = self.step_count
        if not total or done <= 0:
            return 0.0
        rate = (self.step_time - self.phase_start) / done
        left = max(0, total - done)
        return max(rate * left - (now - self.step_time), rate * max(0, left - 1))

    def eta(self) -> float:
        """Seconds left: the current phase (from its steps), the rest of the running unit or preparation,
        the units not started (at their measured mean, else the plan's) and the models not prepared yet
        (at the measured mean preparation)."""
        now = self.clock()
        left = max(0, self.units - self.done)
        per = self.finished_seconds / self.done if self.done else self.per_unit
        per_prep = self.prep_seconds / self.prepared if self.prepared else 0.0
        phase_rest = self._phase_rest(now)
        if self.unit_start is not None and left:
            rest = max(per - (now - self.unit_start), phase_rest) + (left - 1) * per
        else:
            rest = left * per
        if self.prep_start is not None:
            rest += (
                phase_rest if self.step_count is not None else max(0.0, per_prep - (now - self.prep_start))
            )
        unreached = max(0, self.models - self.model_index)
        return max(0.0, rest + unreached * per_prep)

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
        with self._lock:
            now = self.clock()
            if model != self.model:
                self.model = model
                self.model_index += 1 if self.units else 0  # phases before the plan belong to no model
                self.backends = []
            if backend == "-":
                if self.prep_start is None and self.units:
                    self.prep_start = now
            else:
                if self.prep_start is not None:
                    self.prep_seconds += now - self.prep_start
                    self.prepared += 1
                    self.prep_start = None
                if self.unit_start is None:
                    self.unit_start = now
                if backend not in self.backends:
                    self.backends.append(backend)
            self.where = f"{model} · {backend} · {phase}" if backend != "-" else f"{model} · {phase}"
            self.steps = ""
            self.phase_start, self.step_count = now, None
            if self.live:
                self._draw()
            else:
                self._line(f"  {self.status()}")

    def advance(self, done: int, total: int | None = None) -> None:
        with self._lock:
            self.steps = f" ({done}/{total})" if total else f" ({done})"
            self.step_count, self.step_time = (done, total), self.clock()
            if self.live:
                self._draw()
            elif self.clock() - self._last_line >= PLAIN_PERIOD_S:
                self._line(f"  {self.status()} · {self._times()}")

    def unit_done(self) -> None:
        with self._lock:
            now = self.clock()
            if self.prep_start is not None:  # a model that failed before any backend ran
                self.prep_seconds += now - self.prep_start
                self.prepared += 1
                self.prep_start = None
            self.finished_seconds += now - self.unit_start if self.unit_start is not None else 0.0
            self.unit_start = None
            self.step_count = None
            self.done += 1
            if self.live:
                self._draw()

    def tick(self) -> None:
        """Redraw the live line (its times move on); off a terminal, print the status with its times when
        nothing was printed for PLAIN_PERIOD_S."""
        with self._lock:
            if self.live:
                if self._drawn:
                    self._draw()
            elif self.where and self.clock() - self._last_line >= PLAIN_PERIOD_S:
                self._line(f"  {self.status()} · {self._times()}")

    def _tick_loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.tick()

    def log(self, message: str) -> None:
        with self._lock:
            if self.detail or not self.live:
                self._line(f"  {message}")

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join(timeout=5.0)
        with self._lock:
            if self.live and self._drawn:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._drawn = False

    def _times(self) -> str:
        return f"{_clock(self.clock() - self.start)} elapsed, ETA {_clock(self.eta())}"

    def _line(self, text: str) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_line = self.clock()
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


#: How often the live line is redrawn (and, off a terminal, a quiet phase's status considered).
TICK_S = 1.0


def make_progress(quiet: bool, verbose: bool) -> Progress:
    """Silent with --quiet; otherwise a status line on a terminal or plain lines (stderr)."""
    if quiet:
        return Progress()
    return TerminalProgress(detail=detail_wanted(verbose), tick_every=TICK_S)
