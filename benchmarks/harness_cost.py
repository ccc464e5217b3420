"""The harness's own cost per call on the one-ADD model: CPU time and instructions of the client.

usage: python benchmarks/harness_cost.py [--driver NAME] [--calls N] [--warmup N]
       [--paths in-process,sync,burst,...] [--polling default|off] [--instructions]

What a call costs the calling process does not depend on how busy the machine is, where wall time
does: this prints, per path, the CPU time of the calling thread (`time.thread_time_ns`) and of the
whole client process (`time.process_time_ns`, its other threads included) over N calls, divided by
N, and with `--instructions` the instructions the client process executed per call, counted by
valgrind's callgrind (the script runs itself under valgrind, zeroes the counters before the timed
calls and dumps them after: `--zero-before=getsid --dump-before=getpgid`, two libc calls nothing
else in the loop makes). The service process is not counted (valgrind does not follow it).

Paths, all on the one-ADD model of benchmarks/execution_paths.py (two 1x4 float32 inputs):

- `in-process`, `sync`, `burst`: whole `Session.run` calls (inputs into the pool, the execution,
  output copies), the driver in this process or in its own private service process;
- `in-process-execute`, `sync-execute`, `burst-execute`: the bare executeSynchronously or
  Burst.execute of one fixed request (no Session): the transport and the driver alone.

A waiting client polls before it blocks (docs/tuning.md: the socket window, the burst ring's window,
the expected-wait stretch): that polling is CPU of the calling thread too. `--polling off`
(MLTS_SOCKET_POLLING_US=0, MLTS_POLLING_STRETCH_US=0, bursts in low-power mode) leaves only the work
each call does, which is what `--instructions` should count: with polling, callgrind's slowed
client counts instructions of spins whose length depends on the service.

Each line: `trivial PATH cpu/call thread T us process P us [instructions/call I] n=N polling=...`.
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

PATHS = ("in-process", "sync", "burst", "in-process-execute", "sync-execute", "burst-execute")
DEFAULT_PATHS = "in-process,sync,burst,in-process-execute,sync-execute,burst-execute"


def _set_polling(polling: str) -> None:
    if polling == "off":
        os.environ["MLTS_SOCKET_POLLING_US"] = "0"
        os.environ["MLTS_POLLING_STRETCH_US"] = "0"


def _model_and_feeds():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from execution_paths import feeds_for, fixed_request, trivial_model

    model = trivial_model()
    return model, feeds_for(model), fixed_request


def _calls(path: str, local, private, model, feeds, fixed_request, stack):
    """A no-argument callable doing one call of `path`, and what to close afterwards."""
    from mlts.hal.enums import MeasureTiming
    from mlts.runtime.session import Session

    device = local if path.startswith("in-process") else private
    if not path.endswith("-execute"):
        session = Session(device, model, mode="burst" if path == "burst" else "sync")
        stack.append(session)
        n = len(feeds)
        counter = [0]

        def run() -> None:
            counter[0] += 1
            session.run(feeds[counter[0] % n])

        return run
    request, pool = fixed_request(model, feeds[0])
    prepared = device.prepareModel(model)
    stack.extend([pool, prepared])
    if path == "burst-execute":
        burst = prepared.configureExecutionBurst()
        stack.insert(len(stack) - 1, burst)
        return functools.partial(burst.execute, request, MeasureTiming.YES)
    return functools.partial(prepared.executeSynchronously, request, MeasureTiming.YES)


def measure(paths: list[str], driver: str, calls: int, warmup: int, polling: str, markers: bool) -> None:
    _set_polling(polling)
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.execution import set_burst_polling

    if polling == "off":
        set_burst_polling(0)
    model, feeds, fixed_request = _model_and_feeds()
    spec = discover()[driver]
    local = open_device(spec, in_process=True)
    private = open_device(spec, threads=1) if any(not p.startswith("in-process") for p in paths) else None
    try:
        for path in paths:
            stack: list = []
            try:
                call = _calls(path, local, private, model, feeds, fixed_request, stack)
                for _ in range(warmup):
                    call()
                if markers:
                    os.getsid(0)  # callgrind zeroes its counters here
                t0, p0 = time.thread_time_ns(), time.process_time_ns()
                for _ in range(calls):
                    call()
                t1, p1 = time.thread_time_ns(), time.process_time_ns()
                if markers:
                    os.getpgid(0)  # callgrind dumps the counters of the calls here
                print(
                    f"trivial {path} cpu/call thread {(t1 - t0) / calls / 1000:.1f} us "
                    f"process {(p1 - p0) / calls / 1000:.1f} us n={calls} polling={polling}",
                    flush=True,
                )
            finally:
                for thing in reversed(stack):
                    thing.close()
    finally:
        if private is not None:
            private.close()
        local.close()


def _instructions(dump: str) -> int:
    with open(dump) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line")


def with_instructions(a: argparse.Namespace) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed: no instruction counts", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mlts-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = [
            valgrind,
            "--tool=callgrind",
            f"--callgrind-out-file={out}.%p",
            "--zero-before=getsid",
            "--dump-before=getpgid",
            "--dump-instr=no",
            "--compress-strings=no",
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            "--driver",
            a.driver,
            "--calls",
            str(a.calls),
            "--warmup",
            str(a.warmup),
            "--paths",
            a.paths,
            "--polling",
            a.polling,
        ]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        lines = [line for line in run.stdout.splitlines() if line.startswith("trivial ")]
        if run.returncode != 0 or len(lines) != len(a.paths.split(",")):
            sys.stderr.write(run.stdout[-2000:] + run.stderr[-4000:])
            return 1
        dumps = sorted(
            (p for p in glob.glob(out + ".*") if re.search(r"\.\d+\.\d+$", p)),
            key=lambda p: int(p.rsplit(".", 1)[1]),
        )
        # One dump per path, in order (getpgid), then the final dump at exit.
        if len(dumps) < len(lines):
            sys.stderr.write(f"expected {len(lines)} callgrind dumps, found {len(dumps)}\n")
            return 1
        for line, dump in zip(lines, dumps, strict=False):
            per_call = _instructions(dump) / a.calls
            head, _, tail = line.partition(" n=")
            print(f"{head} (under valgrind) instructions/call {per_call:,.0f} n={tail}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--driver", default="sample-all")
    p.add_argument("--calls", type=int, default=2000, help="timed calls per path")
    p.add_argument("--warmup", type=int, default=200, help="discarded calls per path first")
    p.add_argument("--paths", default=DEFAULT_PATHS, help=f"comma-separated, of {', '.join(PATHS)}")
    p.add_argument("--polling", choices=("default", "off"), default="default")
    p.add_argument(
        "--instructions", action="store_true", help="count instructions too (under valgrind, slow)"
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds the valgrind run may take")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    paths = a.paths.split(",")
    bad = [x for x in paths if x not in PATHS]
    if bad or a.calls < 1 or a.warmup < 0:
        p.error(f"unknown path {bad[0]!r}" if bad else "--calls must be >= 1 and --warmup >= 0")
    if a.instructions and not a.child:
        return with_instructions(a)
    measure(paths, a.driver, a.calls, a.warmup, a.polling, markers=a.child)
    return 0


if __name__ == "__main__":
    sys.exit(main())
