"""How repeatable `mlts calibrate` is: the same calibration twice, and how far the two sets of numbers differ.

usage: python benchmarks/calibration_repeatability.py [--driver NAME] [--models REGEX] [--quick]
       [--threads N] [--in-process]

Both runs use the same driver, workloads, thread count and run lengths, one
after the other in this process (the driver is restarted for each). For every
capabilities entry both runs measured, the table shows run 1's and run 2's
exec_time and power_usage and the larger of their two relative differences,
|a - b| / min(a, b); the last line is the largest over all entries. Entries
only one run measured are listed as such. Each run's warnings are printed too,
since a noisy run explains a large difference.
"""

from __future__ import annotations

import argparse
import sys


def relative_difference(a: float, b: float) -> float:
    """|a - b| / min(a, b) for two numbers > 0: 0.1 means the larger is 10% above the smaller."""
    return abs(a - b) / min(a, b)


def entries(doc: dict) -> dict[str, dict]:
    """Every measured capabilities entry of a document: operand types, then the relaxed ones."""
    caps = doc["capabilities"]
    out = dict(caps["operand_performance"])
    for key in ("relaxed_scalar", "relaxed_tensor", "if", "while"):
        if caps[key] is not None:
            out[key] = caps[key]
    return out


def comparison_lines(first: dict, second: dict) -> list[str]:
    """The table of both runs' numbers and the largest relative difference per entry, then overall."""
    a, b = entries(first), entries(second)
    lines = [
        f"{'entry':<28} {'exec 1':>8} {'exec 2':>8} {'power 1':>8} {'power 2':>8} {'max rel diff':>13}",
    ]
    worst = 0.0
    for name in [*a, *(n for n in b if n not in a)]:
        if name not in a or name not in b:
            lines.append(f"{name:<28} measured only in run {1 if name in a else 2}")
            continue
        diff = max(relative_difference(a[name][key], b[name][key]) for key in ("exec_time", "power_usage"))
        worst = max(worst, diff)
        lines.append(
            f"{name:<28} {a[name]['exec_time']:>8.3f} {b[name]['exec_time']:>8.3f} "
            f"{a[name]['power_usage']:>8.3f} {b[name]['power_usage']:>8.3f} {100 * diff:>12.1f}%"
        )
    lines.append(f"largest relative difference over all entries: {100 * worst:.1f}%")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--driver", default="sample-all")
    p.add_argument("--models", default=None, metavar="REGEX", help="narrow the reference workloads")
    p.add_argument("--quick", action="store_true", help="0.2 s warm-up, 0.5 s and 5 calls timed")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--in-process", action="store_true", help="load the driver in this process")
    a = p.parse_args()

    from mlts.calibrate.measure import CalibrationConfig, calibrate
    from mlts.calibrate.workloads import default_workloads
    from mlts.runtime.discovery import discover

    spec = discover()[a.driver]
    config = CalibrationConfig(threads=a.threads, in_process=a.in_process)
    config = config.quick() if a.quick else config
    workloads = default_workloads(a.models)
    print(
        f"driver={a.driver} threads={a.threads} warmup={config.warmup_s}s duration>={config.duration_s}s "
        f"calls>={config.min_iterations} workloads={', '.join(w.name for w in workloads)}"
    )
    docs = []
    for run in (1, 2):
        doc = calibrate(spec, workloads, config)
        docs.append(doc)
        print(f"run {run}: power from {doc['power_source']}, confident: {doc['confident']}")
        for warning in doc["warnings"]:
            print(f"  warning: {warning}")
    for line in comparison_lines(*docs):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
