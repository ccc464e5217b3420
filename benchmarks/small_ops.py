"""Time of the prepared kernels of small operations, called directly (no executor around them).

usage: python benchmarks/small_ops.py [--calls N] [--cold] [FILTER ...]

On the shapes the zoo's models give them (asr_float's SOFTMAX over 41 classes,
tts_float's LSTM-sized TANH and LOGISTIC and its output CONCATENATION,
mobilenet's 8-bit SOFTMAX over 1001 classes and MEAN over 7x7 positions), each
kernel is prepared once and its run timed: the median of 7 repeats of --calls
calls, in µs per call. With --cold, every call is preceded by writing 8 MiB
(caches evicted, as between a model's operations) and the median of single
calls is printed instead. FILTER keeps the cases whose name contains it. The
load average before the run is printed: other work on the machine inflates
every figure.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from driver.ops import ArgInfo, kernel_for  # noqa: E402
from mlts.hal.enums import OperandType as T  # noqa: E402
from mlts.hal.enums import OperationType as Op  # noqa: E402

Case = tuple[str, Op, list[ArgInfo], list[ArgInfo], list[Any]]


def cases() -> list[Case]:
    rng = np.random.default_rng(0)
    f32, u8 = int(T.TENSOR_FLOAT32), int(T.TENSOR_QUANT8_ASYMM)

    def fa(shape: tuple[int, ...]) -> ArgInfo:
        return ArgInfo(f32, shape)

    beta = ArgInfo(int(T.FLOAT32), (), value=1.0)
    axes = np.array([1, 2], np.int32)
    axes_arg = ArgInfo(int(T.TENSOR_INT32), (2,), value=axes)
    keep = ArgInfo(int(T.INT32), (), value=1)
    logits = rng.standard_normal((1, 41)).astype(np.float32)
    hidden = rng.standard_normal((1, 256)).astype(np.float32)
    parts = [rng.standard_normal((1, 4, k)).astype(np.float32) for k in (40, 5, 3, 1)]
    classes = rng.integers(0, 256, (1, 1001), dtype=np.uint8)
    features = rng.integers(0, 256, (1, 7, 7, 1280), dtype=np.uint8)
    ffeatures = rng.standard_normal((1, 7, 7, 1280)).astype(np.float32)
    concat_ins = [fa(p.shape) for p in parts] + [ArgInfo(int(T.INT32), (), value=-1)]
    return [
        ("SOFTMAX float32 [1,41]", Op.SOFTMAX, [fa((1, 41)), beta], [fa((1, 41))], [logits, 1.0]),
        ("TANH float32 [1,256]", Op.TANH, [fa((1, 256))], [fa((1, 256))], [hidden]),
        ("LOGISTIC float32 [1,256]", Op.LOGISTIC, [fa((1, 256))], [fa((1, 256))], [hidden]),
        ("CONCATENATION float32 4 x [1,4,k]", Op.CONCATENATION, concat_ins, [fa((1, 4, 49))], [*parts, -1]),
        (
            "SOFTMAX uint8 [1,1001]",
            Op.SOFTMAX,
            [ArgInfo(u8, (1, 1001), 0.296, 118), beta],
            [ArgInfo(u8, (1, 1001), 1 / 256, 0)],
            [classes, 1.0],
        ),
        (
            "MEAN uint8 [1,7,7,1280] axes 1,2",
            Op.MEAN,
            [ArgInfo(u8, features.shape, 0.0235, 0), axes_arg, keep],
            [ArgInfo(u8, (1, 1, 1, 1280), 0.0162, 0)],
            [features, axes, 1],
        ),
        (
            "MEAN float32 [1,7,7,1280] axes 1,2",
            Op.MEAN,
            [fa(ffeatures.shape), axes_arg, keep],
            [fa((1, 1, 1, 1280))],
            [ffeatures, axes, 1],
        ),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500, help="calls per timed repeat")
    p.add_argument("--cold", action="store_true", help="evict caches before every call")
    p.add_argument("filters", nargs="*", help="keep the cases whose name contains one of these")
    a = p.parse_args()
    print(f"load average before the run: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    big = np.empty(8 << 20, np.uint8)
    for name, code, ins, outs, args in cases():
        if a.filters and not any(f in name for f in a.filters):
            continue
        prepare = kernel_for(int(code))
        assert prepare is not None
        run = prepare(ins, outs)
        if a.cold:
            times = []
            for _ in range(a.calls):
                big.fill(1)
                t0 = time.perf_counter()
                run(args)
                times.append(time.perf_counter() - t0)
            us = statistics.median(times) * 1e6
        else:
            call = functools.partial(run, args)
            us = statistics.median(timeit.repeat(call, number=a.calls, repeat=7)) / a.calls * 1e6
        print(f"{name:36s} {us:9.2f} µs")


if __name__ == "__main__":
    main()
