"""Wall time of `mlts validate --full` on one worker and on a local Dask cluster of 2 (or more).

usage: python benchmarks/cluster_validate.py [--driver sample-all] [--workers 1,2] [--repeats 1]
       [--out DIR] [-- more mlts validate options]

For each worker count N it runs `python -m mlts validate --driver D --full --cluster local:N --out
DIR/local-N-R` as a child process (the cluster's start-up counted), and once without --cluster (the
single-machine run, the baseline), in turn per repeat so drift hits each alike. It prints one line
per run (wall seconds, cases, failing cases, units and the units' own seconds summed), then per
configuration the median wall time and its speed-up over the single-machine run, and checks that
every run has the same case outcomes as the single-machine one (a line `outcomes differ` otherwise).

Run it on a quiet machine: the figure is a wall time, and other work on the cores makes it worthless.
Needs the cluster extra (pip install 'mlts[cluster]').
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(out: str, driver: str, cluster: str | None, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "mlts", "validate", "--driver", driver, "--full", "--out", out, *extra]
    if cluster is not None:
        cmd += ["--cluster", cluster]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        doc = json.load(f)
    section = doc["validate"]
    units = doc.get("cluster", {}).get("units", [])
    return {
        "wall": wall,
        "cases": len(section["cases"]),
        "failing": sum(c["outcome"] in ("fail", "error", "hang") for c in section["cases"]),
        "outcomes": {(c.get("device"), c["suite"], c["name"]): c["outcome"] for c in section["cases"]},
        "units": len(units),
        "unit_seconds": sum(u["seconds"] for u in units),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sample-all")
    parser.add_argument("--workers", default="1,2", help="comma-separated local cluster sizes")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=None, help="folder for the runs' results (default: a temporary one)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    sizes = [int(n) for n in args.workers.split(",") if n.strip()]
    root = args.out or tempfile.mkdtemp(prefix="mlts-cluster-bench-")
    configs: list[tuple[str, str | None]] = [("single", None)] + [(f"local-{n}", f"local:{n}") for n in sizes]
    walls: dict[str, list[float]] = {name: [] for name, _ in configs}
    baseline = None
    for r in range(args.repeats):
        for name, cluster in configs:
            result = run(os.path.join(root, f"{name}-{r}"), args.driver, cluster, extra)
            walls[name].append(result["wall"])
            if baseline is None and cluster is None:
                baseline = result["outcomes"]
            same = "" if result["outcomes"] == baseline else "  outcomes differ from the single-machine run"
            print(
                f"{name:<10} run {r}: {result['wall']:8.1f} s wall, {result['cases']} cases, "
                f"{result['failing']} failing, {result['units']} units ({result['unit_seconds']:.1f} unit-s){same}",
                flush=True,
            )
    base = statistics.median(walls["single"])
    for name, _ in configs:
        median = statistics.median(walls[name])
        print(f"{name:<10} median {median:8.1f} s   speed-up over single {base / median:5.2f}x")
    print(f"results in {root}")


if __name__ == "__main__":
    main()
