"""A fake clock for the polling windows' tests: their decisions hang on how long waits took, which on a
busy machine is anything; with this clock they are what the test says."""

from __future__ import annotations


class FakeClock:
    """Stands in for the `time` module of mlts.ipc.socket_polling (monkeypatch its `time`).

    `perf_counter()` advances `step` seconds at every reading, so a polling loop that reads it ends
    after window / step turns; `sleep(s)` advances it by `s` at once.
    """

    def __init__(self, step: float = 1e-6, start: float = 1000.0) -> None:
        self.now = start
        self.step = step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
