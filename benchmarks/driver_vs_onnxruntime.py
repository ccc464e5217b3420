"""Median latency of the sample driver and of onnxruntime on the same inputs and thread count, and their ratio.

usage: python benchmarks/driver_vs_onnxruntime.py [--threads N] [--warmup S] [--duration S]
       [--iterations N] [--images N] [--sequences N] [--compilation] [--in-process] [MODEL ...]

Both backends see the same procedural images; each timed iteration is the wall
clock around one whole execution call (for the driver: request into shared
memory, executeSynchronously in the driver process, outputs back); a warm-up
of --warmup seconds is discarded, then calls are timed for at least
--duration seconds and --iterations calls. The estimator is the median of the
timed iterations. With --compilation the driver's median compile time without
cache and from its cache are printed too.
Measured in one run, so the ratio is comparable even on a noisy machine.
Quantized models are compared with onnxruntime running the same quantized
ONNX file; their error column is the largest deviation in quantized units.
The LSTM models (asr_float, tts_float) run --sequences dataset sequences step
by step on both backends (state carried, reset per sequence); their figure is
the median per-step latency and their accuracy column is MLTS's metric
(PhoneErrorRate / mel-cepstral distortion) of the driver against onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "models",
        nargs="*",
        default=[
            "mobilenet_v1_1.0_224",
            "mobilenet_v2_1.0_224",
            "mobilenet_v1_1.0_224_quant",
            "asr_float",
            "tts_float",
        ],
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds, discarded")
    p.add_argument("--duration", type=float, default=3.0, help="minimum timed seconds")
    p.add_argument("--iterations", type=int, default=20, help="minimum timed calls")
    p.add_argument("--images", type=int, default=8, help="distinct images cycled through")
    p.add_argument("--compilation", action="store_true", help="also time compilation and the cache")
    p.add_argument(
        "--sequences", type=int, default=10, help="LSTM models: dataset sequences run step by step"
    )
    p.add_argument("--driver", default="sample-all")
    p.add_argument("--in-process", action="store_true", help="load the driver in this process (no IPC)")
    a = p.parse_args()
    # BLAS threads of this process (in-process driver) follow --threads too.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)

    from mlts.bench.progress import Progress
    from mlts.bench.runner import BenchmarkConfig, benchmark_model, open_imageset
    from mlts.bench.sources import ModelSource
    from mlts.convert import load_model
    from mlts.runtime.discovery import discover, open_device

    spec = discover()[a.driver]
    config = BenchmarkConfig(
        threads=a.threads,
        warmup_s=a.warmup,
        duration_s=a.duration,
        min_iterations=a.iterations,
        images=a.images,
        in_process=a.in_process,
        sequences=a.sequences,
        compilation=a.compilation,
        compile_max_iterations=20,
        compile_max_seconds=3.0,
    )
    device = open_device(spec, in_process=a.in_process, threads=a.threads)
    images = open_imageset(config)
    print(
        f"threads={a.threads} warmup={a.warmup}s duration>={a.duration}s iterations>={a.iterations} "
        f"estimator=median driver={a.driver} ({'in-process' if a.in_process else 'own process'})"
    )
    print(
        f"{'model':<38} {'driver ms':>10} {'onnxruntime ms':>15} {'ratio':>7} {'max|err|':>9} {'top1 agr':>8}"
        + (f" {'compile ms':>10} {'from cache ms':>13}" if a.compilation else "")
    )
    try:
        for name in a.models:
            source = ModelSource(name, None, name)
            rows = benchmark_model(
                source, load_model(source.onnx_path()), {a.driver: device}, config, Progress(), images
            )
            ref, drv = rows[0], rows[1]
            if drv["status"] != "ok":
                print(f"{name:<38} driver error: {drv['error']}")
                continue
            r, d = ref["latency_ms"]["median"], drv["latency_ms"]["median"]
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
                print(f"{label:<38} {d:>10.3f} {r:>15.3f} {d / r:>7.2f} {err:>9.2e} {score:>8}")
                continue
            vs = acc["vs_reference"]
            err = (
                f"{vs['max_quant_deviation']} units"
                if "max_quant_deviation" in vs
                else f"{vs['max_abs_error']:.2e}"
            )
            line = f"{name:<38} {d:>10.2f} {r:>15.2f} {d / r:>7.2f} {err:>9} {vs['top1_agreement']:>8.0%}"
            comp = drv.get("compilation")
            if comp:
                cached = comp["prepare_from_cache"]
                line += f" {comp['without_cache']['median']:>10.1f} "
                line += f"{cached['median']:>13.1f}" if cached else f"{'-':>13}"
            print(line)
    finally:
        device.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
