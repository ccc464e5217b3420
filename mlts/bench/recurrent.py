"""Recurrent (LSTM) models: the speech sequences run step by step, as MLTS runs asr_float and tts_float.

(The whole-sequence forms run each sequence in one call instead: see run_whole.)

Every backend runs the same sequences through the per-step model. The state
outputs of one step are the state inputs of the next; every sequence starts
from zero state. Latency is the wall clock around each step's execution call
(so per-step statistics); warm-up steps (the first steps of the first
sequence, state reset afterwards) are excluded. Accuracy is scored with
MLTS's metric for the model (PhoneErrorRate for ASR, MelCepLogF0 for TTS)
plus MSE and max absolute error, against the float64 golden outputs and,
for drivers, against onnxruntime's outputs; a metric beyond its limit
records a validation error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlts.bench import speech_metrics
from mlts.bench.stats import describe
from mlts.bench.stopping import BOUND, STABLE, StableRule
from mlts.records.benchmark import Run, Warmup, violation
from mlts.records.stats import Stats

# One step: the model's inputs in order -> (outputs in order, backend-specific extra such as driver timing).
# A step's outputs: None for those kept in driver buffers (the state, with --state-in-driver).
StepFn = Callable[[list[Any]], tuple[Sequence[np.ndarray | None], Any]]


@dataclass(frozen=True, slots=True)
class StepSignature:
    """Where the per-step model's features and states sit among its converted inputs and outputs."""

    feature_input: int
    main_output: int
    states: tuple[tuple[int, int, tuple[int, ...]], ...]  # (input index, output index, shape)
    output_names: tuple[str, ...]

    @classmethod
    def of(cls, entry, conv) -> StepSignature:
        """From a zoo entry (its state names) and the Conversion of its ONNX model (the order)."""
        ins = [t.name for t in conv.inputs]
        outs = [t.name for t in conv.outputs]
        states = tuple((ins.index(i), outs.index(o), tuple(shape)) for i, o, shape in entry.state)
        return cls(ins.index(entry.input_name), outs.index(entry.output_name), states, tuple(outs))


@dataclass(slots=True)
class SequenceRun:
    """Per-step latencies (s), per sequence the stacked outputs ([steps, ...] per output), and the extras."""

    samples: list[float]
    sequence_seconds: list[float]
    outputs: list[list[np.ndarray | None]]
    extras: list[Any]
    warmup_calls: int = 0
    warmup_seconds: float = 0.0
    # What ended a step-by-step warm-up: "bound" (warmup_s passed) or "stable" (warmup_rule); None for
    # whole-sequence runs, whose warm-up is one call per sequence.
    warmup_stopped: str | None = None


def _feed(sig: StepSignature, x: np.ndarray, state: Sequence[np.ndarray | None], n_inputs: int) -> list[Any]:
    """One step's inputs: the features and the state (None for state kept in driver buffers)."""
    feed: list[np.ndarray | None] = [np.empty(0)] * n_inputs
    feed[sig.feature_input] = x
    for (i, _, _), value in zip(sig.states, state, strict=True):
        feed[i] = value
    return feed


def _zero_state(sig: StepSignature) -> list[np.ndarray | None]:
    return [np.zeros(shape, np.float32) for _, _, shape in sig.states]


def run_sequences(
    step: StepFn,
    sig: StepSignature,
    n_inputs: int,
    sequences: Sequence[np.ndarray],
    warmup_s: float,
    clock: Callable[[], float] = time.perf_counter,
    reset: Callable[[], None] | None = None,
    warmup_rule: StableRule | None = None,
) -> SequenceRun:
    """Every sequence step by step with state carried and reset per sequence; see the module docstring.

    `reset`: the state lives in the driver (memory domains): called before each sequence (and
    after the warm-up) to zero it; the step then returns None for the state outputs and the
    state arrays fed to it are placeholders.

    Warm-up: steps through the first sequence (cycling, state carried) until `warmup_s` seconds have
    passed, at least one step when warmup_s > 0, or with `warmup_rule` (mlts.bench.stopping) sooner
    once the steps' times have settled; not timed, and the state is reset afterwards.
    """
    state = _zero_state(sig)
    if reset is not None:
        reset()
    first = sequences[0]
    calls = 0
    start = clock()
    elapsed = 0.0
    durations: list[float] = []
    stopped = BOUND
    last = start
    while warmup_s > 0 and (calls == 0 or elapsed < warmup_s):
        outs, _ = step(_feed(sig, first[calls % len(first)][None], state, n_inputs))
        after = clock()
        durations.append(after - last)  # one reading per step: from the end of the step before
        last = after
        state = [outs[o] for _, o, _ in sig.states]
        calls += 1
        elapsed = after - start
        if warmup_rule is not None and elapsed < warmup_s and warmup_rule.stable(durations):
            stopped = STABLE
            break
    run = SequenceRun([], [], [], [], calls, elapsed, stopped)
    for seq in sequences:
        state = _zero_state(sig)
        if reset is not None:
            reset()
        per_step: list[Sequence[np.ndarray | None]] = []
        start = len(run.samples)
        for x in seq:
            feed = _feed(sig, x[None], state, n_inputs)
            t0 = time.perf_counter()
            outs, extra = step(feed)
            run.samples.append(time.perf_counter() - t0)
            run.extras.append(extra)
            state = [outs[o] for _, o, _ in sig.states]
            per_step.append(outs)
        run.sequence_seconds.append(sum(run.samples[start:]))
        run.outputs.append([_stacked([o[k] for o in per_step]) for k in range(len(sig.output_names))])
    return run


def _stacked(steps: list[np.ndarray | None]) -> np.ndarray | None:
    """One output over the steps of a sequence; None when it stayed in driver buffers."""
    present = [v for v in steps if v is not None]
    return np.stack(present) if len(present) == len(steps) else None


def run_whole(
    execute: Callable[[np.ndarray], tuple[list[np.ndarray], Any]],
    sequences: Sequence[np.ndarray],
    warmup: int,
) -> SequenceRun:
    """Each sequence [steps, features] in one call on [steps, 1, features]; `warmup` untimed calls first.

    The warm-up calls run on each sequence before its timed call, since a
    backend may prepare per sequence length. `samples` holds one latency per
    sequence.
    """
    run = SequenceRun([], [], [], [], 0, 0.0)
    for seq in sequences:
        x = np.ascontiguousarray(seq[:, None, :])
        for _ in range(warmup):
            t0 = time.perf_counter()
            execute(x)
            run.warmup_calls += 1
            run.warmup_seconds += time.perf_counter() - t0
        t0 = time.perf_counter()
        outs, extra = execute(x)
        elapsed = time.perf_counter() - t0
        run.samples.append(elapsed)
        run.sequence_seconds.append(elapsed)
        run.extras.append(extra)
        run.outputs.append(list(outs))
    return run


def _metric(model: str, actual: list[np.ndarray], expected: list[np.ndarray]) -> dict:
    """MLTS's metric for the model family on the main outputs of every sequence."""
    expected = [e.reshape(a.shape) for a, e in zip(actual, expected, strict=True)]
    if model.startswith("asr"):
        return {"name": "PhoneErrorRate", **speech_metrics.phone_error_rate_many(actual, expected)}
    return {"name": "MelCepLogF0", **speech_metrics.mel_cep_log_f0_many(actual, expected)}


def score(
    model: str, sig: StepSignature, run: SequenceRun, golden: list[np.ndarray], reference: SequenceRun | None
) -> dict:
    """Accuracy of one backend's run: vs the golden outputs, and vs onnxruntime's run when given."""
    main = _read_back([outs[sig.main_output] for outs in run.outputs], "the main output")
    golden_shaped = [g.reshape(a.shape) for a, g in zip(main, golden, strict=True)]
    result = {
        "vs_golden": {
            "metric": _metric(model, main, golden_shaped),
            "outputs": {
                sig.output_names[sig.main_output]: speech_metrics.output_errors_many(main, golden_shaped)
            },
        }
    }
    if reference is not None:
        ref_main = _read_back([outs[sig.main_output] for outs in reference.outputs], "the main output")
        result["vs_reference"] = {
            "metric": _metric(model, main, ref_main),
            "outputs": {
                name: speech_metrics.output_errors_many(
                    _read_back([outs[k] for outs in run.outputs], name),
                    _read_back([outs[k] for outs in reference.outputs], name),
                )
                for k, name in enumerate(sig.output_names)
                # Outputs kept in the driver (state) are not read back, so not scored.
                if all(outs[k] is not None for outs in run.outputs)
            },
        }
    return result


def _read_back(outputs: Sequence[np.ndarray | None], what: str) -> list[np.ndarray]:
    """`outputs` that must have been read back from the backend (none kept in driver buffers)."""
    present = [o for o in outputs if o is not None]
    if len(present) != len(outputs):
        raise ValueError(f"{what} was kept in driver buffers, not read back, so it cannot be scored")
    return present


def validation_errors(accuracy: dict) -> list[dict]:
    """The broken limits of a score() result, each naming its metric and what it was compared against."""
    errors = []
    for against, label in (("vs_golden", "golden outputs"), ("vs_reference", "onnxruntime")):
        if against in accuracy:
            metric = accuracy[against]["metric"]
            errors += [
                violation(f"{v} (against the {label})", f"{metric.get('name')} {against}")
                for v in metric.get("violations", [])
            ]
    return errors


def latency_fields(
    run: SequenceRun, warmup_s: float, whole: bool = False, warmup_rule: StableRule | None = None
) -> dict:
    """Per-step latency statistics plus per-sequence totals for the results row (as records).

    `whole`: one sample per sequence (run_whole); the per-step figure is then
    each sequence's latency divided by its steps. `warmup_rule`: the early-stop rule the
    step-by-step warm-up ran with, recorded beside what ended it.
    """
    latency = describe(run.samples)
    latency["samples"] = [s * 1000.0 for s in run.samples]
    rule = warmup_rule.to_json() if warmup_rule is not None and run.warmup_stopped is not None else None
    common = {
        "warmup": Warmup(
            iterations=run.warmup_calls,
            seconds=run.warmup_seconds,
            target_seconds=warmup_s,
            stopped=run.warmup_stopped,
            stop_rule=rule,
        ),
        "iterations": len(run.samples),
        # The run is the whole chosen test set, not time-bound: every step (or sequence) once.
        "run": Run(iterations=len(run.samples), seconds=float(sum(run.samples))),
        "latency_ms": Stats.of(latency),
    }
    if whole:
        steps = [len(_read_back(outs[:1], "output 0")[0]) for outs in run.outputs]
        return {
            "mode": "whole-sequence",
            "sequences": len(run.outputs),
            "steps": sum(steps),
            "warmup_calls_per_sequence": 1 if run.warmup_calls else 0,
            **common,
            "latency_unit": "sequence",
            "step_latency_ms": Stats.of(describe([s / n for s, n in zip(run.samples, steps, strict=True)])),
        }
    return {
        "mode": "step-by-step",
        "sequences": len(run.outputs),
        "steps": len(run.samples),
        "warmup_steps": run.warmup_calls,
        **common,
        "latency_unit": "step",
        "sequence_latency_ms": Stats.of(describe(run.sequence_seconds)),
    }
