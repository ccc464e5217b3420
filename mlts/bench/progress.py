"""How a benchmark tells its caller where it is: planned work, each phase, detail lines.

The runner announces the number of model × backend units it plans, then for
each unit the phases it goes through (convert, golden, compile, warm-up,
timing, accuracy); a long phase (golden outputs, compilation timings) also
reports its steps, so a display can advance within it. A front end turns that into a progress bar with an ETA
(`mlts.commands._progress`); `Silent` ignores everything.
"""

from __future__ import annotations


class Progress:
    """Receives progress; every method does nothing unless a subclass overrides it."""

    def plan(self, units: int, seconds_per_unit: float, models: int = 0) -> None:
        """`units` model × backend runs over `models` models (0: not said) are planned, each expected
        to take about `seconds_per_unit`."""

    def phase(self, model: str, backend: str, phase: str) -> None:
        """The current unit is in `phase` (e.g. "timing")."""

    def advance(self, done: int, total: int | None = None) -> None:
        """The current phase has done `done` of its `total` steps (None: open-ended, e.g. time-bound)."""

    def unit_done(self) -> None:
        """One model × backend run finished (successfully or not)."""

    def log(self, message: str) -> None:
        """A detail line (shown when the user asked for detail)."""

    def close(self) -> None:
        """The run is over: clear any live display."""


Silent = Progress
