"""Progress on stderr: a live one-line bar on a terminal, plain lines otherwise, nothing with -q.

The bar shows done/planned model × backend runs, the current model, backend
and phase, the elapsed time and an ETA. The ETA starts from the planned
seconds per run and, once runs have finished, uses their measured average.
When stderr is not a terminal the bar is not drawn: each phase becomes one
plain line instead (with -v or MLTS_VLOG also the detail lines), so CI logs
stay readable.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

from mlts.bench.progress import Progress


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
        self.done = 0
        self.per_unit = 0.0
        self.start = time.monotonic()
        self.unit_start = self.start
        self.finished_seconds = 0.0
        self.where = ""
        self._drawn = False

    def plan(self, units: int, seconds_per_unit: float) -> None:
        self.units = units
        self.per_unit = seconds_per_unit
        self.start = self.unit_start = time.monotonic()

    def eta(self) -> float:
        left = max(0, self.units - self.done)
        per = self.finished_seconds / self.done if self.done else self.per_unit
        current = time.monotonic() - self.unit_start
        return max(0.0, left * per - min(current, per))

    def phase(self, model: str, backend: str, phase: str) -> None:
        self.where = f"{model} · {backend} · {phase}" if backend != "-" else f"{model} · {phase}"
        if self.live:
            self._draw()
        else:
            self._line(f"  {self.where}")

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

    def _line(self, text: str) -> None:
        if self.live and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        self.stream.flush()
        if self.live and self._drawn:
            self._draw()

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        total = max(self.units, 1)
        filled = int(20 * min(self.done, total) / total)
        bar = "#" * filled + "-" * (20 - filled)
        elapsed = time.monotonic() - self.start
        text = (
            f"[{bar}] {self.done}/{self.units} {self.where}  "
            f"{_clock(elapsed)} elapsed, ETA {_clock(self.eta())}"
        )
        self.stream.write("\r\x1b[2K" + text[: max(10, width - 1)])
        self.stream.flush()
        self._drawn = True


def make_progress(quiet: bool, verbose: bool) -> Progress:
    """Silent with -q; otherwise a bar on a terminal or plain lines (stderr)."""
    if quiet:
        return Progress()
    return TerminalProgress(detail=detail_wanted(verbose))
