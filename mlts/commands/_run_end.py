"""What `mlts benchmark` and `mlts stress` share at the end of a run: the --summary and --junit files,
their checks before any work, and the verdict lines."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mlts.bench.progress import Progress
from mlts.commands._common import BadInput

F = Callable[..., Any]


class PlannedProgress(Progress):
    """Passes everything to `inner` and remembers how many model × backend runs the benchmark planned."""

    def __init__(self, inner: Progress) -> None:
        self.inner = inner
        self.planned = 0

    def plan(self, units: int, seconds_per_unit: float, models: int = 0) -> None:
        self.planned = units
        self.inner.plan(units, seconds_per_unit, models)

    def phase(self, model: str, backend: str, phase: str) -> None:
        self.inner.phase(model, backend, phase)

    def advance(self, done: int, total: int | None = None) -> None:
        self.inner.advance(done, total)

    def unit_done(self) -> None:
        self.inner.unit_done()

    def log(self, message: str) -> None:
        self.inner.log(message)

    def close(self) -> None:
        self.inner.close()

    def planned_rows(self, doc: dict) -> int:
        """The rows the run planned: the runner's count, or before it said, models × (1 + driver backends)."""
        if self.planned:
            return self.planned
        config = doc.get("config") or {}
        backends = len(config.get("drivers") or []) * len(config.get("executions") or ["sync"])
        return len(config.get("models") or []) * (1 + backends)


def report_file_options(f: F) -> F:
    """--summary FILE.md and --junit FILE."""
    f = click.option(
        "--junit",
        "junit_file",
        default=None,
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="Also write the verdicts as JUnit XML here (for CI systems; an unfinished run is an error).",
    )(f)
    return click.option(
        "--summary",
        "summary_file",
        default=None,
        type=click.Path(dir_okay=False),
        metavar="FILE.md",
        help="Also write the run's verdict as Markdown here, to paste into a pull request.",
    )(f)


def check_file_targets(**paths: str | None) -> None:
    """Each given file path can be written (its folder exists and takes a file), checked before any work."""
    for option, given in paths.items():
        if given is None:
            continue
        path = Path(given)
        flag = f"--{option}"
        if path.is_dir():
            raise BadInput(f"{flag} {given}: is a directory")
        folder = path.absolute().parent
        if not folder.is_dir():
            raise BadInput(f"{flag} {given}: no such directory {folder}")
        try:
            with tempfile.TemporaryFile(dir=folder, prefix=".mlts-write-check-"):
                pass
        except OSError as e:
            raise BadInput(f"{flag} {given}: cannot write there: {e.strerror or e}") from None


def write_report_files(doc: dict, summary_file: str | None, junit_file: str | None) -> list[str]:
    """The --summary and --junit files of a finished (or interrupted) run; their paths."""
    from mlts.hal.atomic import write_atomic
    from mlts.report.run_junit import write_results_junit
    from mlts.report.run_markdown import markdown_summary

    written = []
    if summary_file is not None:
        write_atomic(summary_file, markdown_summary(doc).encode("utf-8"))
        written.append(summary_file)
    if junit_file is not None:
        write_results_junit(doc, junit_file)
        written.append(junit_file)
    return written


def echo_verdict(doc: dict) -> None:
    """The verdict lines at the end of the terminal output."""
    from mlts.report.run_verdict import verdict_lines

    lines = verdict_lines(doc)
    if lines:
        click.echo("")
        for line in lines:
            click.echo(line)
