"""benchmarks/memory_domains.py's own parts: the distribution-free interval of a median, the verdicts,
the alternating order of the blocks, the per-step ratios of paired blocks, and a short run."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import memory_domains as script  # noqa: E402


def _coverage(n: int, rank: int) -> float:
    """P(x_(rank) <= median <= x_(n+1-rank)) for n draws of a continuous distribution: the chance that
    between `rank` and n-rank of them fall below the median, Binomial(n, 1/2)."""
    return sum(math.comb(n, k) for k in range(rank, n - rank + 1)) / 2**n


def test_the_interval_of_a_median_is_the_widest_order_statistics_pair_holding_95_percent() -> None:
    # n = 10: P(B <= 1) = 11/1024 <= 2.5% < P(B <= 2) = 56/1024, so ranks 2 and 9.
    assert script.median_interval([float(x) for x in range(10, 0, -1)]) == (5.5, 2.0, 9.0)
    # n = 20: ranks 6 and 15 (the published table for the sign-test interval).
    assert script.median_interval([float(x) for x in range(1, 21)]) == (10.5, 6.0, 15.0)
    # n = 6: only the extremes (coverage 1 - 2/64); n = 5: none reaches 95%.
    assert script.median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (3.5, 1.0, 6.0)
    assert script.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, None, None)
    with pytest.raises(ValueError):
        script.median_interval([])
    # Every n: the interval covers at least 95%, and one rank further in would not.
    for n in range(6, 200):
        values = [float(x) for x in range(n)]
        _, low, _ = script.median_interval(values)
        rank = int(low) + 1
        assert _coverage(n, rank) >= 0.95 > _coverage(n, rank + 1)


def test_verdicts_rest_on_the_whole_interval() -> None:
    assert script.verdict(0.90, 0.99) == "yes"
    assert script.verdict(0.90, 1.0) == "yes"
    assert script.verdict(0.98, 1.02) == "not shown"
    assert script.verdict(1.01, 1.30) == "no"
    assert script.verdict(None, None) == "too few pairs"


def test_blocks_alternate_and_cover_whole_blocks_of_each_sequence() -> None:
    assert script.pair_orders(4) == [("C", "D"), ("D", "C"), ("C", "D"), ("D", "C")]
    # Sequences of 10, 3 and 7 steps, at most 8 steps each, blocks of 3: 0-2 3-5 of the first (6-7
    # left out), 0-2 of the second, 0-2 3-5 of the third.
    assert script.block_cuts([10, 3, 7], 8, 3) == [(0, 0), (0, 3), (1, 0), (2, 0), (2, 3)]
    assert script.block_cuts([2], 8, 3) == []


def test_ratios_pair_adjacent_blocks_per_step_and_skip_missing_figures() -> None:
    c, d = script.Blocks(), script.Blocks()
    c.add(4, (0.004, 4000, 8000))
    d.add(4, (0.002, 2000, None))  # the service's threads changed during this block
    c.add(2, (0.002, 2000, 4000))
    d.add(4, (0.008, 4000, 4000))
    assert script.per_step_ratios(c, d, "wall") == [0.5, 2.0]
    assert script.per_step_ratios(c, d, "client_cpu") == [0.5, 1.0]
    assert script.per_step_ratios(c, d, "service_cpu") == [0.5]
    # The second pair only (the first has no service figure): (4000 + 4000) / 4 against (2000 + 4000) / 2.
    assert script.per_step_ratios(c, d, "total_cpu") == [pytest.approx(2 / 3)]
    assert script.per_step(c, "wall", 1e3) == 1.0
    verdicts: dict[str, list[str]] = {}
    lines = script.report("m sync", c, d, "step", True, verdicts=verdicts)
    assert lines[0] == "m sync: 2 pairs of blocks (6 steps each way)"
    assert len(lines) == 6 and all("D<=C: too few pairs" in line for line in lines[1:5])
    assert lines[-1].endswith("bit for bit equal: yes")
    assert verdicts == {name: ["too few pairs"] for _, name, _, _, _ in script.MEASURES}


def test_the_tally_counts_each_measures_verdicts() -> None:
    said = {"wall time": ["yes", "not shown", "yes"], "service CPU": ["no"]}
    lines = script.tally(said)
    assert lines[0] == "  wall time    driver state <= client state: yes 2, not shown 1 (of 3)"
    assert lines[1] == "  service CPU  driver state <= client state: no 1 (of 1)"
    assert lines[2].endswith("none (of 0)") and len(lines) == len(script.MEASURES)


def test_the_service_clock_counts_cpu_time_of_every_thread() -> None:
    clock = script.ProcessClock(os.getpid())
    first = clock.read()
    assert first is not None
    sum(i * i for i in range(200_000))
    second = clock.read()
    assert second is not None and second[0] > first[0] and str(os.getpid()) in second[1]
    assert script.ProcessClock(2**22 + 12345).read() is None  # no such process
    assert script.cpu_line().startswith("CPU: ") and script.load_line().startswith("load average")


def test_a_short_run_compares_both_ways_on_one_path(capsys) -> None:
    args = ["--models", "tts_float", "--paths", "sync", "--pairs", "6", "--block", "2", "--skip-partition"]
    assert script.main(args) == 0
    out = capsys.readouterr().out
    assert "tts_float sync: 6 pairs of blocks (12 steps each way)" in out
    for measure in ("wall time ms/step", "service CPU us/step", "client CPU us/step", "CPU of both us/step"):
        assert measure in out
    assert "LSTM verdicts over every model and path:" in out
    assert "main output bit for bit equal: yes" in out
    assert out.startswith("CPU: ")


@pytest.mark.parametrize(
    "args", [["--paths", "teleport"], ["--models", "mobilenet"], ["--pairs", "0"], ["--block", "x"]]
)
def test_bad_options_exit_2(args, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        script.main(args)
    assert e.value.code == 2


def test_instruction_counts_are_per_step_and_tallied_per_process() -> None:
    counts = {
        ("m", "sync"): {"C": [(8, 800, 8000)], "D": [(4, 320, 4040), (4, 320, 4040)]},
        ("m", "burst"): {"C": [(8, 800, 8000)], "D": [(8, 880, 7920)]},
    }
    row = script.instruction_row("m", "sync", counts[("m", "sync")], True)
    assert row.split() == ["m", "sync", "100", "80", "1,000", "1,010", "1,100", "1,090", "0.9909", "yes"]
    assert script.instruction_tally(counts) == [
        "  client   driver state <= client state on 1 of 2 paths",
        "  service  driver state <= client state on 1 of 2 paths",
        "  both     driver state <= client state on 2 of 2 paths",
    ]
