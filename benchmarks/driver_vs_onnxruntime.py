"""Median latency of the sample driver and of onnxruntime on the same inputs and thread count, and their ratio.

usage: python benchmarks/driver_vs_onnxruntime.py [--threads N[,N...]] [--warmup S] [--duration S]
       [--iterations N] [--images N] [--sequences N] [--execution PATH[,PATH...]] [--compilation] [--in-process]
       [--profile] [--no-memory] [MODEL ...]

Both backends see the same procedural images; each timed iteration is the wall
clock around one whole execution call (for the driver: request into shared
memory, the execution in the driver process on the --execution path, outputs
back; the default path is `sync`, executeSynchronously over the driver's socket,
and `burst` runs every call of a model through one burst, NNAPI's path for a
stream of frames or audio steps; several paths, comma-separated, give a row
each, against the same onnxruntime figure); a warm-up
of --warmup seconds is discarded, then calls are timed for at least
--duration seconds and --iterations calls. The estimator is the median of the
timed iterations. With --compilation the driver's median compile time without
cache and from its cache are printed too.
Measured in one run, so the ratio is comparable even on a noisy machine.
The ratio's 95% interval divides the ends of the two medians' distribution-free
95% intervals (driver low / onnxruntime high, driver high / onnxruntime low), as
`mlts compare` does: conservative, and wide when either backend was disturbed.
The header names the CPU, the load average before the run (other work on the
machine slows both backends, but not equally), the thread count of both
backends and how the driver's kernels run (compiled or NumPy, their threads).
The "on device" column is the driver's own median Timing.timeOnDevice: the
execution inside the driver, without the inter-process call around it.
Quantized models are compared with onnxruntime running the same quantized
ONNX file; their error column is the largest deviation in quantized units.
The LSTM models (asr_float, tts_float) run --sequences dataset sequences step
by step on both backends (state carried, reset per sequence); their figure is
the median per-step latency and their accuracy column is MLTS's metric
(PhoneErrorRate / mel-cepstral distortion) of the driver against onnxruntime.
With --profile, after its row each LSTM model's steps through its first
sequence (states carried, for at least --duration / 2 seconds and 5 steps) are
run once more with per-operation times on: the driver's own times per
operation (median µs over the steps) next to onnxruntime's profiler's time for
the ONNX node each operation was converted from.

Memory (unless --no-memory), one line per model after its rows:
`  memory: driver service peak X MiB (+Y over idle), onnxruntime process peak Z MiB (+W over idle)`.
Every model gets a fresh private driver service, so the service's VmHWM (the
kernel's high-water mark of its resident set, /proc/PID/status) read after the
model's runs is that model's peak: its preparation, compilation timings and
every execution path; "idle" is the service's VmRSS before the model was
prepared (Python, NumPy and the driver's code). onnxruntime is measured in a
child process of its own, since in this process its memory cannot be told
from the client's (the images, the converter, the reference outputs): the
child imports NumPy and onnxruntime (its idle VmRSS), creates a session of the
same ONNX file with the same thread options as the reference, runs it 5 times
on random inputs of the model's input shapes (a symbolic dimension is 1) and
reports its VmHWM. Both figures are whole processes, interpreter included; the
"over idle" ones are what the model costs each backend. With a driver reached
through a shared service (a socket) or --in-process the driver's figure is "-".

Threads: --threads takes one count or several, comma-separated (e.g. 1,2);
each count runs the whole table (header and rows as for one), and when several
were measured a last table gives, per model and execution path, the driver's
own speed-up from the smallest count to each other (its median at the smallest
÷ its median at that count) beside onnxruntime's, from the same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODELS = [
    "mobilenet_v1_1.0_224",
    "mobilenet_v2_1.0_224",
    "mobilenet_v1_1.0_224_quant",
    "mobilenet_v1_1.0_224_quant_signed",
    "mobilenet_v1_1.0_224_quant_perchannel",
    "mobilenet_v2_1.0_224_quant",
    "asr_float",
    "tts_float",
    "mobilenet_v1_0.25_128",
    "mobilenet_v2_0.35_128",
]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


# The onnxruntime side of the memory line, run in a child process: argv model path, threads, runs.
ORT_MEMORY_CHILD = r"""
import json, sys
import numpy as np
import onnxruntime as ort

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None

idle = status("VmRSS")
path, threads, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.log_severity_level = 3
session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
kinds = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
         "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(float16)": np.float16}
feed = {}
for i in session.get_inputs():
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
    dtype = kinds.get(i.type)
    if dtype is None:
        raise SystemExit(f"input {i.name}: type {i.type} not generated")
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        feed[i.name] = rng.integers(max(info.min, -128), min(info.max, 255) + 1, shape).astype(dtype)
    else:
        feed[i.name] = rng.standard_normal(shape).astype(dtype)
for _ in range(runs):
    session.run(None, feed)
print(json.dumps({"idle_kib": idle, "peak_kib": status("VmHWM")}))
"""


def status_kib(pid: int, key: str) -> int | None:
    """A `key:` line of /proc/PID/status in KiB (VmRSS, VmHWM), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def onnxruntime_memory(path: str, threads: int, runs: int = 5) -> tuple[int, int] | str:
    """(idle KiB, peak KiB) of a child process running `path` on onnxruntime (ORT_MEMORY_CHILD), or
    why not."""
    import json

    try:
        r = subprocess.run(
            [sys.executable, "-c", ORT_MEMORY_CHILD, path, str(threads), str(runs)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not measured ({type(e).__name__})"
    try:
        found = json.loads(r.stdout.strip().splitlines()[-1])
        idle, peak = found["idle_kib"], found["peak_kib"]
    except (IndexError, ValueError, KeyError, TypeError):
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return f"not measured ({last[:80]})"
    if not isinstance(idle, int) or not isinstance(peak, int):
        return "not measured (no /proc)"
    return idle, peak


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def memory_line(driver: tuple[int, int] | None, ort: tuple[int, int] | str) -> str:
    """The model's memory line: each backend's peak RSS and its growth over the idle process."""
    drv = "-" if driver is None else f"{mib(driver[1])} MiB (+{mib(driver[1] - driver[0])} over idle)"
    ref = ort if isinstance(ort, str) else f"{mib(ort[1])} MiB (+{mib(ort[1] - ort[0])} over idle)"
    return f"  memory: driver service peak {drv}, onnxruntime process peak {ref}"


def driver_kernels(threads: int) -> str:
    """How the sample driver's kernels run in a driver process with this thread count (asked in one)."""
    from mlts.runtime.discovery import thread_env

    env = {**os.environ, **thread_env(threads)}
    code = "from driver import native; print(native.describe())"
    try:
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    return r.stdout.strip() or f"unknown ({r.stderr.strip().splitlines()[-1:]})"


def ratio_ci(drv: dict, ref: dict) -> tuple[float | None, float | None]:
    """[driver low / reference high, driver high / reference low] from the medians' 95% intervals."""
    (d_lo, d_hi), (r_lo, r_hi) = drv["median_ci95"], ref["median_ci95"]
    return (d_lo / r_hi if r_hi > 0 else None, d_hi / r_lo if r_lo > 0 else None)


def on_device_ms(drv: dict) -> str:
    """The driver's own median execution time (its Timing.timeOnDevice, no inter-process call), or -."""
    timing = (drv.get("driver_timing_us") or {}).get("time_on_device")
    if not isinstance(timing, dict) or "median" not in timing:
        return "-"
    return f"{timing['median'] / 1000.0:.2f}"


def fmt_ci(ci: tuple[float | None, float | None]) -> str:
    lo, hi = ci
    return f"[{'-' if lo is None else f'{lo:.2f}'}, {'-' if hi is None else f'{hi:.2f}'}]"


def profile_lstm(name: str, device, threads: int, duration: float) -> None:
    """Per-operation medians of the driver and of onnxruntime over the first sequence's steps."""
    import numpy as np

    from mlts.bench import profile
    from mlts.bench.ort_profile import profile_onnxruntime
    from mlts.bench.profile_runs import profile_control
    from mlts.bench.reference import OnnxRuntimeReference
    from mlts.bench.sources import ModelSource, zoo_entry
    from mlts.convert import convert, load_model
    from mlts.datasets import speech
    from mlts.runtime.session import Session

    source = ModelSource(name, None, name)
    proto = load_model(source.onnx_path())
    entry = zoo_entry(source)
    conv = convert(proto)
    names = [t.name for t in conv.inputs]
    outs = [t.name for t in conv.outputs]
    states = [(names.index(i), outs.index(o), shape) for i, o, shape in entry.state]
    model_bytes = proto.SerializeToString()
    reference = OnnxRuntimeReference(model_bytes, threads)
    # The feeds of the first sequence's steps, states from onnxruntime.
    feeds: list[list[np.ndarray]] = []
    state = [np.zeros(shape, np.float32) for _, _, shape in states]
    for x in speech.sequences(entry.name, 1)[0]:
        feed: list[np.ndarray] = [np.empty(0, np.float32)] * len(names)
        feed[names.index(entry.input_name)] = np.ascontiguousarray(x[None], dtype=np.float32)
        for (i, _, _), value in zip(states, state, strict=True):
            feed[i] = value
        feeds.append(feed)
        result = reference.run(feed)
        state = [np.asarray(result[o], dtype=np.float32) for _, o, _ in states]
    control = profile_control(2 * duration)
    session = Session(device, conv.model, profile=True)
    try:
        records = []

        def call(i: int) -> None:
            times = session.run(feeds[i % len(feeds)])[1].operation_times
            if times is not None:
                records.append(times)

        control.run(call)
    finally:
        session.close()
    types = [op.type for op in conv.model.main.operations]
    drv = profile.driver_entries(records, types, conv.origins)
    prof = profile_onnxruntime(model_bytes, threads, feeds, lambda fn: control.run(fn).samples)
    ref = profile.reference_entries(prof, proto.graph, conv.origins)
    ref_by_layer = profile.summarize(ref, prof.runs)["by_layer"]
    print(
        f"  per-operation profile of {name}: median µs per step ({len(records)} driver steps, {prof.runs} onnxruntime steps)"
    )
    print(f"  {'operation':<28} {'ONNX node':<28} {'driver us':>10} {'onnxruntime us':>15}")
    seen: set[str] = set()
    for e in drv:
        layer = e["layer"] or "-"
        ort_us = ref_by_layer.get(layer) if layer not in seen else None
        seen.add(layer)
        ort = f"{ort_us:>15.1f}" if ort_us is not None else f"{'':>15}"
        print(f"  {e['name']:<28} {layer[:28]:<28} {e['us']:>10.1f} {ort}")
    total_ort = sum(e["us"] for e in ref)
    print(f"  {'total':<57} {sum(e['us'] for e in drv):>10.1f} {total_ort:>15.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=MODELS, help="zoo models (default: the table in the README)")
    p.add_argument(
        "--threads",
        type=thread_counts,
        default=(1,),
        help="thread count of both backends, or several comma-separated (e.g. 1,2): a table each and "
        "the speed-ups between them",
    )
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds, discarded")
    p.add_argument("--duration", type=float, default=3.0, help="minimum timed seconds")
    p.add_argument("--iterations", type=int, default=20, help="minimum timed calls")
    p.add_argument("--images", type=int, default=8, help="distinct images cycled through")
    p.add_argument("--compilation", action="store_true", help="also time compilation and the cache")
    p.add_argument(
        "--sequences", type=int, default=10, help="LSTM models: dataset sequences run step by step"
    )
    p.add_argument("--driver", default="sample-all")
    p.add_argument(
        "--execution",
        default="sync",
        type=executions,
        help="the driver's execution paths, comma-separated, each its own row: sync, async, fenced, burst (default sync)",
    )
    p.add_argument("--in-process", action="store_true", help="load the driver in this process (no IPC)")
    p.add_argument(
        "--profile", action="store_true", help="LSTM models: per-operation times of both backends too"
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="skip the memory line (each backend's peak resident memory per model)",
    )
    a = p.parse_args()
    if a.in_process and len(a.threads) > 1:
        p.error("--in-process takes one thread count (this process's threads are set once)")
    # BLAS threads of this process (in-process driver) follow --threads too.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads[0])

    from mlts.runtime.discovery import discover

    spec = discover()[a.driver]
    medians: dict[tuple[int, str, str], tuple[float, float]] = {}
    for threads in a.threads:
        run_table(a, spec, threads, medians)
    if len(a.threads) > 1:
        print_speedups(a.threads, a.models, a.execution, medians)
    return 0


def run_table(a: argparse.Namespace, spec, threads: int, medians: dict) -> None:
    """The table of one thread count (header, a row per model and path, each model's memory line);
    every row's two medians go into `medians` by (threads, model, path)."""
    from mlts.bench.progress import Progress
    from mlts.bench.runner import BenchmarkConfig, benchmark_model, open_imageset
    from mlts.bench.sources import ModelSource
    from mlts.convert import load_model
    from mlts.runtime.discovery import open_device
    from mlts.runtime.execution import ExecutionMode

    config = BenchmarkConfig(
        threads=threads,
        warmup_s=a.warmup,
        duration_s=a.duration,
        min_iterations=a.iterations,
        images=a.images,
        in_process=a.in_process,
        sequences=a.sequences,
        executions=tuple(ExecutionMode(p) for p in a.execution),
        compilation=a.compilation,
        compile_max_iterations=20,
        compile_max_seconds=3.0,
    )
    images = open_imageset(config)
    print(f"cpu: {cpu_name()}, {os.cpu_count()} logical CPUs; load average before the run: {load_average()}")
    print(
        f"threads={threads} (driver and onnxruntime) warmup={a.warmup}s duration>={a.duration}s "
        f"iterations>={a.iterations} estimator=median driver={a.driver} "
        f"({'in-process' if a.in_process else 'own process'}, {'/'.join(a.execution)} executions)"
    )
    print(f"driver kernels: {driver_kernels(threads)}")
    print(
        f"{'model':<38} {'driver ms':>10} {'on device':>9} {'onnxruntime ms':>15} {'ratio':>7} {'ratio 95% CI':>14} "
        f"{'max|err|':>9} {'top1 agr':>8}"
        + (f" {'compile ms':>10} {'from cache ms':>13}" if a.compilation else "")
    )
    for name in a.models:
        source = ModelSource(name, None, name)
        # A fresh driver service per model: its high-water mark after the model's runs is the model's.
        device = open_device(spec, in_process=a.in_process, threads=threads)
        try:
            pid = getattr(getattr(device, "process", None), "pid", None)
            idle = status_kib(pid, "VmRSS") if isinstance(pid, int) else None
            rows = benchmark_model(
                source, load_model(source.onnx_path()), {a.driver: device}, config, Progress(), images
            )
            for path, drv in zip(a.execution, rows[1:], strict=True):
                print_row(name if len(a.execution) == 1 else f"{name} {path}", rows[0], drv, a.compilation)
                if drv["status"] == "ok" and rows[0].get("status", "ok") == "ok":
                    medians[(threads, name, path)] = (
                        drv["latency_ms"]["median"],
                        rows[0]["latency_ms"]["median"],
                    )
                if a.profile and drv.get("latency_unit") == "step" and path == a.execution[0]:
                    profile_lstm(name, device, threads, a.duration)
            peak = status_kib(pid, "VmHWM") if isinstance(pid, int) else None
        finally:
            device.close()
        if not a.no_memory:
            driver = (idle, peak) if idle is not None and peak is not None else None
            print(memory_line(driver, onnxruntime_memory(str(source.onnx_path()), threads)), flush=True)
    print(f"load average after the run: {load_average()}")


def thread_counts(text: str) -> tuple[int, ...]:
    """--threads' value: positive thread counts, comma-separated, each once."""
    try:
        counts = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"thread counts are whole numbers, comma-separated: {text!r}"
        ) from None
    if any(c < 1 for c in counts):
        raise argparse.ArgumentTypeError(f"a thread count is at least 1: {text!r}")
    if len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"a thread count is named twice in {text!r}")
    return counts


def print_speedups(counts: tuple[int, ...], models: list[str], paths: tuple[str, ...], medians: dict) -> None:
    """Per model and path, the driver's and onnxruntime's speed-up from the smallest thread count to
    each other one (median at the smallest ÷ median at that count)."""
    base, others = min(counts), sorted(c for c in counts if c != min(counts))
    print(f"speed-up from {base} thread{'s' if base > 1 else ''} (median at {base} ÷ median at N), same run:")
    head = "".join(f" {f'driver x{n}':>10} {f'onnxrt x{n}':>10}" for n in others)
    print(f"{'model':<38}{head}")
    for name in models:
        for path in paths:
            label = name if len(paths) == 1 else f"{name} {path}"
            first = medians.get((base, name, path))
            cells = ""
            for n in others:
                at = medians.get((n, name, path))
                if first is None or at is None or at[0] <= 0 or at[1] <= 0:
                    cells += f" {'-':>10} {'-':>10}"
                else:
                    cells += f" {first[0] / at[0]:>9.2f}x {first[1] / at[1]:>9.2f}x"
            print(f"{label:<38}{cells}")


def executions(text: str) -> tuple[str, ...]:
    """--execution's value: known paths, comma-separated, each once."""
    paths = tuple(p.strip() for p in text.split(","))
    for path in paths:
        if path not in ("sync", "async", "fenced", "burst"):
            raise argparse.ArgumentTypeError(f"unknown execution path {path!r} (sync, async, fenced, burst)")
    if len(set(paths)) != len(paths):
        raise argparse.ArgumentTypeError(f"a path is named twice in {text!r}")
    return paths


def print_row(name: str, ref: dict, drv: dict, compilation: bool) -> None:
    """One model's line: the driver's row (on one execution path) against onnxruntime's."""
    if drv["status"] != "ok":
        print(f"{name:<38} driver error: {drv['error']}")
        return
    r, d = ref["latency_ms"]["median"], drv["latency_ms"]["median"]
    ci = fmt_ci(ratio_ci(drv["latency_ms"], ref["latency_ms"]))
    acc = drv["accuracy"]
    if drv.get("latency_unit") == "step":
        metric = acc["vs_reference"]["metric"]
        score = (
            f"PER {metric['phone_error_rate']:.1f}%"
            if metric["name"] == "PhoneErrorRate"
            else f"MCD {metric['mel_cep_distortion']:.0e}"
        )
        err = max(o["max_abs_error"] for o in acc["vs_reference"]["outputs"].values())
        label = f"{name} (per step, {drv['steps']} steps)"
        print(
            f"{label:<38} {d:>10.3f} {on_device_ms(drv):>9} {r:>15.3f} {d / r:>7.2f} {ci:>14} {err:>9.2e} {score:>8}"
        )
        return
    vs = acc["vs_reference"]
    err = (
        f"{vs['max_quant_deviation']} units" if "max_quant_deviation" in vs else f"{vs['max_abs_error']:.2e}"
    )
    line = f"{name:<38} {d:>10.2f} {on_device_ms(drv):>9} {r:>15.2f} {d / r:>7.2f} {ci:>14} {err:>9} {vs['top1_agreement']:>8.0%}"
    comp = drv.get("compilation") if compilation else None
    if comp:
        cached = comp["prepare_from_cache"]
        line += f" {comp['without_cache']['median']:>10.1f} "
        line += f"{cached['median']:>13.1f}" if cached else f"{'-':>13}"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
