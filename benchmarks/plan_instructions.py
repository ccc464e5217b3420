"""Instructions per execution of an image zoo model's plan in process, counted by callgrind.

usage: python benchmarks/plan_instructions.py [MODEL ...] [--runs N] [--warmup N] [--threads N]
       [--top N] [--keep DIR]

What an execution costs in instructions does not depend on how busy the machine is, where its wall
time does: the figure to compare kernels by on a shared machine. For each model (default:
mobilenet_v1_0.25_128 and mobilenet_v2_0.35_128) the driver's plan (`driver.executor.Plan`) runs in
this process with N kernel threads (default 1) on random inputs, under valgrind's callgrind: the
counters are zeroed before the counted runs and dumped after them (`--zero-before=getsid
--dump-before=getpgid`, as benchmarks/step_instructions.py does). Prints
`MODEL instructions/execution I n=N threads=T` and with `--top N` the N functions of most
instructions (self cost) per execution with their share: the kernels (`gemm_packed_block`: GEMMs on
packed weights, `dw_f32_task` / `dw_border_f32`: float depthwise, `im2col_f32_task`: patch
matrices, `gemm_fewrows`: one-row fully connected layers) and the Python between them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("mobilenet_v1_0.25_128", "mobilenet_v2_0.35_128")


def measure(models: list[str], runs: int, warmup: int, threads: int) -> None:
    from benchmarks.execution_paths import feeds_for, zoo_model
    from driver import native
    from driver.executor import Plan

    native.set_threads(threads)
    for name in models:
        model = zoo_model(name)
        plan = Plan(model)
        feeds = feeds_for(model, 2)
        for i in range(warmup):
            plan.run(feeds[i % 2])
        os.getsid(0)  # callgrind zeroes its counters here
        for i in range(runs):
            plan.run(feeds[i % 2])
        os.getpgid(0)  # callgrind dumps the counters of the runs here
        print(f"{name} n={runs} threads={threads}", flush=True)


def with_callgrind(a: argparse.Namespace) -> int:
    from callgrind_dumps import run_counted, top, totals

    def report(line: str, dump: str) -> None:
        name, n, threads = line.split()
        print(f"{name} instructions/execution {totals(dump) / a.runs:,.0f} {n} {threads}", flush=True)
        if a.top:
            print("\n".join(top(dump, a.top, a.runs)), flush=True)

    args = ["--runs", str(a.runs), "--warmup", str(a.warmup), "--threads", str(a.threads)]
    return run_counted(__file__, [*args, *a.models], a.models, a.keep, a.timeout, report)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=list(MODELS), help="image zoo models")
    p.add_argument("--runs", type=int, default=5, help="counted executions per model")
    p.add_argument("--warmup", type=int, default=3, help="executions before counting")
    p.add_argument("--threads", type=int, default=1, help="the driver's kernel threads")
    p.add_argument("--top", type=int, default=0, help="print the N functions of most instructions")
    p.add_argument("--keep", default="", help="keep the callgrind dumps in this directory")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds the valgrind run may take")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.runs < 1 or a.warmup < 0 or a.threads < 1:
        p.error("--runs and --threads must be >= 1, --warmup >= 0")
    from mlts.models import zoo

    known = {m.name for m in zoo.list_models()}
    unknown = [m for m in a.models if m not in known]
    if unknown:
        p.error(f"unknown zoo model(s): {', '.join(unknown)}")
    if a.child:
        measure(a.models, a.runs, a.warmup, a.threads)
        return 0
    return with_callgrind(a)


if __name__ == "__main__":
    sys.exit(main())
