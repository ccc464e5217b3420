"""The LSTM speech models in the benchmark: every backend runs the dataset's sequences, scored by bench.recurrent.

Per-step zoo models (asr_float, tts_float) run step by step with state
carried; whole-sequence forms run one call per sequence, prepared once per
sequence length on drivers. Golden outputs come from the float64 reference
run of the whole-sequence model (mlts.datasets.golden, cached).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlts.bench import recurrent
from mlts.bench.backends import (
    REFERENCE_KEY,
    Backend,
    BackendKey,
    BenchmarkConfig,
    driver_backends,
    driver_timing,
    each_backend,
    measured_row,
    merged_retries,
    model_backends,
)
from mlts.bench.progress import Progress
from mlts.bench.reference import OnnxRuntimeReference
from mlts.bench.sources import ModelSource, family_of
from mlts.datasets import speech
from mlts.datasets.golden import golden_outputs
from mlts.models import zoo
from mlts.records import BenchmarkRow


@dataclass(frozen=True, slots=True)
class Scored:
    """What turns each backend's SequenceRun into its results row."""

    model: str
    step_name: str
    sig: recurrent.StepSignature
    golden: list
    whole: bool

    def rows(
        self,
        collected: Collected,
        reference_label: str,
        config: BenchmarkConfig,
        drivers: list[BackendKey],
    ) -> list[BenchmarkRow]:
        """The reference row then one per driver; `collected.rows` already holds the drivers that failed."""
        rows = dict(collected.rows)
        family = "asr" if self.step_name.startswith("asr") else "tts"
        for backend, run in collected.runs.items():
            reference = backend.is_reference
            against = None if reference else collected.runs[REFERENCE_KEY]
            accuracy = recurrent.score(self.step_name, self.sig, run, self.golden, against)
            rows[backend] = measured_row(
                self.model,
                reference_label if reference else backend.label,
                config,
                execution=backend.mode,
                family=family,
                dataset={"name": f"{self.step_name}-sequences", "size": len(run.outputs), "labels": None},
                **recurrent.latency_fields(
                    run, config.warmup_s, whole=self.whole, warmup_rule=_warmup_rule(config)
                ),
                driver_timing_us=None if reference else driver_timing(run.extras),
                accuracy=accuracy,
                validation_errors=recurrent.validation_errors(accuracy),
                compilation=collected.compilation.get(backend),
                memory_mb=collected.memory[backend],
                **collected.chosen.get(backend, {}),
                **({"retries": collected.retries[backend]} if backend in collected.retries else {}),
            )
        from mlts.bench.verdict import with_verdict

        ref = rows[REFERENCE_KEY]
        return [ref] + [with_verdict(rows[d], ref) for d in drivers]


@dataclass
class Collected:
    """Each backend's run, error rows of drivers that failed, compilation timings and peak memory."""

    runs: dict[BackendKey, recurrent.SequenceRun]
    rows: dict[BackendKey, BenchmarkRow]  # the error rows of drivers that failed
    compilation: dict[BackendKey, dict | None]
    memory: dict[BackendKey, dict]
    chosen: dict[BackendKey, dict] = field(default_factory=dict)
    retries: dict[BackendKey, dict] = field(default_factory=dict)  # driver backends: TRANSIENT errors retried


def _collect_runs(
    source: ModelSource,
    devices: dict,
    config: BenchmarkConfig,
    progress: Progress,
    what: str,
    run_reference: Callable[[], recurrent.SequenceRun],
    run_driver: Callable[[Callable[[Any], Any]], recurrent.SequenceRun],
    compile_model=None,
) -> Collected:
    """Every backend's run in the seeded order; a driver's HalError becomes its error row.

    `run_driver(open_session)` runs the sequences with sessions from `open_session(model)`: a
    Session on one driver, or for nnapi-reference the model partitioned over every driver.
    `compile_model`: the converted model whose compilation timings drivers get (None: not measured).
    """
    out = Collected({}, {}, {}, {})

    def run(backend: Backend) -> None:
        watch = backend.memory_watch()
        if backend.is_reference:
            progress.phase(source.name, backend.label, what)
            out.runs[backend.key] = run_reference()
        elif backend.partitioned:
            opener = _PartitionOpener(backend, config)
            progress.phase(source.name, backend.label, what)
            out.runs[backend.key] = run_driver(opener)
            out.chosen[backend.key] = opener.fields()
        else:
            if compile_model is not None and config.compilation:
                progress.phase(source.name, backend.label, "compilation timings")
                out.compilation[backend.key] = backend.compilation(compile_model, config, progress)
            progress.phase(source.name, backend.label, what)
            sessions: list = []

            def open_session(model):
                sessions.append(backend.open_session(model, config))
                return sessions[-1]

            try:
                out.runs[backend.key] = run_driver(open_session)
            finally:
                out.retries[backend.key] = merged_retries(sessions)
        out.memory[backend.key] = watch.result()

    _, out.rows = each_backend(
        model_backends(config, source.name, devices), source.name, family_of(source), config, progress, run
    )
    return out


class _PartitionOpener:
    """Opens partitioned sessions over every driver; keeps where the first one placed the operations."""

    def __init__(self, backend: Backend, config: BenchmarkConfig) -> None:
        self.backend = backend
        self.config = config
        self.opened = 0
        self.first: dict | None = None
        self.summary = ""

    def __call__(self, model):
        session = self.backend.open_session(model, self.config)
        self.opened += 1
        if self.first is None:
            self.first, self.summary = session.describe(), session.summary()
        return session

    def fields(self) -> dict:
        """`selection` and `partition` for the row (of the first model prepared; lengths differ only in shape)."""
        return {"selection": self.summary, "partition": self.first, "partitioned_models": self.opened}


def benchmark_recurrent(
    source: ModelSource, entry, proto, devices: dict, config: BenchmarkConfig, progress: Progress
) -> list[dict]:
    """A recurrent zoo model: the per-step form step by step, the whole-sequence form one call per sequence."""
    from mlts.convert import convert

    if entry.form == "sequence":
        return _benchmark_whole_sequences(source, entry, proto, devices, config, progress)
    conv = convert(proto)
    sig = recurrent.StepSignature.of(entry, conv)
    n_inputs = len(conv.inputs)
    seqs = speech.sequences(entry.name, config.sequences)
    golden = _speech_golden(entry.name, entry.input_name, seqs, source, progress)
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)

    def run_reference() -> recurrent.SequenceRun:
        return recurrent.run_sequences(
            lambda feed: (reference.run(feed), None),
            sig,
            n_inputs,
            seqs,
            config.warmup_s,
            warmup_rule=_warmup_rule(config),
        )

    def run_driver(open_session) -> recurrent.SequenceRun:
        session = open_session(conv.model)
        try:
            return recurrent.run_sequences(
                session.run, sig, n_inputs, seqs, config.warmup_s, warmup_rule=_warmup_rule(config)
            )
        finally:
            session.close()

    what = f"{len(seqs)} sequences step by step"
    collected = _collect_runs(
        source, devices, config, progress, what, run_reference, run_driver, compile_model=conv.model
    )
    scored = Scored(source.name, entry.name, sig, golden, whole=False)
    rows = scored.rows(collected, reference.backend, config, driver_backends(config, devices))
    if config.state_in_driver:
        from mlts.bench.state_rows import run_in_driver, state_rows

        progress.phase(source.name, "drivers", f"{what}, state in driver buffers")
        family = "asr" if entry.name.startswith("asr") else "tts"
        rows += state_rows(
            scored,
            conv.model,
            collected,
            devices,
            config,
            lambda session: run_in_driver(session, sig, n_inputs, seqs, config.warmup_s),
            family,
        )
    return [r.to_json() for r in rows]


def _speech_golden(
    step_name: str, input_name: str, seqs: list, source: ModelSource, progress: Progress
) -> list:
    progress.phase(source.name, "-", "golden outputs (float64 reference, cached)")
    whole = zoo.load(step_name + "_sequence")
    return golden_outputs(whole, [{input_name: s[:, None, :]} for s in seqs], step_name, progress.advance)


def _benchmark_whole_sequences(
    source: ModelSource, entry, proto, devices: dict, config: BenchmarkConfig, progress: Progress
) -> list[dict]:
    """A whole-sequence LSTM zoo model: each sequence in one call; drivers prepare once per sequence length.

    Each length is converted once, before any timing, and shared by every driver.
    """
    from mlts.convert import convert

    step_name = entry.step_model
    seqs = speech.sequences(step_name, config.sequences)
    golden = _speech_golden(step_name, entry.input_name, seqs, source, progress)
    reference = OnnxRuntimeReference(proto.SerializeToString(), config.threads)
    sig = recurrent.StepSignature(0, 0, (), (entry.output_name,))
    warmup = 1 if config.warmup_s > 0 else 0
    models = (
        {
            n: convert(proto, input_shapes={entry.input_name: (n, 1, seqs[0].shape[1])}).model
            for n in {len(s) for s in seqs}
        }
        if devices
        else {}
    )

    def run_reference() -> recurrent.SequenceRun:
        return recurrent.run_whole(lambda x: (reference.run([x]), None), seqs, warmup)

    def run_driver(open_session) -> recurrent.SequenceRun:
        sessions: dict[int, Any] = {}

        def execute(x):
            if len(x) not in sessions:
                sessions[len(x)] = open_session(models[len(x)])
            return sessions[len(x)].run([x])

        try:
            return recurrent.run_whole(execute, seqs, warmup)
        finally:
            for session in sessions.values():
                session.close()

    what = f"{len(seqs)} whole sequences (prepared per length)"
    collected = _collect_runs(source, devices, config, progress, what, run_reference, run_driver)
    scored = Scored(source.name, step_name, sig, golden, whole=True)
    rows = scored.rows(collected, reference.backend, config, driver_backends(config, devices))
    return [r.to_json() for r in rows]


def _warmup_rule(config: BenchmarkConfig):
    """The step-by-step warm-up's early-stop rule (mlts.bench.stopping), or None with fixed durations."""
    rules = config.stop_rules
    return None if rules is None else rules.warmup
