"""The verdict a report page opens with: the header bar's line and chips, and the banners under it.

A run's own verdict comes from the document's `summary` section when the run wrote one (verdicts
passed of total, the geomean of driver ÷ reference with its interval, failures, noise); older files
have none, so it is worked out from the rows here. `noise` ("this run was noisy") and `completion`
("incomplete: M of N") become banners; `environment.load` becomes the Setup section's load table.
These sections are plain JSON the run side writes; anything malformed in them is left out, never
shown as a guess.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlts.records import BenchmarkRow, StressRecord
from mlts.report._html_format import BASELINE, DASH, mapping_of, number_of, text_of

#: Failures listed in the verdict section before the rest go behind "N more".
SHOWN_FAILURES = 12


@dataclass(frozen=True)
class Verdict:
    """The header's verdict line: `state` (pass, fail, incomplete, none), its word and the figures."""

    state: str
    word: str
    text: str


@dataclass(frozen=True)
class Chip:
    value: str
    label: str
    cls: str = ""


@dataclass(frozen=True)
class Banner:
    """A box under the header: noise, an interrupted run, failures."""

    cls: str
    title: str
    lines: tuple[str, ...] = ()
    items: tuple[str, ...] = ()
    more: tuple[str, ...] = ()  # items behind a "N more" disclosure


@dataclass(frozen=True)
class Header:
    """What the frame (templates/base.html.j2) shows above and below a page's sections."""

    title: str
    time: str
    verdict: Verdict | None = None
    chips: tuple[Chip, ...] = ()
    contents: tuple[tuple[str, str], ...] = ()
    footer: str = ""
    banners: tuple[Banner, ...] = field(default_factory=tuple)


# --- the run-side sections, read defensively --------------------------------------------------------------


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _texts(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)):
        return []
    return [_failure_text(v) for v in value if v is not None]


def _failure_text(value: Any) -> str:
    """A failure as one line: a string as it is, an object as "model on backend: reason" when it says so."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        who = " on ".join(str(value[k]) for k in ("model", "backend") if value.get(k)) or str(
            value.get("test") or value.get("name") or ""
        )
        why = value.get("reason") or value.get("message") or value.get("error")
        if who and why:
            return f"{who}: {why}"
        return who or str(why or text_of(value))
    return text_of(value)


@dataclass(frozen=True)
class RunState:
    """The run side's `summary`, `noise` and `completion` sections, each field None when absent or bad."""

    passed: int | None = None
    total: int | None = None
    failures: tuple[str, ...] | None = None
    geomean: float | None = None
    geomean_ci: tuple[float, float] | None = None
    noisy: bool | None = None
    noise_headline: str | None = None
    noise_reasons: tuple[str, ...] = ()
    complete: bool | None = None
    interrupted: bool | None = None
    planned: int | None = None
    done: int | None = None
    stop_reason: str | None = None

    @classmethod
    def of(cls, data: Mapping) -> RunState:
        summary = mapping_of(data.get("summary"))
        noise = mapping_of(data.get("noise"))
        completion = mapping_of(data.get("completion"))
        ci = summary.get("geomean_ci")
        lo, hi = (
            (number_of(ci[0]), number_of(ci[1]))
            if isinstance(ci, (list, tuple)) and len(ci) == 2
            else (None, None)
        )
        failures = summary.get("failures")
        noisy = _flag(noise.get("noisy"))
        if noisy is None:
            noisy = _flag(summary.get("noisy"))
        headline = noise.get("headline")
        reason = completion.get("reason")
        return cls(
            passed=_count(summary.get("verdicts_passed")),
            total=_count(summary.get("verdicts_total")),
            failures=tuple(_texts(failures)) if isinstance(failures, (list, tuple)) else None,
            geomean=number_of(summary.get("geomean_ratio")),
            geomean_ci=(lo, hi) if lo is not None and hi is not None else None,
            noisy=noisy,
            noise_headline=headline if isinstance(headline, str) and headline else None,
            noise_reasons=tuple(_texts(noise.get("reasons"))),
            complete=_flag(completion.get("complete")),
            interrupted=_flag(completion.get("interrupted")),
            planned=_count(completion.get("planned")),
            done=_count(completion.get("done")),
            stop_reason=reason if isinstance(reason, str) and reason else None,
        )

    @property
    def incomplete(self) -> bool:
        return self.complete is False or self.interrupted is True

    def progress_text(self) -> str:
        if self.done is not None and self.planned is not None:
            return f"{self.done} of {self.planned}"
        return "not every planned run finished"


# --- verdicts ---------------------------------------------------------------------------------------------


def _ratio(x: float) -> str:
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def geomeans(lines: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float | None, float | None, int]]:
    """Per driver backend: the geometric mean of its driver ÷ reference ratios, the geometric means of
    the ratios' interval ends (an interval that holds whenever every model's does), and how many models.

    `lines` are the overview's lines (mlts.report._html_overview.overview): each with `backend` and
    `ratio` None or {ratio, lo, hi}.
    """
    per: dict[str, list[Mapping[str, Any]]] = {}
    for ln in lines:
        if ln.get("ratio"):
            per.setdefault(str(ln["backend"]), []).append(ln["ratio"])
    out = {}
    for backend, ratios in per.items():

        def mean_log(key: str, rs: list[Mapping[str, Any]] = ratios) -> float | None:
            values = [r[key] for r in rs]
            if any(v is None or v <= 0 for v in values):
                return None
            return math.exp(sum(math.log(v) for v in values) / len(values))

        out[backend] = (mean_log("ratio") or 0.0, mean_log("lo"), mean_log("hi"), len(ratios))
    return out


def _benchmark_failures(records: Sequence[BenchmarkRow]) -> tuple[int, int, list[str]]:
    """(passed, total, failures) from the rows: a driver row's accuracy verdict, and every failed run."""
    passed = total = 0
    failures = []
    for r in records:
        if not r.ok:
            failures.append(f"{r.model} on {r.backend}: run failed: {r.error or r.status}")
            if r.backend != BASELINE:
                total += 1
            continue
        if r.verdict is None:
            continue
        total += 1
        if r.verdict.passed:
            passed += 1
        else:
            failed = ", ".join(c.metric for c in r.verdict.failures())
            failures.append(f"{r.model} on {r.backend}: accuracy verdict failed ({failed})")
    return passed, total, failures


def _verdict(
    passed: int | None, total: int | None, failures: Sequence[str], state: RunState, what: str
) -> tuple[str, str]:
    """(state, word) of a run."""
    if failures or (passed is not None and total is not None and passed < total):
        return "fail", "FAILED"
    if state.incomplete:
        return "incomplete", "INCOMPLETE"
    if not total:
        return "none", f"NO {what.upper()}"
    return "pass", "PASSED"


def _noise_text(state: RunState) -> str:
    if state.noisy is None:
        return "noise not measured"
    return "this run was noisy" if state.noisy else "run quiet"


def _banners(state: RunState, failures: Sequence[str]) -> tuple[Banner, ...]:
    out = []
    if state.incomplete:
        why = [state.stop_reason] if state.stop_reason else []
        if state.interrupted:
            why.append("The run was interrupted: everything below covers only the work that finished.")
        else:
            why.append("Everything below covers only the work that finished.")
        out.append(Banner("incomplete", f"Incomplete: {state.progress_text()} done", tuple(why)))
    if state.noisy:
        lines = [state.noise_headline] if state.noise_headline else []
        lines.append(
            "Absolute times may show the machine rather than the driver: the driver ÷ onnxruntime ratios were "
            "measured under the same load and stay comparable; re-run on a quiet machine to confirm a change."
        )
        out.append(Banner("noisy", "This run was noisy", tuple(lines), state.noise_reasons))
    if failures:
        shown, more = tuple(failures[:SHOWN_FAILURES]), tuple(failures[SHOWN_FAILURES:])
        out.append(Banner("fail", f"Failures ({len(failures)})", (), shown, more))
    return tuple(out)


def _chips(state: RunState) -> list[Chip]:
    chips = []
    if state.noisy:
        chips.append(Chip("noisy", "run", "noisy"))
    if state.incomplete:
        chips.append(Chip(state.progress_text(), "done", "incomplete"))
    return chips


def benchmark_header(
    data: Mapping, records: Sequence[BenchmarkRow], lines: Sequence[Mapping[str, Any]]
) -> tuple[Verdict, tuple[Chip, ...], tuple[Banner, ...]]:
    """The verdict line, chips and banners of a benchmark report (`lines`: the overview's lines)."""
    state = RunState.of(data)
    passed, total, failures = _benchmark_failures(records)
    if state.passed is not None and state.total is not None:
        passed, total = state.passed, state.total
    if state.failures is not None:
        failures = list(state.failures)
    parts = [f"{passed} of {total} verdicts passed" if total else "no accuracy verdicts"]
    if state.geomean is not None:
        interval = (
            f", 95% interval {_ratio(state.geomean_ci[0])}–{_ratio(state.geomean_ci[1])}"
            if state.geomean_ci
            else ""
        )
        parts.append(f"driver ÷ onnxruntime {_ratio(state.geomean)} (geomean{interval})")
    else:
        for backend, (g, lo, hi, n) in geomeans(lines).items():
            interval = f", interval {_ratio(lo)}–{_ratio(hi)}" if lo is not None and hi is not None else ""
            parts.append(
                f"{backend.removeprefix('driver:')} ÷ onnxruntime {_ratio(g)} (geomean of {n}{interval})"
            )
    parts.append(f"{len(failures)} failure{'s' if len(failures) != 1 else ''}" if failures else "no failures")
    parts.append(_noise_text(state))
    if state.incomplete:
        parts.append(f"incomplete: {state.progress_text()}")
    word_state, word = _verdict(passed, total, failures, state, "verdicts")
    chips = [
        Chip(
            f"{passed} of {total}" if total else DASH,
            "verdicts passed",
            "" if word_state != "fail" else "failed",
        )
    ]
    chips += [Chip(str(len(records)), "runs"), Chip(str(sum(not r.ok for r in records)), "failed")]
    chips.append(Chip(str(sum(bool(r.validation_errors) for r in records)), "with validation errors"))
    return (
        Verdict(word_state, word, " · ".join(parts)),
        tuple(chips + _chips(state)),
        _banners(state, failures),
    )


def stress_header(
    data: Mapping, records: Sequence[StressRecord]
) -> tuple[Verdict, tuple[Chip, ...], tuple[Banner, ...]]:
    """The verdict line, chips and banners of a stress report: tests that ended as expected, of all."""
    state = RunState.of(data)
    total = len(records)
    passed = sum(not r.unexpected for r in records)
    failures = [
        f"{r.test or f'{r.mode}/{r.driver}'}: {r.outcome}, expected {r.expected or 'SUCCESS'}"
        + (f": {r.reason}" if r.reason else "")
        for r in records
        if r.unexpected
    ]
    if state.passed is not None and state.total is not None:
        passed, total = state.passed, state.total
    if state.failures is not None:
        failures = list(state.failures)
    parts = [f"{passed} of {total} stress tests ended as expected" if total else "no stress tests"]
    parts.append(f"{len(failures)} failure{'s' if len(failures) != 1 else ''}" if failures else "no failures")
    parts.append(_noise_text(state))
    if state.incomplete:
        parts.append(f"incomplete: {state.progress_text()}")
    word_state, word = _verdict(passed, total, failures, state, "tests")
    chips = [
        Chip(f"{passed} of {total}", "as expected", "failed" if failures else ""),
        Chip(str(len(failures)), "unexpected"),
    ]
    return (
        Verdict(word_state, word, " · ".join(parts)),
        tuple(chips + _chips(state)),
        _banners(state, failures),
    )


# --- machine load (environment.load) ----------------------------------------------------------------------

LOAD_COLUMNS = ("load 1 min", "load 5 min", "load 15 min", "CPU steal", "runnable")


def _load_figures(sample: Any) -> tuple[float | None, ...] | None:
    """(load 1, 5, 15 min, steal %, runnable processes) of one reading; None when it has none of them."""
    s = mapping_of(sample)
    avg = s.get("loadavg")
    averages = (
        tuple(number_of(v) for v in avg)
        if isinstance(avg, (list, tuple)) and len(avg) == 3
        else (None, None, None)
    )
    running = _count(s.get("procs_running"))
    figures = (*averages, number_of(s.get("steal_pct")), None if running is None else float(running))
    return None if all(v is None for v in figures) else figures


def _load_text(figures: Sequence[float | None]) -> list[str]:
    formats = ("{:.2f}", "{:.2f}", "{:.2f}", "{:.1f}%", "{:.0f}")
    return [DASH if v is None else f.format(v) for f, v in zip(formats, figures, strict=True)]


def load_rows(env: Mapping) -> list[tuple[str, list[str]]]:
    """The Setup section's load table: before, during (the highest of each figure) and after the run."""
    load = mapping_of(env.get("load"))
    rows = []
    before = _load_figures(load.get("before"))
    if before:
        rows.append(("before", _load_text(before)))
    readings = load.get("during")
    during = [f for f in map(_load_figures, readings if isinstance(readings, list) else []) if f]
    if during:
        highest = [
            max((v for v in column if v is not None), default=None) for column in zip(*during, strict=True)
        ]
        label = f"during (highest of {len(during)} reading{'s' if len(during) != 1 else ''})"
        rows.append((label, _load_text(highest)))
    after = _load_figures(load.get("after"))
    if after:
        rows.append(("after", _load_text(after)))
    return rows
