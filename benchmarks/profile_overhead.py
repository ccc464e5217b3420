"""What per-operation profiling costs: median latency with and without it, calls interleaved.

usage: python benchmarks/profile_overhead.py [--threads N] [--calls N] [MODEL ...]

For each zoo model (default: mobilenet_v1_0.25_128 and mobilenet_v1_1.0_224),
on the sample driver in its own process (sync path) and on onnxruntime: the
calls alternate between an unprofiled and a profiled one (the driver: one
session whose requests ask for per-operation times every other call;
onnxruntime: a plain session and a profiling session of the same model), so
both halves see the same machine load. Prints each side's median (ms) and
their ratio, the load average before the run and the thread count.
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


def _alternate(plain, profiled, calls: int) -> tuple[float, float]:
    a, b = [], []
    for i in range(calls):
        for fn, out in ((plain, a), (profiled, b)) if i % 2 == 0 else ((profiled, b), (plain, a)):
            t0 = time.perf_counter()
            fn(i)
            out.append(time.perf_counter() - t0)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def _driver(model, feeds, calls: int, threads: int) -> tuple[float, float]:
    from mlts.runtime.discovery import discover, open_device, select
    from mlts.runtime.session import Session

    spec = select(discover(()), "^sample-all$")[0]
    device = open_device(spec, in_process=False, threads=threads)
    try:
        with Session(device, model) as session:
            for f in feeds[:3]:
                session.run(f)

            def run(flag: bool):
                def call(i: int) -> None:
                    session.profile = flag
                    session.run(feeds[i % len(feeds)])

                return call

            return _alternate(run(False), run(True), calls)
    finally:
        device.close()


def _onnxruntime(model_bytes: bytes, feeds, calls: int, threads: int) -> tuple[float, float]:
    import shutil
    import tempfile

    import onnxruntime as ort

    from mlts.bench.reference import OnnxRuntimeReference

    plain = OnnxRuntimeReference(model_bytes, threads)
    tmp = tempfile.mkdtemp(prefix="mlts-ort-profile-")
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.enable_profiling, so.profile_file_prefix = True, os.path.join(tmp, "ort")
        prof = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in prof.get_inputs()]
        for f in feeds[:3]:
            plain.run(f)
            prof.run(None, dict(zip(names, f, strict=True)))
        result = _alternate(
            lambda i: plain.run(feeds[i % len(feeds)]),
            lambda i: prof.run(None, dict(zip(names, feeds[i % len(feeds)], strict=True))),
            calls,
        )
        prof.end_profiling()
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=100, help="calls of each kind (default 100)")
    parser.add_argument("models", nargs="*", default=["mobilenet_v1_0.25_128", "mobilenet_v1_1.0_224"])
    args = parser.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import numpy as np

    from mlts.convert.converter import convert
    from mlts.models import zoo

    print(f"load average {os.getloadavg()[0]:.2f}, {args.threads} thread(s), {args.calls} calls of each kind")
    print(f"{'model':28} {'backend':16} {'plain ms':>9} {'profiled ms':>12} {'ratio':>6}")
    for name in args.models:
        proto = zoo.load(name)
        conv = convert(proto)
        rng = np.random.default_rng(0)
        feeds = [[rng.standard_normal(t.shape).astype(t.dtype) for t in conv.inputs] for _ in range(4)]
        rows = (
            ("driver", _driver(conv.model, feeds, args.calls, args.threads)),
            ("onnxruntime", _onnxruntime(proto.SerializeToString(), feeds, args.calls, args.threads)),
        )
        for backend, (plain, prof) in rows:
            print(f"{name:28} {backend:16} {plain:9.3f} {prof:12.3f} {prof / plain:6.3f}")


if __name__ == "__main__":
    main()
