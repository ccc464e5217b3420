"""The accuracy pass after a timed run reuses the timed calls' outputs and runs only the inputs they missed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mlts.bench.progress import Silent
from mlts.bench.runner import BenchmarkConfig, _timed_session


class _Session:
    """Doubles its input; remembers which inputs each call got."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def run(self, feed):
        self.calls.append(int(feed[0][0]))
        return [feed[0] * 2.0], SimpleNamespace(call=len(self.calls))


def _work(n: int):
    return SimpleNamespace(name="m", feeds=[[np.array([float(k)])] for k in range(n)])


def _run(n: int, iterations: int, warmup_s: float = 0.0):
    session = _Session()
    config = BenchmarkConfig(warmup_s=warmup_s, duration_s=0.0, min_iterations=iterations)
    timed, results, outputs = _timed_session(_work(n), session, "driver:x", config, Silent())
    return session, timed, results, outputs


def test_inputs_the_timed_calls_missed_are_run_after_them_in_order():
    session, timed, results, outputs = _run(5, 3)
    assert timed.iterations == 3 and [r.call for r in results] == [1, 2, 3]
    assert session.calls == [0, 1, 2, 3, 4]  # three timed calls, then only inputs 3 and 4
    assert [float(o[0][0]) for o in outputs] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_timed_calls_covering_every_input_leave_no_accuracy_calls():
    session, timed, _, outputs = _run(3, 7)
    assert session.calls == [0, 1, 2, 0, 1, 2, 0]
    assert [float(o[0][0]) for o in outputs] == [0.0, 2.0, 4.0]


def test_timed_calls_go_on_where_the_warm_up_stopped():
    session, timed, results, outputs = _run(6, 2, warmup_s=1e-9)  # one warm-up call
    assert timed.warmup_iterations == 1 and timed.iterations == 2
    assert session.calls == [0, 1, 2, 3, 4, 5]  # warm-up 0, timed 1 and 2, accuracy 3, 4 and 5
    assert [r.call for r in results] == [2, 3]
    assert [float(o[0][0]) for o in outputs] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
