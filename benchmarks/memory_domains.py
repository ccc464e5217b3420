"""What keeping tensors in driver buffers (memory domains) saves: LSTM state and partitioned intermediates.

usage: python benchmarks/memory_domains.py [--driver NAME] [--paths LIST] [--steps N] [--sequences N]
       [--repeats N] [--runs N] [--skip-lstm] [--skip-partition]

1. asr_float and tts_float step by step on one driver (a private service),
   on each execution path (`--paths`, default sync,async,fenced,burst), the
   state carried by the client versus kept in driver buffers, side by side:
   median per-step latency of each, the difference, and whether the outputs
   are bit for bit the same. The two ways alternate `--repeats` times so
   drift on a busy machine hits both alike; medians are over all their steps.
2. mobilenet_v2_0.35_128 partitioned across sample-minimal (ADD,
   CONCATENATION, CONV_2D) and sample-float-slow (the rest), each a private
   service: median latency per inference with intermediates through the
   client versus through driver buffers where producer and readers share a
   driver, and how many intermediates stayed in the driver.

Times are wall clock per call; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _lstm(device, name: str, mode: str, steps: int, sequences: int, repeats: int) -> str:
    from mlts.bench import recurrent
    from mlts.bench.state_rows import bit_equal, run_in_driver
    from mlts.convert import convert
    from mlts.datasets import speech
    from mlts.models import zoo
    from mlts.runtime.session import Session

    entry = zoo.get(name)
    conv = convert(zoo.load(name))
    sig = recurrent.StepSignature.of(entry, conv)
    n = len(conv.inputs)
    seqs = [s[:steps] for s in speech.sequences(name, sequences)]
    client: list[float] = []
    driver: list[float] = []
    equal = True
    with Session(device, conv.model, mode=mode) as session:
        recurrent.run_sequences(session.run, sig, n, seqs[:1], 0.5)  # warm both paths up
        for _ in range(repeats):
            c = recurrent.run_sequences(session.run, sig, n, seqs, 0.0)
            d = run_in_driver(session, sig, n, seqs, 0.0)
            client += c.samples
            driver += d.samples
            equal = equal and bit_equal(c, d, sig.main_output)
    mc, md = statistics.median(client) * 1e3, statistics.median(driver) * 1e3
    return (
        f"{name:<12} {mode:<7} {len(client):>6} {mc:>10.3f} {md:>10.3f} {mc - md:>+9.3f} "
        f"{100 * (mc - md) / mc:>+7.1f}%  {'yes' if equal else 'NO'}"
    )


def _partition(runs: int, log_dir: str) -> list[str]:
    import numpy as np

    from mlts.convert import convert
    from mlts.models import zoo
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.partitioned import open_partitioned

    specs = discover()
    conv = convert(zoo.load("mobilenet_v2_0.35_128"))
    shape = tuple(int(d) for d in conv.model.main.operands[conv.model.main.input_indexes[0]].dimensions)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    names = ("sample-minimal", "sample-float-slow")
    devices = {n: open_device(specs[n], log_path=f"{log_dir}/{n}.log") for n in names}
    lines = []
    try:
        sessions = {
            flag: open_partitioned(devices, conv.model, driver_buffers=flag) for flag in (False, True)
        }
        try:
            outs = {}
            samples: dict[bool, list[float]] = {False: [], True: []}
            for flag, s in sessions.items():
                outs[flag] = s.run([x])[0][0]
            for _ in range(runs):
                for flag, s in sessions.items():
                    t0 = time.perf_counter()
                    s.run([x])
                    samples[flag].append(time.perf_counter() - t0)
            kept = sessions[True].describe()["driver_buffers"]
            steps = len(sessions[True].plan.steps)
            mc, md = (statistics.median(samples[f]) * 1e3 for f in (False, True))
            lines.append(
                f"mobilenet_v2_0.35_128 over {', '.join(names)}: {steps} steps, "
                f"{len(kept['operands'])} intermediates kept in driver buffers, {len(kept['refused'])} refused"
            )
            lines.append(f"  through the client:     {mc:9.2f} ms per inference (median of {runs})")
            lines.append(f"  through driver buffers: {md:9.2f} ms per inference ({mc - md:+.2f} ms)")
            lines.append(
                f"  outputs bit for bit equal: {'yes' if outs[False].tobytes() == outs[True].tobytes() else 'NO'}"
            )
        finally:
            for s in sessions.values():
                s.close()
    finally:
        for d in devices.values():
            d.close()
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--driver", default="sample-all")
    p.add_argument(
        "--paths", default="sync,async,fenced,burst", help="execution paths of the LSTM runs, comma separated"
    )
    p.add_argument("--steps", type=int, default=40, help="steps per sequence (LSTM)")
    p.add_argument("--sequences", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="alternations of client and driver state")
    p.add_argument("--runs", type=int, default=10, help="timed inferences per partitioned variant")
    p.add_argument("--skip-lstm", action="store_true")
    p.add_argument("--skip-partition", action="store_true")
    a = p.parse_args()
    if min(a.steps, a.sequences, a.repeats, a.runs) < 1:
        p.error("--steps, --sequences, --repeats and --runs must be at least 1")
    import tempfile

    from mlts.hal.errors import HalError
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.execution import EXECUTION_MODES

    paths = [m.strip() for m in a.paths.split(",") if m.strip()]
    unknown = [m for m in paths if m not in EXECUTION_MODES]
    if unknown or not paths:
        p.error(f"--paths {a.paths!r}: choose among {', '.join(EXECUTION_MODES)}")

    with tempfile.TemporaryDirectory(prefix="mlts-md-bench-") as log_dir:
        try:
            if not a.skip_lstm:
                specs = discover()
                if a.driver not in specs:
                    p.error(f"--driver {a.driver}: unknown; known: {', '.join(sorted(specs))}")
                device = open_device(specs[a.driver], log_path=f"{log_dir}/driver.log")
                try:
                    print(f"LSTM step latency on {a.driver}, state on the client vs in driver buffers")
                    print(
                        f"{'model':<12} {'path':<7} {'steps':>6} {'client ms':>10} {'driver ms':>10} "
                        f"{'saved':>9} {'':>8}  bit-equal"
                    )
                    for name in ("asr_float", "tts_float"):
                        for mode in paths:
                            print(_lstm(device, name, mode, a.steps, a.sequences, a.repeats), flush=True)
                finally:
                    device.close()
            if not a.skip_partition:
                for line in _partition(a.runs, log_dir):
                    print(line, flush=True)
        except HalError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
