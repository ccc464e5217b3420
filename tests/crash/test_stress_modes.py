"""`mlts stress`: every mode on the sample driver, each fault of sample-faulty detected as its outcome, no orphans.

The fault-injection driver is the oracle: a driver that segfaults must give
FAILURE naming SIGSEGV (or CRASH when it runs inside the test process), one
that hangs must give HANG, one that returns wrong results or error codes must
give FAILURE; and after every test no driver or test process may be left.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mlts.cli import main
from mlts.crash.modes import DEGRADATION_PAIRS, slowdown
from tests._procs import our_processes

MODEL = "^mobilenet_v1_0.25_128$"
QUICK = ["--duration", "0.6", "--grace", "4", "--models", MODEL]


def _our_processes() -> list[str]:
    """This test run's stress children and driver services (zombies excluded), never other users'."""
    return our_processes("mlts.crash.child", "mlts.crash.priority_load", "mlts.ipc.service")


@pytest.fixture(autouse=True)
def no_orphans():
    before = set(_our_processes())
    yield
    deadline = time.monotonic() + 5
    left = [p for p in _our_processes() if p not in before]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in _our_processes() if p not in before]
    assert not left, f"processes left running: {left}"


def stress(*args: str, out: Path | None = None):
    argv = ["stress", *args, "--json"] + (["--out", str(out)] if out else [])
    result = CliRunner().invoke(main, argv)
    doc = json.loads(result.stdout) if result.stdout.strip().startswith("{") else None
    return result, doc


def by_test(doc) -> dict[str, dict]:
    return {r["test"]: r for r in doc["results"]}


def test_every_mode_on_the_sample_driver(tmp_path):
    args = [
        "all",
        "--drivers",
        "^sample-all$",
        "--processes",
        "2",
        "--kill-rate",
        "50",
        "--random-count",
        "5",
        "--degradation-limit",
        "100000",  # latency is judged by the degradation tests below; this one must not hang on busy cores
        *QUICK,
    ]
    result, doc = stress(*args, out=tmp_path / "o")
    assert result.exit_code == 0, result.output
    modes = {r["mode"] for r in doc["results"]}
    assert modes == {
        "inference-stress",
        "model-loading-stress",
        "parallel-inference-stress",
        "parallel-inference-stress-in-process",
        "client-early-termination-stress",
        "multi-process-inference-stress",
        "multi-process-model-load-stress",
        "memory-mapped-model-load-stress",
        "model-load-random-stress",
        "inference-random-stress",
        "performance-degradation-stress",
    }
    for r in doc["results"]:
        assert r["as_expected"], r
        assert r["iterations"] > 0 or r["outcome"] == "CRASH", r
    tests = by_test(doc)
    early = tests["client-early-termination-stress/sample-all"]
    assert (
        early["outcome"] == "CRASH"
        and early["signal"] == "SIGKILL"
        and early["details"]["liveness_calls"] > 0
    )
    multi = [r for r in doc["results"] if r["mode"] == "multi-process-inference-stress"]
    assert sorted(r["expected"] for r in multi) == ["CRASH", "SUCCESS"]
    # These modes hammer ONE shared service, which held no handle of its finished clients afterwards.
    shared_modes = (
        "client-early-termination-stress",
        "multi-process-inference-stress",
        "multi-process-model-load-stress",
        "performance-degradation-stress",
    )
    for mode in shared_modes:
        runs = [r for r in doc["results"] if r["mode"] == mode]
        assert len({r["details"]["shared_service"] for r in runs}) == 1, runs
        assert all(r["details"]["handles_left_by_finished_clients"] == 0 for r in runs)
    assert "shared_service" not in tests["parallel-inference-stress/sample-all"]["details"]
    assert (tmp_path / "o" / "results.json").is_file() and (tmp_path / "o" / "report.html").is_file()
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert saved["kind"] == "stress" and len(saved["results"]) == len(doc["results"])


def test_burst_execution_in_inference_and_multi_process_modes(tmp_path):
    for mode in ("inference-stress", "multi-process-inference-stress"):
        args = [mode, "--drivers", "^sample-all$", "--execution", "burst", "--processes", "2"]
        result, doc = stress(*args, "--kill-rate", "50", *QUICK)
        assert result.exit_code == 0, result.output
        for r in doc["results"]:
            assert r["as_expected"], r
            assert r["iterations"] > 0 or r["outcome"] == "CRASH", r
        if mode.startswith("multi"):
            # A client killed mid-burst left nothing behind in the shared service.
            assert sorted(r["expected"] for r in doc["results"]) == ["CRASH", "SUCCESS"]
            assert all(r["details"]["handles_left_by_finished_clients"] == 0 for r in doc["results"])


FAULTY = ["--drivers", "^sample-faulty$"]


def fault(*options: str) -> list[str]:
    return [x for o in options for x in ("--driver-option", o)]


def test_driver_segfault_is_a_failure_naming_the_signal_and_the_call():
    result, doc = stress(
        "inference-stress", *FAULTY, *fault("crash=segv", "crash_at=executeSynchronously:3"), *QUICK
    )
    assert result.exit_code == 1
    (r,) = doc["results"]
    assert r["outcome"] == "FAILURE" and r["driver_died"] is True
    assert "SIGSEGV" in r["reason"] and "executeSynchronously" in r["reason"]
    assert r["iterations"] == 2  # two calls succeeded before the crash
    assert any("injected fault" in line for line in r["log_tail"])


def test_driver_abort_while_compiling_is_a_failure():
    result, doc = stress(
        "model-loading-stress", *FAULTY, *fault("crash=abort", "crash_at=prepareModel:2"), *QUICK
    )
    (r,) = doc["results"]
    assert (
        r["outcome"] == "FAILURE"
        and r["driver_died"]
        and "SIGABRT" in r["reason"]
        and "prepareModel" in r["reason"]
    )


def test_driver_crash_inside_the_test_process_is_a_crash():
    args = [
        "inference-stress",
        "--in-process",
        *FAULTY,
        *fault("crash=segv", "crash_at=executeSynchronously:2"),
    ]
    result, doc = stress(*args, *QUICK)
    (r,) = doc["results"]
    assert r["outcome"] == "CRASH" and r["signal"] == "SIGSEGV" and r["expected"] == "SUCCESS"


def test_driver_hang_is_a_hang_and_everything_is_killed():
    started = time.monotonic()
    result, doc = stress("inference-stress", *FAULTY, *fault("hang=executeSynchronously:2"), *QUICK)
    (r,) = doc["results"]
    assert r["outcome"] == "HANG" and "while running" in r["reason"]
    assert time.monotonic() - started < 60


def test_wrong_results_and_error_codes_are_failures():
    _, doc = stress("inference-stress", *FAULTY, *fault("wrong=executeSynchronously:2"), *QUICK)
    (r,) = doc["results"]
    assert r["outcome"] == "FAILURE" and "wrong result at call" in r["reason"] and not r["driver_died"]
    _, doc = stress(
        "model-loading-stress", *FAULTY, *fault("error=GENERAL_FAILURE", "error_at=prepareModel:2"), *QUICK
    )
    (r,) = doc["results"]
    assert r["outcome"] == "FAILURE" and "GENERAL_FAILURE" in r["reason"] and "prepareModel" in r["reason"]


def test_a_crashing_driver_does_not_disturb_the_liveness_check():
    # The killed client's own driver process is separate from the checker's: the checker must see no error.
    _, doc = stress("client-early-termination-stress", "--drivers", "^sample-all$", *QUICK)
    (r,) = doc["results"]
    assert r["outcome"] == "CRASH" and r["as_expected"]


def test_performance_degradation_limit_is_enforced():
    _, doc = stress(
        "performance-degradation-stress", "--drivers", "^sample-all$", "--degradation-limit", "-90", *QUICK
    )
    (r,) = doc["results"]
    # A limit of -90% cannot be met: the latency would have to fall tenfold while compiling.
    assert r["outcome"] == "FAILURE" and "median latency grew" in r["reason"]
    d = r["details"]
    assert d["median_alone_ms"] > 0 and d["limit"] == pytest.approx(-0.9)
    lo, hi = d["growth_ci95"]
    assert lo <= d["growth"] <= hi and lo > -0.9
    assert len(d["phases"]) == DEGRADATION_PAIRS and all(p["median_alone_ms"] > 0 for p in d["phases"])
    # Each loaded phase timed A once B had reached the driver; B was compiled in every one.
    assert all(0 < p["lead_in_ms"] < 5000 for p in d["phases"]) and d["compilations"] >= DEGRADATION_PAIRS


def test_performance_degradation_fails_a_driver_whose_compiler_slows_its_executions():
    both = ["--models", "^mobilenet_v1_0.25_128(_quant)?$", "--duration", "6", "--grace", "8"]
    # A driver whose compiler shares the device: every execution during a compilation sleeps 2 ms
    # more (about 3x A's time alone), and each compilation lasts at least 1 s, longer than a loaded
    # phase (0.9 s). A loaded phase starts unslowed until B's model has reached the driver (shipped,
    # then decoded on the service's lower-priority preparation pool); its slowed calls are fewer per
    # second than the unslowed ones, so the pooled median is slowed only while that lead-in stays
    # under about a fifth of the phase: a moderate slowdown over long phases keeps it there on a
    # busy machine, where a 5 ms slowdown over 0.45 s phases did not.
    slowing = fault("compile_contention_ms=2", "slow_ms=1000", "slow_method=prepareModel")
    result, doc = stress("performance-degradation-stress", *FAULTY, *slowing, *both)
    (r,) = doc["results"]
    assert result.exit_code == 1 and r["outcome"] == "FAILURE", r
    assert "median latency grew" in r["reason"] and r["details"]["growth_ci95"][0] > 0.5
    assert r["details"]["model_a"] != r["details"]["model_b"]


def test_performance_degradation_fails_only_when_the_whole_interval_is_above_the_limit():
    rng = np.random.default_rng(0)
    alone = list(1e-3 * (1 + 0.01 * rng.random(200)))
    # Twice as slow with little noise: the interval is near +100%, wholly above a 50% limit.
    tight = slowdown(alone, [2 * a for a in alone])
    assert tight["growth"] == pytest.approx(1.0, abs=0.02) and tight["growth_ci95"][0] > 0.5
    # The same median ratio, 1.6, from few and spread samples: the interval reaches below 50%, no FAILURE.
    spread = slowdown([1e-3, 0.5e-3, 2e-3, 1e-3, 1e-3, 3e-3], [1.6e-3, 0.6e-3, 5e-3, 1.6e-3, 1.6e-3, 1.6e-3])
    assert (
        spread["growth"] == pytest.approx(0.6) and spread["growth_ci95"][0] < 0.5 < spread["growth_ci95"][1]
    )
    # Hand-computed: 6 samples each, the 95% interval of the median is [min, max] (ranks 1 and 6).
    assert spread["growth_ci95"] == pytest.approx([0.6e-3 / 3e-3 - 1, 5e-3 / 0.5e-3 - 1])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["no-such-mode"], "unknown stress mode 'no-such-mode'"),
        (["inference-stress", "--kill-rate", "150"], "150"),
        (["inference-stress", "--duration", "0"], "0"),
        (["inference-stress", "--duration", "-3"], "-3"),
        (["inference-stress", "--threads", "0"], "0"),
        (["inference-stress", "--execution", "bursty"], "bursty"),
    ],
)
def test_bad_options_are_usage_errors(args, needle):
    result = CliRunner().invoke(main, ["stress", *args])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_unknown_driver_or_model_is_a_one_line_error():
    for args, needle in (
        (["inference-stress", "--drivers", "^nope$"], "no driver matches"),
        (["inference-stress", "--models", "^nope$"], "matches no model"),
    ):
        result = CliRunner().invoke(main, ["stress", *args])
        assert result.exit_code == 2 and needle in result.output.strip().splitlines()[-1]


def _interruptible() -> None:
    """In the child before it runs mlts: SIGINT's default action, as a command typed in a shell gets it.
    A process started in the background by a shell without job control (a CI job, say) ignores SIGINT,
    and its children inherit that: mlts would then never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_keeps_finished_tests_and_leaves_no_process(tmp_path):
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "mlts", "stress", "all", "--drivers", "^sample-all$", "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--duration", "1", "--models", MODEL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_interruptible,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "results.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (out / "results.json").exists()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    doc = json.loads((out / "results.json").read_text())
    assert doc["kind"] == "stress" and len(doc["results"]) >= 1
    assert b"interrupted by SIGINT (Ctrl-C); " in err and b"tests finished and kept" in err
    # Marked incomplete: planned against done, and the report written from what finished.
    completion = doc["completion"]
    assert completion["interrupted"] and not completion["complete"]
    assert completion["done"] == len(doc["results"]) < completion["planned"]
    assert (out / "report.html").is_file()


def test_random_graph_with_a_wrong_result_is_dumped_for_inspect(tmp_path):
    dumps = tmp_path / "dumps"
    args = ["inference-random-stress", *FAULTY, *fault("wrong=always"), "--dump-dir", str(dumps), *QUICK]
    _, doc = stress(*args)
    (r,) = doc["results"]
    assert r["outcome"] == "FAILURE" and "wrong result" in r["reason"] and "dumped to" in r["reason"]
    (dumped,) = dumps.glob("random-*.nnm")
    inspected = CliRunner().invoke(main, ["inspect", str(dumped), "--json"])
    shown = json.loads(inspected.stdout)
    assert inspected.exit_code == 0 and shown["summary"]["operations"] == 10
    assert "wrong result" in shown["metadata"]["reason"] and shown["metadata"]["seed"]


def test_random_graph_load_stress_counts_graphs():
    _, doc = stress(
        "model-load-random-stress",
        "--drivers",
        "^sample-all$",
        "--random-count",
        "20",
        "--random-ops",
        "30",
        *QUICK,
    )
    (r,) = doc["results"]
    assert r["outcome"] == "SUCCESS" and r["details"]["ops_per_graph"] == 30
    assert (
        r["details"]["compiled"] + r["details"]["invalid"] + r["details"]["unsupported"]
        == r["iterations"]
        <= 20
    )


def test_priority_stress_fails_a_driver_that_ignores_priorities():
    _, doc = stress(
        "priority-stress",
        "--drivers",
        "^sample-faulty$",
        "--driver-option",
        "ignore_priority=1",
        "--threads",
        "2",
        "--duration",
        "6",
        "--grace",
        "10",
        "--models",
        MODEL,
    )
    (r,) = doc["results"]
    assert r["outcome"] == "FAILURE" and "priorities made no difference" in r["reason"], r
    for phase in ("a_high_alone", "a_high_vs_b_low", "a_medium_vs_b_medium"):
        assert r["details"][phase]["median_ms"] > 0 and r["details"][phase]["p90_ms"] > 0
    # B's progress was counted in both phases; the work did not shift to A (or A missed the goal).
    d = r["details"]
    assert d["b_per_s_vs_a_high"] > 0 and d["b_per_s_vs_a_medium"] > 0 and d["a_per_s_high"] > 0
    assert not d["protected"] and (d["shift_to_a"] < d["min_shift"] or not d["within_goal"])
    assert r["details"]["handles_left_by_finished_clients"] == 0


def test_the_two_client_priority_stress_runs_its_load_in_another_client():
    _, doc = stress(
        "priority-stress-two-clients",
        "--drivers",
        "^sample-faulty$",
        "--driver-option",
        "ignore_priority=1",
        "--duration",
        "3",
        "--grace",
        "10",
        "--models",
        MODEL,
    )
    (r,) = doc["results"]
    assert r["outcome"] == "FAILURE" and "priorities made no difference" in r["reason"], r
    assert r["details"]["form"] == "two clients"
    for phase in ("a_high_alone", "a_high_vs_b_low", "a_medium_vs_b_medium"):
        assert r["details"][phase]["calls"] >= 5
    # The load process reported B's progress in both phases.
    d = r["details"]
    assert d["b_per_s_vs_a_high"] > 0 and d["b_per_s_vs_a_medium"] > 0
    assert not d["protected"] and (d["shift_to_a"] < d["min_shift"] or not d["within_goal"])
    assert r["details"]["handles_left_by_finished_clients"] == 0
