"""priority-stress: does the driver's priority scheduling protect a HIGH model from a LOW load?

A client of the shared service times model A in three phases: A at HIGH alone; A at HIGH while T
threads run model B at LOW flat out; A at MEDIUM while the T threads run B at MEDIUM. It reports A's
median and p90 in each, and in the two loaded phases how many executions A and B each completed per
second while A was timed. In `priority-stress` the load runs on the timing client's own connection; in
`priority-stress-two-clients` it runs in another client: a second process with a connection of its
own (`mlts.crash.priority_load`), so the driver must let one client's HIGH execution preempt another
client's LOW work.

FAILURE when priorities make no difference. They make one when either
- A is protected: its median under the LOW load is clearly below its median under the equal-priority
  load (at least `min_gain`, 30% by default, better); or
- the machine shifts towards A and A meets the goal: A's median under the LOW load is within 1.5x of
  its median alone, and the division of the work between A and B moves towards A by at least
  `min_shift` (1.5x by default) when A is HIGH and B LOW: A's executions per second at HIGH over
  those at MEDIUM, times B's per second against A at MEDIUM over those against A at HIGH.
The second rule is what shows priorities at work when the load barely slows A even at MEDIUM (the
load on another core of an otherwise idle machine, a small model): A cannot then be 30% better off,
but a driver that honours priorities still holds B back while A runs, and one that ignores them
treats both phases alike (the shift stays near 1, whatever A's latency). The goal itself is reported
(`within_goal`), not enforced on its own: on a loaded 2-core machine it depends on what else runs.

The three phases are interleaved: ROUNDS rounds, each timing A alone, against the LOW load and
against the MEDIUM load for a third of the round. What other programs do to the machine then drifts
over all three phases alike instead of favouring the phase that happened to run in a quiet moment;
each phase's statistics are over all its rounds. Every timed call is A's whole execution as the
client sees it (request, scheduling, the driver's work, the reply). B's progress is counted from
when A's timing starts to when the load stops, in every round.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from mlts.crash.context import StressContext
from mlts.crash.outcome import StressFailure
from mlts.hal.enums import Priority
from mlts.hal.errors import HalError

GOAL_RATIO = 1.5
MIN_GAIN = 0.3
MIN_SHIFT = 1.5
ROUNDS = 3
MIN_CALLS = 5  # per phase, over all rounds


def _stats(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples) * 1000
    return {
        "median_ms": float(np.median(arr)),
        "p90_ms": float(np.percentile(arr, 90)),
        "calls": len(samples),
    }


class ThreadLoad:
    """Model B run flat out by threads of this client (its own sessions, on this connection)."""

    def __init__(self, ctx: StressContext, b_name: str, low: list[Any], medium: list[Any], inputs) -> None:
        self.ctx, self.b_name, self.inputs = ctx, b_name, inputs
        self.sessions = {"low": low, "medium": medium}
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._done: list[int] = []  # executions completed, one counter per thread (each its own)

    def start_load(self, which: str) -> None:
        self._stop.clear()
        self._errors.clear()
        sessions = self.sessions[which]
        self._done = [0] * len(sessions)
        done = self._done

        def run_b(n: int, b) -> None:
            try:
                while not self._stop.is_set():
                    b.run(self.inputs)
                    done[n] += 1
            except BaseException as e:  # noqa: BLE001
                self._errors.append(e)

        self._workers = [
            threading.Thread(target=run_b, args=(n, b), daemon=True) for n, b in enumerate(sessions)
        ]
        for w in self._workers:
            w.start()

    def completed(self) -> int:
        """B's executions completed since `start_load` (a count read while the threads run)."""
        return sum(self._done)

    def stop(self) -> int:
        """Stop the threads; B's executions completed since `start_load`."""
        self._stop.set()
        for w in self._workers:
            w.join(30)
        if self._errors:
            e = self._errors[0]
            raise (self.ctx.failure(e, f"execution of {self.b_name}") if isinstance(e, HalError) else e)
        return sum(self._done)

    def close(self) -> None:
        self._stop.set()


def priority_stress(ctx: StressContext) -> dict[str, Any]:
    """The one-client form: B's load on the timing client's own connection."""
    b_name = list(ctx.spec["models"])[-1]
    threads = max(1, int(ctx.spec.get("threads", 2)))

    def make_load(device, session: Callable[..., Any]) -> ThreadLoad:
        b_model = ctx.model(b_name)
        low = [session(b_model, Priority.LOW, b_name) for _ in range(threads)]
        medium = [session(b_model, Priority.MEDIUM, b_name) for _ in range(threads)]
        return ThreadLoad(ctx, b_name, low, medium, ctx.inputs(b_model, ctx.seed + 1))

    return _priority_phases(ctx, make_load, "one client")


def priority_stress_two_clients(ctx: StressContext) -> dict[str, Any]:
    """The two-client form: B's load in another process, a client of the same service."""
    from mlts.crash.priority_load import ProcessLoad

    b_name = list(ctx.spec["models"])[-1]

    def make_load(device, session: Callable[..., Any]) -> ProcessLoad:
        return ProcessLoad.launch(ctx, b_name)

    return _priority_phases(ctx, make_load, "two clients")


def _priority_phases(ctx: StressContext, make_load: Callable[..., Any], form: str) -> dict[str, Any]:
    from mlts.runtime.session import Session

    names = list(ctx.spec["models"])
    a_name, b_name = names[0], names[-1]
    threads = max(1, int(ctx.spec.get("threads", 2)))
    min_gain = float(ctx.params.get("min_gain", MIN_GAIN))
    min_shift = float(ctx.params.get("min_shift", MIN_SHIFT))
    qos = ctx.qos  # the run's QoS; each session's priority is its own
    device = ctx.open_device()
    a_model = ctx.model(a_name)
    a_inputs = ctx.inputs(a_model, ctx.seed)
    sessions: list[Any] = []

    def session(model, priority: Priority, what: str):
        try:
            s = Session(device, model, qos=replace(qos, priority=priority))
        except HalError as e:
            raise ctx.failure(e, f"prepareModel of {what}") from None
        sessions.append(s)
        return s

    a_high = session(a_model, Priority.HIGH, a_name)
    a_medium = session(a_model, Priority.MEDIUM, a_name)
    load = make_load(device, session)
    try:
        ctx.ready()
        rounds = max(1, int(ctx.params.get("rounds", ROUNDS)))
        phase = ctx.duration_s / 3 / rounds  # one phase of one round
        least = -(-MIN_CALLS // rounds)

        def timed(s, seconds: float) -> list[float]:
            s.run(a_inputs)  # warm-up call
            samples: list[float] = []
            end = time.monotonic() + seconds
            while time.monotonic() < end or len(samples) < least:
                t0 = time.perf_counter()
                s.run(a_inputs)
                samples.append(time.perf_counter() - t0)
                ctx.progress()
            return samples

        progress = {"low": [0, 0.0], "medium": [0, 0.0]}  # B's executions and seconds, while A was timed

        def under_load(s, which: str) -> list[float]:
            load.start_load(which)
            stopped = False
            try:
                time.sleep(min(0.2, phase / 5))  # the load is running before A is timed
                before, t0 = load.completed(), time.monotonic()
                samples = timed(s, phase)
                stopped = True
                after, t1 = load.stop(), time.monotonic()
            finally:
                if not stopped:
                    load.stop()
            progress[which][0] += after - before
            progress[which][1] += t1 - t0
            return samples

        alone: list[float] = []
        with_priorities: list[float] = []
        without: list[float] = []
        try:
            for _ in range(rounds):
                alone += timed(a_high, phase)
                with_priorities += under_load(a_high, "low")
                without += under_load(a_medium, "medium")
        except HalError as e:
            raise ctx.failure(e, f"execution of {a_name}") from None
    finally:
        load.close()
        for s in sessions:
            s.close()
    details: dict[str, Any] = {
        "model_a": a_name,
        "model_b": b_name,
        "form": form,
        "threads": threads,
        "rounds": rounds,
    }
    return judge(details, alone, with_priorities, without, progress, min_gain, min_shift)


def judge(
    details: dict[str, Any],
    alone: list[float],
    with_priorities: list[float],
    without: list[float],
    progress: dict[str, list],
    min_gain: float = MIN_GAIN,
    min_shift: float = MIN_SHIFT,
) -> dict[str, Any]:
    """The mode's verdict from A's call times in seconds (alone, against B at LOW, both MEDIUM) and B's
    progress (`progress["low"]` / `["medium"]`: executions and seconds); the details, completed, or
    StressFailure when priorities made no difference (see the module's doc)."""
    a_name, b_name = details.get("model_a", "A"), details.get("model_b", "B")
    details.update(
        a_high_alone=_stats(alone),
        a_high_vs_b_low=_stats(with_priorities),
        a_medium_vs_b_medium=_stats(without),
    )
    base = details["a_high_alone"]["median_ms"]
    high = details["a_high_vs_b_low"]["median_ms"]
    equal = details["a_medium_vs_b_medium"]["median_ms"]
    b_high, b_medium = (
        n / seconds if seconds > 0 else 0.0 for n, seconds in (progress["low"], progress["medium"])
    )
    a_rate_high, a_rate_medium = (len(v) / sum(v) if sum(v) > 0 else 0.0 for v in (with_priorities, without))
    # How far the division of the work moves towards A when A is HIGH and B LOW (1: not at all; B
    # starved outright while A ran at HIGH: infinite, reported as null).
    if b_high > 0 and a_rate_medium > 0:
        shift = (a_rate_high / a_rate_medium) * (b_medium / b_high)
    else:
        shift = float("inf") if b_high == 0 and b_medium > 0 else 1.0
    protected = high < (1.0 - min_gain) * equal
    within_goal = high <= GOAL_RATIO * base
    details.update(
        ratio_with_priorities=high / base,
        ratio_without=equal / base,
        within_goal=within_goal,
        goal_ratio=GOAL_RATIO,
        min_gain=min_gain,
        min_shift=min_shift,
        a_per_s_high=a_rate_high,
        a_per_s_medium=a_rate_medium,
        b_per_s_vs_a_high=b_high,
        b_per_s_vs_a_medium=b_medium,
        shift_to_a=shift if shift != float("inf") else None,
        protected=protected,
    )
    if not (protected or (within_goal and shift >= min_shift)):
        raise StressFailure(
            f"priorities made no difference: {a_name} median {high:.2f} ms at HIGH against {b_name} at LOW, "
            f"{equal:.2f} ms when both are MEDIUM (alone {base:.2f} ms; needs at least {min_gain:.0%} better, "
            f"or within {GOAL_RATIO:g}x of alone with the work shifted {min_shift:g}x towards it: "
            f"shifted {shift:.2f}x)",
            details=details,
        )
    return details
