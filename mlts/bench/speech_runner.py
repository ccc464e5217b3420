"""The LSTM speech models in the benchmark: every backend runs the dataset's sequences, scored by bench.recurrent.

Per-step zoo models (asr_float, tts_float) run step by step with state
carried; whole-sequence forms run one call per sequence, prepared once per
sequence length on drivers. Golden outputs come from the float64 reference
run of the whole-sequence model (mlts.datasets.golden, cached).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlts.bench import recurrent
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.runner import BenchmarkConfig, Progress, backend_order, record, timing_summary
from mlts.bench.sources import ModelSource
from mlts.datasets import speech
from mlts.datasets.golden import golden_outputs
from mlts.hal.errors import HalError
from mlts.models import zoo


@dataclass(frozen=True, slots=True)
class Scored:
    """What turns each backend's SequenceRun into its results row."""

    model: str
    step_name: str
    sig: recurrent.StepSignature
    golden: list
    warmup: int
    whole: bool

    def rows(
        self,
        runs: dict[str, recurrent.SequenceRun],
        rows: dict[str, dict],
        reference_label: str,
        config: BenchmarkConfig,
        drivers: list[str],
    ) -> list[dict]:
        """The reference row then one per driver; `rows` already holds the drivers that failed."""
        for backend, run in runs.items():
            against = None if backend == "ref" else runs["ref"]
            accuracy = recurrent.score(self.step_name, self.sig, run, self.golden, against)
            rows[backend] = record(
                self.model,
                reference_label if backend == "ref" else f"driver:{backend}",
                config,
                **recurrent.latency_fields(run, self.warmup, whole=self.whole),
                driver_timing=None if backend == "ref" else timing_summary(run.extras),
                accuracy=accuracy,
                validation_errors=recurrent.validation_errors(accuracy),
            )
            rows[backend].update(
                iterations=len(run.samples), inputs=len(run.outputs), warmup_iterations=self.warmup
            )
        return [rows["ref"]] + [rows[d] for d in drivers]


def benchmark_recurrent(
    source: ModelSource, entry, proto, devices: dict, config: BenchmarkConfig, progress: Progress
) -> list[dict]:
    """A per-step LSTM zoo model: the speech sequences step by step on every backend (see bench.recurrent)."""
    from mlts.convert import convert
    from mlts.runtime.session import Session

    if entry.form == "sequence":
        return _benchmark_whole_sequences(source, entry, proto, devices, config, progress)
    conv = convert(proto)
    sig = recurrent.StepSignature.of(entry, conv)
    n_inputs = len(conv.inputs)
    seqs = speech.sequences(entry.name, config.sequences)
    golden = _speech_golden(entry.name, entry.input_name, seqs, source, progress)
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)

    def ref_step(feed):
        return reference.run(feed), None

    runs: dict[str, recurrent.SequenceRun] = {}
    rows: dict[str, dict] = {}
    for backend in backend_order(config, source.name, devices):
        if backend == "ref":
            progress(f"{source.name}: {reference.backend}, {len(seqs)} sequences step by step")
            runs[backend] = recurrent.run_sequences(ref_step, sig, n_inputs, seqs, config.warmup)
            continue
        label = f"driver:{backend}"
        progress(f"{source.name}: {label}, {len(seqs)} sequences step by step")
        try:
            session = Session(devices[backend], conv.model)
            try:
                runs[backend] = recurrent.run_sequences(session.run, sig, n_inputs, seqs, config.warmup)
            finally:
                session.close()
        except HalError as e:
            rows[backend] = record(source.name, label, config, status="error", error=str(e))
    scored = Scored(source.name, entry.name, sig, golden, config.warmup, whole=False)
    return scored.rows(runs, rows, reference.backend, config, sorted(devices))


def _speech_golden(
    step_name: str, input_name: str, seqs: list, source: ModelSource, progress: Progress
) -> list:
    progress(f"{source.name}: golden outputs (float64 reference, cached)")
    whole = zoo.load(step_name + "_sequence")
    return golden_outputs(whole, [{input_name: s[:, None, :]} for s in seqs], step_name)


def _benchmark_whole_sequences(
    source: ModelSource, entry, proto, devices: dict, config: BenchmarkConfig, progress: Progress
) -> list[dict]:
    """A whole-sequence LSTM zoo model: each sequence in one call; drivers prepare once per sequence length."""
    from mlts.convert import convert
    from mlts.runtime.session import Session

    step_name = entry.step_model
    seqs = speech.sequences(step_name, config.sequences)
    golden = _speech_golden(step_name, entry.input_name, seqs, source, progress)
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)
    sig = recurrent.StepSignature(0, 0, (), (entry.output_name,))
    warmup = min(config.warmup, 1)
    runs: dict[str, recurrent.SequenceRun] = {}
    rows: dict[str, dict] = {}
    for backend in backend_order(config, source.name, devices):
        if backend == "ref":
            progress(f"{source.name}: {reference.backend}, {len(seqs)} whole sequences")
            runs[backend] = recurrent.run_whole(lambda x: (reference.run([x]), None), seqs, warmup)
            continue
        label = f"driver:{backend}"
        progress(f"{source.name}: {label}, {len(seqs)} whole sequences (prepared per length)")
        sessions: dict[int, Session] = {}

        def execute(x, device=devices[backend], sessions=sessions):
            if len(x) not in sessions:
                conv = convert(proto, input_shapes={entry.input_name: x.shape})
                sessions[len(x)] = Session(device, conv.model)
            return sessions[len(x)].run([x])

        try:
            runs[backend] = recurrent.run_whole(execute, seqs, warmup)
        except HalError as e:
            rows[backend] = record(source.name, label, config, status="error", error=str(e))
        finally:
            for session in sessions.values():
                session.close()
    scored = Scored(source.name, step_name, sig, golden, warmup, whole=True)
    return scored.rows(runs, rows, reference.backend, config, sorted(devices))
