"""What the second thread gives the sample driver's kernels: per operation, one thread against two.

usage: python benchmarks/kernel_threads.py [--runs N] [--threads N] [MODEL ...]

For each zoo model (default: mobilenet_v1_1.0_224, its _quant variant, mobilenet_v2_1.0_224,
mobilenet_v1_0.25_128 and mobilenet_v2_0.35_128) the driver's plan runs in this process, its runs
alternating between one kernel thread and --threads (default 2), so both halves see the same
machine load. Prints the median execution time and the CPU time per run of each half, their ratio,
how often the kernels' pool fell back to one thread after a worker stalled it (a busy machine), the
pool's counters per run of --threads (jobs handed to it, tasks its workers ran, wake-ups of sleeping
workers, time spent waiting for a worker's task), and
the median time of each operation type with its ratio: the operations that do not scale. The
load average before each model is printed too; on a busy machine the second thread has no core of
its own and the ratio says nothing about a quiet one (see docs/driver-performance.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = [
    "mobilenet_v1_1.0_224",
    "mobilenet_v1_1.0_224_quant",
    "mobilenet_v2_1.0_224",
    "mobilenet_v1_0.25_128",
    "mobilenet_v2_0.35_128",
]


def profile(name: str, runs: int, threads: int) -> None:
    from benchmarks.execution_paths import feeds_for, zoo_model
    from driver import native
    from driver.executor import Plan
    from mlts.hal.enums import OperationType

    model = zoo_model(name)
    plan = Plan(model)
    feeds = feeds_for(model, 4)
    counts = (1, threads)
    for i in range(6):
        native.set_threads(counts[i % 2])
        plan.run(feeds[i % 4])
    per: dict[int, dict[int, list[int]]] = {t: {} for t in counts}
    total: dict[int, list[float]] = {t: [] for t in counts}
    cpu: dict[int, float] = dict.fromkeys(counts, 0.0)
    load = os.getloadavg()[0]
    backoffs = native.pool_backoffs()
    stats = dict.fromkeys(native.POOL_STATS, 0)
    for i in range(2 * runs):
        t = counts[i % 2]
        native.set_threads(t)
        times: list[tuple[int, int]] = []
        s0 = native.pool_stats()
        c0, t0 = time.process_time(), time.perf_counter()
        plan.run(feeds[i % 4], op_times=times)
        total[t].append(time.perf_counter() - t0)
        cpu[t] += time.process_time() - c0
        if t == threads:
            s1 = native.pool_stats()
            for key in stats:
                stats[key] += s1[key] - s0[key]
        for index, ns in times:
            per[t].setdefault(index, []).append(ns)
    one, many = (statistics.median(total[t]) * 1e3 for t in counts)
    print(
        f"{name}: load {load:.2f}; 1 thread {one:.2f} ms (cpu {cpu[1] / runs * 1e3:.2f}), "
        f"{threads} threads {many:.2f} ms (cpu {cpu[threads] / runs * 1e3:.2f}); ×{one / many:.2f}; "
        f"pool fell back to one thread {native.pool_backoffs() - backoffs} times"
    )
    print(
        f"  per {threads}-thread run: {stats['jobs'] / runs:.1f} jobs handed to the pool, "
        f"{stats['worker_tasks'] / runs:.1f} tasks run by workers, {stats['wakes'] / runs:.1f} wake-ups, "
        f"{stats['wait_ns'] / runs / 1e3:.1f} us waiting for workers' tasks; "
        f"idle workers found themselves descheduled {stats['preempted']} times, "
        f"the machine crowded {stats['crowded']} times"
    )
    by_type: dict[str, list[float]] = {}
    for index, values in per[1].items():
        op = model.main.operations[index]
        kind = OperationType(op.type).name
        row = by_type.setdefault(kind, [0.0, 0.0])
        row[0] += statistics.median(values) / 1e6
        row[1] += statistics.median(per[threads][index]) / 1e6
    for kind, (a, b) in sorted(by_type.items(), key=lambda kv: -kv[1][0]):
        print(f"  {kind:28s} {a:8.3f} ms {b:8.3f} ms  ×{a / b if b else 0:.2f}")
    native.set_threads(threads)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=MODELS)
    p.add_argument("--runs", type=int, default=30, help="runs of each half")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    from driver import native

    if not native.available():
        print(f"no compiled kernels: {native.WHY_NOT}")
        return 1
    print(native.describe())
    for name in a.models:
        profile(name, a.runs, a.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
