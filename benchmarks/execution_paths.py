"""Round trip per execution path, and throughput of concurrent clients on one shared driver service.

usage: python benchmarks/execution_paths.py [--driver NAME] [--duration S] [--throughput-seconds S]
       [--workers N] [--models trivial,mobilenet_v1_0.25_128] [--clients 1,2,4] [--ping-pongs N]
       [--first-model mobilenet_v1_1.0_224] [--first-repeats N] [--first-steady N]

For each model (`trivial`: one ADD of two 1x4 float32 tensors; and
mobilenet_v1_0.25_128 from the zoo) it times whole Session.run calls (inputs
into shared memory, the execution, outputs back):

- `in-process`: the driver loaded in this process, no IPC (the floor);
- `sync`, `async`, `fenced`, `burst`: the driver in its own private service
  process, one line per execution path (`burst-low-power` adds a burst with
  no polling window);
- `shm-ping-pong`: the physical limit of the burst path, measured in the same
  run: the round trip of a bare shared-memory ping-pong between this process
  and a second Python process, both spinning on a counter (no message, no
  model, no eventfd).

Each prints `MODEL PATH median X us p10 Z us p90 Y us n=N cpu/run client C us service S us` (the CPU
time per run of this process and of the service process: on a busy machine wall times grow with
the waits for a core, CPU times far less; p10 is what the path does when neither process waits
for a core), and each model a line
`MODEL burst/sync median ratio R.RRx` (goals: burst median <= 15 us and
>= 5x faster than sync on the trivial model; on mobilenet_v1_0.25_128 burst
never slower than sync). Lines `MODEL sync-execute` and `MODEL burst-execute`
time the bare executeSynchronously and Burst.execute calls of one fixed
request, without Session (the transport and the driver alone), with their
ratio `MODEL burst-execute/sync-execute median ratio`. Then, on one shared
service (--workers execution workers, BLAS threads 1 per execution), the
executions per second of 1, 2 and 4 client threads, each with its own
connection: `MODEL clients=2 throughput X/s speedup Y.YYx`. Goals on a
2-core machine: sync trivial median <= 100 us; 2 clients >= 1.6x on
mobilenet_v1_0.25_128. The machine may be shared: run it twice, and read the
figures as an order of magnitude.

First execution (`--first-model`, default mobilenet_v1_1.0_224; empty to skip):
the model is prepared afresh in the private service `--first-repeats` times;
each time the bare executeSynchronously of a new request (its layout checked
then, as any first execution's is) is timed, then `--first-steady` more
calls of the same request. One line
`MODEL first-execution median X ms steady median Y ms ratio R.RRx prepare P ms
service page faults per call first F steady S` (medians over the preparations; page
faults, fresh memory the service touched, averaged; the ratio is the median of each
preparation's first ÷ steady; goal <= 1.5x: the sample driver allocates and
binds a static model's buffers while preparing it, so `prepare` carries what
the first execution used to).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import threading
import time

# One BLAS thread per execution, here (the in-process driver) and in every service started below.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"


def trivial_model():
    import numpy as np

    from mlts.hal.builder import ModelBuilder
    from mlts.hal.enums import OperandType as T
    from mlts.hal.enums import OperationType as O

    b = ModelBuilder()
    x = b.add_input(T.TENSOR_FLOAT32, (1, 4))
    y = b.add_input(T.TENSOR_FLOAT32, (1, 4))
    out = b.add_operand(T.TENSOR_FLOAT32, (1, 4))
    b.add_operation(O.ADD, [x, y, b.add_scalar(0, T.INT32)], [out])
    b.mark_outputs(out)
    del np
    return b.build()


def zoo_model(name: str):
    from mlts.bench.sources import ModelSource
    from mlts.convert import convert, load_model

    return convert(load_model(ModelSource(name, None, name).onnx_path())).model


def feeds_for(model, n: int = 4):
    import numpy as np

    from mlts.hal.enums import DTYPE_NAME, OperandType

    rng = np.random.default_rng(0)
    sub = model.main
    out = []
    for _ in range(n):
        feed = []
        for i in sub.input_indexes:
            op = sub.operands[i]
            dtype = np.dtype(DTYPE_NAME[OperandType(op.type)])
            feed.append(rng.uniform(-1, 1, op.dimensions).astype(dtype))
        out.append(feed)
    return out


def fixed_request(model, feed):
    """A Request of `model` on one SharedMemory holding `feed` and room for every output."""
    import numpy as np

    from mlts.hal.enums import DTYPE_NAME, OperandType
    from mlts.hal.memory import SharedMemory
    from mlts.hal.types import DataLocation, Request, RequestArgument

    sub = model.main
    sizes = [a.nbytes for a in feed]
    for i in sub.output_indexes:
        op = sub.operands[i]
        itemsize = np.dtype(DTYPE_NAME[OperandType(op.type)]).itemsize
        sizes.append(int(np.prod(op.dimensions, dtype=np.int64)) * itemsize)
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += (size + 63) // 64 * 64
    pool = SharedMemory.create(max(at, 64), "mlts-bench")
    for arr, offset in zip(feed, offsets, strict=False):
        np.ndarray(arr.shape, arr.dtype, buffer=pool.buffer, offset=offset)[...] = arr
    args = [RequestArgument(False, DataLocation(0, o, n), ()) for o, n in zip(offsets, sizes, strict=True)]
    n_in = len(feed)
    return Request(tuple(args[:n_in]), tuple(args[n_in:]), (pool,)), pool


def timed_calls(call, duration: float, warmup: float, max_n: int) -> list[float]:
    """Seconds per `call()`, after `warmup` seconds of discarded calls."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        call()
    samples: list[float] = []
    end = time.perf_counter() + duration
    while time.perf_counter() < end and len(samples) < max_n:
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return samples


def minor_faults(pid: int) -> int:
    """Minor page faults so far of process `pid` (fresh memory touched for the first time, mostly)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) used so far by this process (None) or by process `pid`."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_runs(
    session, feeds, duration: float, warmup: float, max_n: int, cpu: list[float] | None = None
) -> list[float]:
    """Seconds per Session.run, after `warmup` seconds of discarded runs.

    `cpu`, when given, receives the CPU seconds per run of this process and of the session's
    service process (0 in process): a figure that a busy machine inflates far less than wall time.
    """
    end = time.perf_counter() + warmup
    i = 0
    while time.perf_counter() < end:
        session.run(feeds[i % len(feeds)])
        i += 1
    samples: list[float] = []
    pid = getattr(getattr(session.device, "process", None), "pid", None)
    before = (process_cpu(None), process_cpu(pid) if pid else 0.0)
    end = time.perf_counter() + duration
    while time.perf_counter() < end and len(samples) < max_n:
        t0 = time.perf_counter()
        session.run(feeds[len(samples) % len(feeds)])
        samples.append(time.perf_counter() - t0)
    if cpu is not None:
        after = (process_cpu(None), process_cpu(pid) if pid else 0.0)
        cpu[:] = [(b - a) / len(samples) for a, b in zip(before, after, strict=True)]
    return samples


PING_PONG_CHILD = """
import mmap, os, struct, sys, time
fd = int(sys.argv[1]); n = int(sys.argv[2])
m = mmap.mmap(fd, 128); q = struct.Struct("<Q")
end = time.monotonic() + 60
for i in range(1, n + 1):
    while q.unpack_from(m, 0)[0] != i:
        if time.monotonic() > end:
            sys.exit(1)
    q.pack_into(m, 64, i)
"""


def ping_pong(n: int) -> list[float]:
    """Round trips of a counter bounced through shared memory with a second Python process."""
    import mmap
    import struct
    import subprocess

    fd = os.memfd_create("mlts-ping-pong")
    os.ftruncate(fd, 128)
    m = mmap.mmap(fd, 128)
    q = struct.Struct("<Q")
    child = subprocess.Popen([sys.executable, "-c", PING_PONG_CHILD, str(fd), str(n)], pass_fds=[fd])
    samples = []
    try:
        limit = time.monotonic() + 60
        for i in range(1, n + 1):
            t0 = time.perf_counter()
            q.pack_into(m, 0, i)
            while q.unpack_from(m, 64)[0] != i:
                if time.monotonic() > limit:
                    raise RuntimeError("the ping-pong partner stopped answering")
            samples.append(time.perf_counter() - t0)
    finally:
        child.kill()
        child.wait()
        m.close()
        os.close(fd)
    return samples[n // 10 :]  # the first tenth is warm-up


def fmt(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:.1f} us" if us < 10_000 else f"{us / 1000:.2f} ms"


def report(label: str, path: str, samples: list[float], cpu: list[float] | None = None) -> float:
    samples = sorted(samples)
    median = statistics.median(samples)
    p10 = samples[int(0.1 * len(samples))]
    p90 = samples[min(len(samples) - 1, int(0.9 * len(samples)))]
    extra = f" cpu/run client {fmt(cpu[0])} service {fmt(cpu[1])}" if cpu else ""
    print(
        f"{label} {path} median {fmt(median)} p10 {fmt(p10)} p90 {fmt(p90)} n={len(samples)}{extra}",
        flush=True,
    )
    return median


def throughput(path: str, model, feeds, clients: int, seconds: float) -> float:
    """Executions per second of `clients` threads, each a client of the service at `path`."""
    from mlts.runtime.remote import RemoteDevice
    from mlts.runtime.session import Session

    devices = [RemoteDevice.connect(path) for _ in range(clients)]
    sessions = [Session(d, model) for d in devices]
    counts = [0] * clients
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def client(k: int) -> None:
        session = sessions[k]
        for f in feeds:  # warm-up
            session.run(f)
        start.wait()
        n = 0
        while not stop.is_set():
            session.run(feeds[n % len(feeds)])
            n += 1
        counts[k] = n

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for s in sessions:
        s.close()
    for d in devices:
        d.close()
    return sum(counts) / elapsed


def first_execution(device, name: str, repeats: int, steady: int) -> None:
    """Print the first execution of freshly prepared `name` against its steady state (see the module
    docstring): medians over `repeats` preparations, each followed by one new request's first call
    and `steady` more calls of it."""
    model = zoo_model(name)
    feed = feeds_for(model, 1)[0]
    pid = getattr(getattr(device, "process", None), "pid", None)
    firsts, steadies, ratios, prepares = [], [], [], []
    faults = [0, 0]  # the service's minor page faults: in the first executions, in the steady ones
    for _ in range(repeats):
        request, pool = fixed_request(model, feed)
        t0 = time.perf_counter()
        prepared = device.prepareModel(model)
        prepares.append(time.perf_counter() - t0)
        try:
            f0 = minor_faults(pid) if pid else 0
            t0 = time.perf_counter()
            prepared.executeSynchronously(request)
            first = time.perf_counter() - t0
            f1 = minor_faults(pid) if pid else 0
            samples = []
            for _ in range(steady):
                t0 = time.perf_counter()
                prepared.executeSynchronously(request)
                samples.append(time.perf_counter() - t0)
            f2 = minor_faults(pid) if pid else 0
        finally:
            prepared.close()
            pool.close()
        faults[0] += f1 - f0
        faults[1] += f2 - f1
        middle = statistics.median(samples)
        firsts.append(first)
        steadies.append(middle)
        ratios.append(first / middle)
    paged = (
        f" service page faults per call first {faults[0] / repeats:.0f} steady "
        f"{faults[1] / (repeats * steady):.0f}"
        if pid
        else ""
    )
    print(
        f"{name} first-execution median {fmt(statistics.median(firsts))} steady median "
        f"{fmt(statistics.median(steadies))} ratio {statistics.median(ratios):.2f}x "
        f"prepare {fmt(statistics.median(prepares))}{paged} "
        f"(n={repeats} preparations, {steady} steady calls each)",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--driver", default="sample-all")
    p.add_argument("--models", default="trivial,mobilenet_v1_0.25_128")
    p.add_argument("--duration", type=float, default=3.0, help="timed seconds per model and path")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--max-calls", type=int, default=20_000)
    p.add_argument("--throughput-seconds", type=float, default=4.0)
    p.add_argument("--workers", type=int, default=2, help="execution workers of the shared service")
    p.add_argument("--clients", default="1,2,4")
    p.add_argument("--ping-pongs", type=int, default=20_000, help="round trips of the shared-memory limit")
    p.add_argument(
        "--first-model",
        default="mobilenet_v1_1.0_224",
        help="zoo model whose first execution is timed against its steady state ('' skips it)",
    )
    p.add_argument("--first-repeats", type=int, default=5, help="fresh preparations of --first-model")
    p.add_argument("--first-steady", type=int, default=20, help="timed calls after each first execution")
    a = p.parse_args()
    if a.first_repeats < 1 or a.first_steady < 1:
        p.error("--first-repeats and --first-steady must be at least 1")

    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.session import Session
    from mlts.runtime.shared import SharedService

    spec = discover()[a.driver]
    print(
        f"driver={a.driver} cores={os.cpu_count()} BLAS threads=1 shared-service workers={a.workers} "
        f"python={sys.version.split()[0]} (figures from a shared machine vary between runs)",
        flush=True,
    )
    models = {}
    for name in a.models.split(","):
        models["trivial" if name == "trivial" else name] = (
            trivial_model() if name == "trivial" else zoo_model(name)
        )
    from mlts.runtime.execution import set_burst_polling

    report("shm-ping-pong", "round-trip", ping_pong(a.ping_pongs))
    local = open_device(spec, in_process=True)
    private = open_device(spec, threads=1)
    try:
        for label, model in models.items():
            feeds = feeds_for(model)
            with Session(local, model) as session:
                cpu: list[float] = []
                samples = timed_runs(session, feeds, a.duration, a.warmup, a.max_calls, cpu)
                report(label, "in-process", samples, cpu)
            medians = {}
            for mode in ("sync", "async", "fenced", "burst", "burst-low-power"):
                set_burst_polling(0 if mode == "burst-low-power" else None)
                seam_mode = "burst" if mode.startswith("burst") else mode
                with Session(private, model, mode=seam_mode) as session:
                    cpu = []
                    samples = timed_runs(session, feeds, a.duration, a.warmup, a.max_calls, cpu)
                    medians[mode] = report(label, mode, samples, cpu)
            set_burst_polling(None)
            print(f"{label} burst/sync median ratio {medians['sync'] / medians['burst']:.2f}x", flush=True)
            request, pool = fixed_request(model, feeds[0])
            prepared = private.prepareModel(model)
            try:
                sync_call = report(
                    label,
                    "sync-execute",
                    timed_calls(
                        functools.partial(prepared.executeSynchronously, request),
                        a.duration,
                        a.warmup,
                        a.max_calls,
                    ),
                )
                with prepared.configureExecutionBurst() as burst:
                    burst_call = report(
                        label,
                        "burst-execute",
                        timed_calls(
                            functools.partial(burst.execute, request), a.duration, a.warmup, a.max_calls
                        ),
                    )
                print(
                    f"{label} burst-execute/sync-execute median ratio {sync_call / burst_call:.2f}x",
                    flush=True,
                )
            finally:
                prepared.close()
                pool.close()
        if a.first_model:
            first_execution(private, a.first_model, a.first_repeats, a.first_steady)
    finally:
        private.close()
        local.close()
    with SharedService.start(
        spec.factory, name=a.driver, service_args=["--workers", str(a.workers)]
    ) as service:
        for label, model in models.items():
            feeds = feeds_for(model)
            base = None
            for clients in (int(c) for c in a.clients.split(",")):
                rate = throughput(service.path, model, feeds, clients, a.throughput_seconds)
                base = base or rate
                print(
                    f"{label} clients={clients} throughput {rate:.1f}/s speedup {rate / base:.2f}x",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
