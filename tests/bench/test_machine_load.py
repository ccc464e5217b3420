"""The load monitor: /proc parsing and the steal and busy shares between samples, from fed /proc texts."""

from __future__ import annotations

import pytest

from mlts.bench import machine_load
from mlts.bench.machine_load import LoadMonitor, all_samples, parse_loadavg, parse_stat


def _stat(user: int, idle: int, iowait: int, steal: int, running: int = 3) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return (
        f"cpu  {user} 0 100 {idle} {iowait} 0 0 {steal} 50 0\n"
        f"cpu0 {user} 0 100 {idle} {iowait} 0 0 {steal} 50 0\n"
        "intr 12345\n"
        f"procs_running {running}\nprocs_blocked 0\n"
    )


class Proc:
    """Fake /proc files: each read of /proc/stat takes the next text."""

    def __init__(self, stats: list[str], loadavg: str = "1.50 1.20 0.90 2/345 6789\n") -> None:
        self.stats = list(stats)
        self.loadavg = loadavg

    def __call__(self, path: str) -> str | None:
        if path == "/proc/stat":
            return self.stats.pop(0) if self.stats else None
        if path == "/proc/loadavg":
            return self.loadavg
        return None


def test_parse_stat_and_loadavg():
    cpu, running = parse_stat(_stat(1000, 5000, 200, 30, running=4))
    # The total stops at steal (guest time is inside user): 1000 + 0 + 100 + 5000 + 200 + 0 + 0 + 30.
    assert (cpu.total, cpu.idle, cpu.steal, running) == (6330, 5200, 30, 4)
    assert parse_loadavg("0.52 0.58 0.59 1/189 12345\n") == [0.52, 0.58, 0.59]
    assert parse_loadavg("garbage") is None and parse_stat("nothing here") == (None, None)


def test_steal_and_busy_are_shares_of_the_interval_since_the_last_sample():
    clock = iter([0.0, 0.0, 0.25, 5.25, 9.0]).__next__
    stats = [_stat(1000, 5000, 200, 30), _stat(1100, 5300, 200, 130), _stat(1400, 5400, 200, 130)]
    proc = Proc(stats + [stats[-1]])
    monitor = LoadMonitor(reader=proc, clock=clock, sleep=lambda s: None).start(thread=False)
    monitor.tick()
    record = monitor.stop()
    before, (during,), after = record["before"], record["during"], record["after"]
    # Interval 1: total +500 (user 100, idle 300, steal 100): steal 20%, busy 40%.
    assert (before["steal_pct"], before["busy_pct"], before["t_s"]) == (20.0, 40.0, 0.25)
    # Interval 2: total +400 (user 300, idle 100): steal 0%, busy 75%.
    assert (during["steal_pct"], during["busy_pct"], during["t_s"]) == (0.0, 75.0, 5.25)
    assert during["loadavg"] == [1.5, 1.2, 0.9] and during["procs_running"] == 3
    # No CPU time passed before the last read: no shares to give.
    assert after["loadavg"] == [1.5, 1.2, 0.9] and after["steal_pct"] is None and after["t_s"] == 9.0
    assert all_samples(record) == [before, during, after]


def test_a_sample_needs_both_proc_files():
    assert LoadMonitor(reader=Proc([])).sample() is None


def test_without_proc_there_is_no_record():
    monitor = LoadMonitor(reader=lambda path: None, sleep=lambda s: None).start(thread=False)
    monitor.tick()
    assert monitor.stop() is None and all_samples(None) == []


def test_a_long_run_keeps_a_bounded_record(monkeypatch):
    monkeypatch.setattr(machine_load, "MAX_DURING", 8)
    stats = [_stat(1000 + i, 5000 + i, 0, 0) for i in range(40)]
    monitor = LoadMonitor(interval_s=5.0, reader=Proc(stats), sleep=lambda s: None).start(thread=False)
    for _ in range(20):
        monitor.tick()
    record = monitor.record()
    assert len(record["during"]) <= 8 and record["interval_s"] > 5.0
    times = [s["t_s"] for s in record["during"]]
    assert times == sorted(times)


def test_the_sampling_interval_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        LoadMonitor(interval_s=0)
