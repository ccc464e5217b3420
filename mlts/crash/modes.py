"""The stress modes as they run inside a test's child process (see mlts.crash.suite for the plan).

Each function gets the StressContext, does its set-up, calls `ctx.ready()`,
loops until the test's time is up and returns details for the record. A
FAILURE is raised as StressFailure (or a HalError from the driver). Worker
threads stop at the first error, which becomes the test's reason.
"""

from __future__ import annotations

import contextlib
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlts.crash.context import StressContext
from mlts.crash.outcome import StressFailure
from mlts.crash.priority_mode import priority_stress, priority_stress_two_clients
from mlts.hal.errors import HalError
from mlts.records.tolerance import STRESS_NETWORK

# Whole-network agreement with the CPU reference path (the sample driver's NumPy executor run in this
# process): float outputs within 1e-3 + 1e-3*|e|, 8-bit outputs within 3 units (CTS's MobileNet rule).
FLOAT_ATOL = STRESS_NETWORK.atol
FLOAT_RTOL = STRESS_NETWORK.rtol
QUANT_UNITS = STRESS_NETWORK.units
# performance-degradation-stress: FAILURE when model A's median latency grows by more than this (MLTS: 50%).
DEGRADATION_LIMIT_PERCENT = 50.0


def disagreement(actual: Sequence[np.ndarray | None], expected: Sequence[np.ndarray]) -> str | None:
    """None when every output agrees with the reference within the tolerance above, else why not."""
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a is None:
            return f"output {k} is missing (the driver gave no value)"
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            return f"output {k} has shape {list(a.shape)}, the reference {list(e.shape)}"
        if a.dtype.kind in "ui":
            worst = int(np.max(np.abs(a.astype(np.int64) - e.astype(np.int64)), initial=0))
            if worst > QUANT_UNITS:
                return (
                    f"output {k} differs from the reference by {worst} quantized units (limit {QUANT_UNITS})"
                )
            continue
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        bad = ~(diff <= FLOAT_ATOL + FLOAT_RTOL * np.abs(e.astype(np.float64)))
        if np.any(bad):
            i = int(np.argmax(bad.ravel()))
            return (
                f"output {k} element {i} is {a.ravel()[i]!r}, the reference {e.ravel()[i]!r} "
                f"(tolerance {FLOAT_ATOL:g} + {FLOAT_RTOL:g}*|e|)"
            )
    return None


def run_threads(ctx: StressContext, count: int, work: Callable[[int], None]) -> None:
    """`work(i)` on `count` threads until the time is up; the first error stops all and is raised."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def loop(i: int) -> None:
        try:
            while ctx.running() and not stop.is_set():
                work(i)
        except BaseException as e:  # noqa: BLE001  (handed to the main thread)
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _checked_inputs(ctx: StressContext, names: list[str]) -> list[tuple[str, Any, list, list]]:
    """Per model: (name, model, inputs, the CPU reference path's outputs for them), computed once."""
    from mlts.crash.random_check import reference_outputs

    out = []
    for name in names:
        model = ctx.model(name)
        inputs = ctx.inputs(model, ctx.seed)
        out.append((name, model, inputs, reference_outputs(model, inputs)))
    return out


def _sessions(ctx: StressContext, device, checked: list[tuple[str, Any, list, list]]):
    from mlts.runtime.session import Session

    out = []
    for name, model, inputs, expected in checked:
        try:
            session = Session(device, model, mode=ctx.execution, qos=ctx.qos)
        except HalError as e:
            raise ctx.failure(e, f"prepareModel of {name}") from None
        out.append((name, session, inputs, expected))
    return out


def inference(ctx: StressContext) -> dict[str, Any]:
    """Every model prepared on one driver, then inference on `threads` threads until the time is up.

    Each thread has its own sessions; every result is checked against the CPU reference path.
    """
    device = ctx.open_device()
    names = list(ctx.spec["models"])
    checked = _checked_inputs(ctx, names)
    per_thread = [_sessions(ctx, device, checked) for _ in range(ctx.threads)]
    ctx.ready()
    counter = [0] * ctx.threads

    def work(i: int) -> None:
        name, session, inputs, expected = per_thread[i][counter[i] % len(names)]
        counter[i] += 1
        try:
            outputs, _ = session.run(inputs)
        except HalError as e:
            raise ctx.failure(e, f"{ctx.execution} execution of {name}") from None
        wrong = disagreement(outputs, expected)
        if wrong is not None:
            raise StressFailure(f"{name}: wrong result at call {counter[i]}: {wrong}")
        ctx.progress()

    try:
        run_threads(ctx, ctx.threads, work)
    finally:
        for sessions in per_thread:
            for _, session, _, _ in sessions:
                try:
                    session.close()
                except HalError:
                    pass
    return {"threads": ctx.threads, "calls": ctx.iterations}


def _compile_loop(ctx: StressContext, device, models: list[tuple[str, Any]]) -> Callable[[int], None]:
    counter = [0] * max(1, ctx.threads)

    def work(i: int) -> None:
        name, model = models[counter[i] % len(models)]
        counter[i] += 1
        try:
            prepared = device.prepareModel(model)
        except HalError as e:
            raise ctx.failure(e, f"prepareModel of {name}") from None
        prepared.close()
        ctx.progress()

    return work


def load(ctx: StressContext) -> dict[str, Any]:
    """Compile (prepareModel, release) every model in turn on `threads` threads until the time is up."""
    device = ctx.open_device()
    models = [(name, ctx.model(name)) for name in ctx.spec["models"]]
    ctx.ready()
    run_threads(ctx, ctx.threads, _compile_loop(ctx, device, models))
    return {"threads": ctx.threads, "compilations": ctx.iterations}


def mmap_load(ctx: StressContext) -> dict[str, Any]:
    """Models written as .nnm files, then compiled from memory-mapped loads of them on `threads` threads."""
    from mlts.hal import nnfile

    device = ctx.open_device()
    with tempfile.TemporaryDirectory(prefix="mlts-mmap-") as tmp:
        paths = []
        for name in ctx.spec["models"]:
            path = Path(tmp) / (Path(name).stem + ".nnm")
            nnfile.write(ctx.model(name), path)
            paths.append((name, path))
        ctx.ready()
        counter = [0] * ctx.threads

        def work(i: int) -> None:
            name, path = paths[counter[i] % len(paths)]
            counter[i] += 1
            loaded = nnfile.load(path, use_mmap=True)
            try:
                prepared = device.prepareModel(loaded.model)
            except HalError as e:
                raise ctx.failure(e, f"prepareModel of memory-mapped {path.name}") from None
            prepared.close()
            ctx.progress()

        run_threads(ctx, ctx.threads, work)
    return {"threads": ctx.threads, "compilations": ctx.iterations}


def compile_until_killed(ctx: StressContext) -> dict[str, Any]:
    """client-early-termination: compile on `threads` threads until the supervisor kills this process."""
    return load(ctx)


def _median(samples: list[float]) -> float:
    return float(np.median(samples)) if samples else float("nan")


def slowdown(alone_s: list[float], loaded_s: list[float]) -> dict[str, Any]:
    """The loaded median over the alone median, minus 1, with a conservative 95% interval.

    The interval divides the ends of the two medians' distribution-free 95% intervals:
    [loaded_lo / alone_hi - 1, loaded_hi / alone_lo - 1] (as `mlts compare` does).
    """
    from mlts.bench.stats import describe

    base, under = describe(alone_s, p99_wanted=False), describe(loaded_s, p99_wanted=False)
    (a_lo, a_hi), (l_lo, l_hi) = base["median_ci95"], under["median_ci95"]
    return {
        "median_alone_ms": base["median"],
        "median_while_compiling_ms": under["median"],
        "growth": under["median"] / base["median"] - 1.0,
        "growth_ci95": [l_lo / a_hi - 1.0, l_hi / a_lo - 1.0],
    }


#: performance-degradation-stress alternates this many alone / loaded phase pairs, so a drift of the
#: machine's speed during the test falls on both sides alike.
DEGRADATION_PAIRS = 3
#: The interpreter's switch interval in the performance-degradation test process (both phases alike).
#: Its compiling thread ships model B (interpreter work in this process); with CPython's 5 ms interval
#: model A's thread would wait up to 5 ms for the interpreter lock at each call, a cost of the Python
#: harness (MLTS's runs on the JVM, without such a lock), not of the driver.
HARNESS_SWITCH_INTERVAL_S = 0.0005


@contextlib.contextmanager
def _switch_interval(seconds: float) -> Iterator[None]:
    saved = sys.getswitchinterval()
    sys.setswitchinterval(min(saved, seconds))
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


#: performance-degradation-stress: the longest a loaded phase waits for model B's compilation to reach
#: the driver before it starts timing A anyway (seconds).
LEAD_IN_LIMIT_S = 5.0


def _driver_compilations(device: Any) -> int | None:
    """How many preparations the device's service has handed its driver so far (serviceStatus
    prepare_pool.compilations_started), or None where the device does not say (not a service of
    mlts's, or an older one)."""
    status = getattr(device, "service_status", None)
    if status is None:
        return None
    try:
        return int(status()["prepare_pool"]["compilations_started"])
    except (HalError, KeyError, TypeError, ValueError):
        return None


def _wait_for_driver(device: Any, before: int | None) -> float:
    """Wait until the service has handed its driver a preparation since it counted `before` (at most
    LEAD_IN_LIMIT_S); the seconds waited (0 when the service does not count)."""
    if before is None:
        return 0.0
    start = time.monotonic()
    while time.monotonic() - start < LEAD_IN_LIMIT_S:
        now = _driver_compilations(device)
        if now is None or now > before:
            break
        time.sleep(0.001)
    return time.monotonic() - start


def degradation(ctx: StressContext) -> dict[str, Any]:
    """Model A's latency alone and while another thread compiles model B in a loop, in alternating phases.

    Model B is compiled by another client, a process of its own (mlts.crash.priority_load), as MLTS
    compiles from another thread of its app: no interpreter lock of this process is shared with the
    compiling, so what slows A is the service and its driver, not the harness. A warm-up of a tenth
    of the time, then DEGRADATION_PAIRS pairs of an alone and a loaded phase; the compiler runs only
    in loaded phases (a compilation still running when one ends is waited for). A loaded phase times
    A from the moment the service has handed B to its driver (serviceStatus' count of the driver's
    preparations; `lead_in_ms` per phase): before that the service is only decoding B, and a
    service whose preparations give way to executions would stretch that lead-in over much of the
    phase, hiding a driver whose compiler does slow its executions. The slowdown is the
    loaded median over the alone median of the pooled samples, with a conservative 95% interval
    from the two medians' distribution-free intervals, [loaded_lo / alone_hi, loaded_hi / alone_lo]
    - 1. FAILURE only when the whole interval lies above the limit (params "limit_percent", MLTS's
    50% by default): one noisy phase on a busy machine does not fail a healthy driver.

    The process runs with a short interpreter switch interval (HARNESS_SWITCH_INTERVAL_S) in both
    phases (its other threads, the connection's, do not hold A's thread up for long).
    """
    limit = float(ctx.params.get("limit_percent", DEGRADATION_LIMIT_PERCENT)) / 100.0
    from mlts.crash.priority_load import ProcessLoad
    from mlts.runtime.session import Session

    names = list(ctx.spec["models"])
    a_name, b_name = names[0], names[-1]
    device = ctx.open_device()
    a_model = ctx.model(a_name)
    inputs = ctx.inputs(a_model, ctx.seed)
    session = Session(device, a_model, qos=ctx.qos)
    load = ProcessLoad.launch(ctx, b_name, kind="compile")
    ctx.ready()
    phase_s = ctx.duration_s * 0.9 / (2 * DEGRADATION_PAIRS)

    def timed(seconds: float, into: list[float]) -> float:
        """Time A for `seconds` (at least 3 calls) into `into`; returns this phase's median."""
        samples: list[float] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(samples) < 3:
            t0 = time.perf_counter()
            session.run(inputs)
            samples.append(time.perf_counter() - t0)
            ctx.progress()
        into += samples
        return _median(samples)

    alone: list[float] = []
    loaded: list[float] = []
    phases: list[dict[str, float]] = []
    compilations = 0
    try:
        with _switch_interval(HARNESS_SWITCH_INTERVAL_S):
            end_warm = time.monotonic() + ctx.duration_s / 10
            while time.monotonic() < end_warm:
                session.run(inputs)
            for _ in range(DEGRADATION_PAIRS):
                alone_ms = timed(phase_s, alone) * 1000
                before = _driver_compilations(device)
                load.start_load("compile")
                try:
                    lead_in_ms = _wait_for_driver(device, before) * 1000
                    loaded_ms = timed(phase_s, loaded) * 1000
                finally:
                    # The compilation in flight ends before the next alone phase.
                    compilations += load.stop()
                phases.append(
                    {
                        "median_alone_ms": alone_ms,
                        "median_while_compiling_ms": loaded_ms,
                        "lead_in_ms": lead_in_ms,
                    }
                )
    except HalError as e:
        raise ctx.failure(e, f"executeSynchronously of {a_name}") from None
    finally:
        load.close()
        session.close()
    verdict = slowdown(alone, loaded)
    growth, interval = verdict["growth"], verdict["growth_ci95"]
    details = {
        "model_a": a_name,
        "model_b": b_name,
        **verdict,
        "limit": limit,
        "phases": phases,
        # How much compiling A ran against: a service that stopped preparing would show few.
        "compilations": compilations,
        "rule": "FAILURE when the lower end of growth_ci95 is above limit",
        "harness_switch_interval_ms": HARNESS_SWITCH_INTERVAL_S * 1000,
    }
    if interval[0] > limit:
        raise StressFailure(
            f"{a_name} median latency grew {growth:+.0%} (95% interval {interval[0]:+.0%} to "
            f"{interval[1]:+.0%}) while {b_name} was compiled ({verdict['median_alone_ms']:.2f} -> "
            f"{verdict['median_while_compiling_ms']:.2f} ms over {DEGRADATION_PAIRS} alternating phase pairs; limit {limit:+.0%})",
            details=details,
        )
    return details


def _random_spec(ctx: StressContext, device):
    from mlts.crash.random_graph import GraphSpec, supported_op_types

    base = GraphSpec(
        ops=int(ctx.params.get("ops", 10)),
        min_dim=int(ctx.params.get("min_dim", 1)),
        max_dim=int(ctx.params.get("max_dim", 16)),
    )
    types = supported_op_types(device, base)
    if not types:
        raise StressFailure("the driver supports none of the random-graph operations")
    return GraphSpec(ops=base.ops, min_dim=base.min_dim, max_dim=base.max_dim, op_types=types)


def _random(ctx: StressContext, run: bool) -> dict[str, Any]:
    """Random graphs compiled (and run and checked) until the time or the graph count is used up."""
    from mlts.crash.random_check import (
        check_outputs,
        classify_failure,
        dump,
        random_inputs,
        reference_outputs,
        supported_operations,
    )
    from mlts.crash.random_graph import random_model
    from mlts.runtime.session import Session

    device = ctx.open_device()
    spec = _random_spec(ctx, device)
    limit = ctx.params.get("count")
    dump_dir = ctx.params.get("dump_dir")
    counts = {"compiled": 0, "ran": 0, "invalid": 0, "unsupported": 0}
    rng = random.Random(ctx.seed)
    ctx.ready()
    while ctx.running() and (limit is None or ctx.iterations < int(limit)):
        seed = rng.randrange(2**31)
        model = random_model(seed, spec)
        try:
            session = Session(device, model, qos=ctx.qos)
        except HalError as e:
            kind = classify_failure(e, supported_operations(device, model))
            if kind in ("invalid", "unsupported"):
                counts[kind] += 1
                ctx.progress()
                continue
            _dump_and_fail(ctx, dump, model, dump_dir, seed, spec, f"prepareModel failed: {e}", e)
        counts["compiled"] += 1
        try:
            if run:
                inputs = random_inputs(model, seed)
                try:
                    outputs, _ = session.run(inputs)
                except HalError as e:
                    _dump_and_fail(ctx, dump, model, dump_dir, seed, spec, f"execution failed: {e}", e)
                wrong = check_outputs(outputs, reference_outputs(model, inputs))
                if wrong is not None:
                    _dump_and_fail(ctx, dump, model, dump_dir, seed, spec, f"wrong result: {wrong}", None)
                counts["ran"] += 1
        finally:
            try:
                session.close()
            except HalError:
                pass
        ctx.progress()
    return {"ops_per_graph": spec.ops, **counts}


def _dump_and_fail(ctx, dump, model, dump_dir, seed, spec, reason: str, error: HalError | None):
    where = ""
    if dump_dir:
        path = dump(model, Path(dump_dir), seed, spec, reason)
        where = f" (model dumped to {path})"
    if error is not None:
        failure = ctx.failure(error, f"random graph seed {seed}")
        raise StressFailure(failure.reason + where, driver_died=failure.driver_died)
    raise StressFailure(f"random graph seed {seed}: {reason}{where}")


def random_load(ctx: StressContext) -> dict[str, Any]:
    return _random(ctx, run=False)


def random_inference(ctx: StressContext) -> dict[str, Any]:
    return _random(ctx, run=True)


CHILD_MODES: dict[str, Callable[[StressContext], dict[str, Any]]] = {
    "inference": inference,
    "load": load,
    "mmap-load": mmap_load,
    "compile-until-killed": compile_until_killed,
    "degradation": degradation,
    "random-load": random_load,
    "random-inference": random_inference,
    "priority": priority_stress,
    "priority-two-clients": priority_stress_two_clients,
}
