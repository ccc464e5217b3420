"""Instructions per step of a recurrent zoo model run step by step in process, counted by callgrind.

usage: python benchmarks/step_instructions.py [MODEL ...] [--steps N] [--warmup N] [--threads N]
       [--path session|execute] [--top N] [--keep DIR]

What a step costs in instructions does not depend on how busy the machine is, where its wall time
does. For each model (default: asr_float and tts_float) this runs the first dataset sequence's steps
through the per-step model in process, each step's state outputs fed to the next step, the driver
in this process with N kernel threads (default 1), under valgrind's callgrind: the counters are
zeroed before the counted steps and dumped after them (`--zero-before=getsid --dump-before=getpgid`,
two libc calls nothing else in the loop makes), as benchmarks/harness_cost.py does.

Paths: `session` (default) times whole `Session.run` calls (inputs into the pool, the execution,
output copies: what a client of the in-process driver pays per step); `execute` times the bare
`executeSynchronously` of one fixed request whose state inputs are the previous step's outputs,
copied into the request's pool (the driver alone).

Each model prints `MODEL PATH instructions/step I n=N threads=T`, and with `--top N` the N functions
of most instructions (self cost) with their share, so the profile can say what a step pays for.
"""

from __future__ import annotations

import argparse
import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

MODELS = ("asr_float", "tts_float")


def _steps(name: str):
    """The converted per-step model, its first sequence's feature vectors and where its states sit."""
    from mlts.bench.recurrent import StepSignature
    from mlts.bench.sources import ModelSource, zoo_entry
    from mlts.convert import convert, load_model
    from mlts.datasets import speech

    source = ModelSource(name, None, name)
    conv = convert(load_model(source.onnx_path()))
    sig = StepSignature.of(zoo_entry(source), conv)
    return conv.model, speech.sequences(name, 1)[0], sig


def _feeds(sig, x, state, n_inputs: int):
    import numpy as np

    feed = [None] * n_inputs
    feed[sig.feature_input] = np.ascontiguousarray(x[None], dtype=np.float32)
    for (i, _, _), value in zip(sig.states, state, strict=True):
        feed[i] = value
    return feed


def _stepper(session, sig, xs, path: str):
    """One step of `path` per call (argument: the step's number), the states carried between calls."""
    import numpy as np

    from mlts.hal.enums import MeasureTiming

    n_in = len(session.model.main.input_indexes)
    state = [np.zeros(shape, np.float32) for _, _, shape in sig.states]
    if path == "session":

        def step(k: int) -> None:
            nonlocal state
            outs, _ = session.run(_feeds(sig, xs[k % len(xs)], state, n_in))
            state = [outs[o] for _, o, _ in sig.states]

        return step
    session.run(_feeds(sig, xs[0], state, n_in))
    layout = session._layout  # noqa: SLF001  (the fixed request of the last run)
    request, prepared = layout.request, session.prepared
    views_in = [layout.in_views[i] for i, _, _ in sig.states]
    views_out = [layout.out_views[o] for _, o, _ in sig.states]
    x_view = layout.in_views[sig.feature_input]

    def execute(k: int) -> None:
        x_view[...] = xs[k % len(xs)]
        prepared.executeSynchronously(request, MeasureTiming.NO)
        for v_in, v_out in zip(views_in, views_out, strict=True):
            v_in[...] = v_out

    return execute


def measure(models: list[str], steps: int, warmup: int, threads: int, path: str, markers: bool) -> None:
    from driver import native
    from mlts.runtime.discovery import discover, open_device
    from mlts.runtime.session import Session

    native.set_threads(threads)
    device = open_device(discover()["sample-all"], in_process=True)
    try:
        for name in models:
            model, xs, sig = _steps(name)
            session = Session(device, model)
            try:
                step = _stepper(session, sig, xs, path)
                for k in range(warmup):
                    step(k)
                if markers:
                    os.getsid(0)  # callgrind zeroes its counters here
                for k in range(warmup, warmup + steps):
                    step(k)
                if markers:
                    os.getpgid(0)  # callgrind dumps the counters of the steps here
                print(f"{name} {path} n={steps} threads={threads}", flush=True)
            finally:
                session.close()
    finally:
        device.close()


def with_callgrind(a: argparse.Namespace) -> int:
    from callgrind_dumps import run_counted, top, totals

    def report(line: str, dump: str) -> None:
        name, which, n, threads = line.split()
        print(f"{name} {which} instructions/step {totals(dump) / a.steps:,.0f} {n} {threads}", flush=True)
        if a.top:
            print("\n".join(top(dump, a.top, a.steps)), flush=True)

    args = ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads), "--path", a.path]
    return run_counted(__file__, [*args, *a.models], a.models, a.keep, a.timeout, report)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=list(MODELS), help="recurrent zoo models")
    p.add_argument("--steps", type=int, default=200, help="counted steps per model")
    p.add_argument("--warmup", type=int, default=50, help="steps run before counting")
    p.add_argument("--threads", type=int, default=1, help="the driver's kernel threads")
    p.add_argument("--path", choices=("session", "execute"), default="session")
    p.add_argument("--top", type=int, default=0, help="print the N functions of most instructions")
    p.add_argument("--keep", default="", help="keep the callgrind dumps in this directory")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds the valgrind run may take")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        p.error("--steps and --threads must be >= 1, --warmup >= 0")
    unknown = [m for m in a.models if m not in MODELS]
    if unknown:
        p.error(f"unknown recurrent model(s): {', '.join(unknown)} (known: {', '.join(MODELS)})")
    if a.child:
        measure(a.models, a.steps, a.warmup, a.threads, a.path, markers=True)
        return 0
    return with_callgrind(a)


if __name__ == "__main__":
    sys.exit(main())
