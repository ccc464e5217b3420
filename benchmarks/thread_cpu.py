"""CPU time per call of every thread of the client and of its driver service: who uses the cores.

usage: python benchmarks/thread_cpu.py [--threads N[,N...]] [--execution sync,burst] [--calls N]
       [--warmup N] [--driver NAME] [MODEL ...]

Wall time on a shared machine says little; the CPU time each thread ran does not depend on how busy
the machine is (only on what the thread does, its spinning included). For each model, thread count
and execution path this runs MODEL in a fresh private driver service started with that thread count
(the zoo's models, converted as the benchmarks do; default mobilenet_v1_0.25_128), `--warmup` calls
first, then `--calls` timed calls of `Session.run` on one fixed input, and prints per call: the
client's threads and the service's threads, each by name, in µs of CPU (the kernel's per-thread run
time, /proc/PID/task/TID/schedstat, nanoseconds), the sum of each side, and the driver's own median
time on device. A thread that spins while another computes shows as CPU beyond what its side's
work needs.

Each line: `MODEL threads=N PATH client C us [thread: us, ...] service S us [thread: us, ...] on-device D us`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def thread_times(pid: int | str) -> dict[str, int]:
    """Run time in ns of each thread of process `pid` now, by 'name/tid'."""
    out: dict[str, int] = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"{base}/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
        out[f"{name}/{tid}"] = ns
    return out


def per_call(before: dict[str, int], after: dict[str, int], calls: int) -> dict[str, float]:
    """µs per call of each thread that ran in between (a thread started meanwhile counts from 0)."""
    return {k: (v - before.get(k, 0)) / calls / 1000 for k, v in after.items() if v - before.get(k, 0) > 0}


def _show(times: dict[str, float]) -> str:
    ordered = sorted(times.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k}: {v:.1f}" for k, v in ordered if v >= 0.05)


def measure(name: str, driver: str, threads: int, paths: list[str], calls: int, warmup: int) -> None:
    import numpy as np

    from mlts.bench.sources import ModelSource
    from mlts.convert import convert, load_model
    from mlts.hal.enums import DTYPE_NAME, OperandType
    from mlts.hal.types import Timing
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.execution import ExecutionMode
    from mlts.runtime.session import Session

    model = convert(load_model(ModelSource(name, None, name).onnx_path())).model
    sub = model.main
    rng = np.random.default_rng(0)
    feed = []
    for i in sub.input_indexes:
        op = sub.operands[i]
        dtype = np.dtype(DTYPE_NAME[OperandType(op.type)])
        shape = tuple(d or 1 for d in op.dimensions)
        if dtype.kind == "f":
            feed.append(rng.standard_normal(shape).astype(dtype))
        else:
            info = np.iinfo(dtype)
            feed.append(rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype))
    device = open_device(discover()[driver], threads=threads)
    try:
        pid = getattr(getattr(device, "process", None), "pid", None)
        if not isinstance(pid, int):
            raise SystemExit(f"{driver}: not a private service process of this client")
        for path in paths:
            with Session(device, model, mode=ExecutionMode(path)) as session:
                for _ in range(warmup):
                    session.run(feed)
                client0, service0 = thread_times("self"), thread_times(pid)
                on_device = []
                for _ in range(calls):
                    timing = session.run(feed)[1].timing
                    if Timing.is_measured(timing.time_on_device):
                        on_device.append(timing.time_on_device)
                client, service = (
                    per_call(client0, thread_times("self"), calls),
                    per_call(service0, thread_times(pid), calls),
                )
            device_us = f"{statistics.median(on_device):.0f}" if on_device else "-"
            print(
                f"{name} threads={threads} {path} client {sum(client.values()):.1f} us [{_show(client)}] "
                f"service {sum(service.values()):.1f} us [{_show(service)}] on-device {device_us} us",
                flush=True,
            )
    finally:
        device.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", default=["mobilenet_v1_0.25_128"])
    p.add_argument("--threads", default="1,2", help="driver thread counts, comma-separated")
    p.add_argument("--execution", default="sync,burst", help="paths, comma-separated: sync, burst")
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--driver", default="sample-all")
    a = p.parse_args(argv)
    paths = [s for s in a.execution.split(",") if s]
    if any(s not in ("sync", "burst") for s in paths) or a.calls < 1 or a.warmup < 0:
        p.error("--execution takes sync and/or burst; --calls >= 1, --warmup >= 0")
    try:
        counts = [int(t) for t in a.threads.split(",")]
    except ValueError:
        p.error(f"--threads: whole numbers, comma-separated, got {a.threads!r}")
    for name in a.models:
        for threads in counts:
            measure(name, a.driver, threads, paths, a.calls, a.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
