"""`mlts benchmark`: MLTS's scoring mode; writes results.json, results.csv and report.html."""

from __future__ import annotations

import datetime as _dt
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mlts.commands._common import (
    DEFAULT_DRIVERS_HELP,
    MAX_BENCHMARK_SECONDS,
    SEED,
    BadInput,
    capabilities_option,
    capabilities_options,
    distribution,
    distribution_options,
    driver_plugin_option,
    driver_socket_option,
    input_settings,
    qos_options,
    seconds,
    trace_option,
    tracing,
    user_model_options,
)
from mlts.commands._run_end import report_file_options

if TYPE_CHECKING:
    from mlts.runtime.qos_settings import QosSettings


def default_out_dir() -> Path:
    """results/<local time>, a new folder for every run."""
    return Path("results") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


OUTPUT_FILES = ("results.json", "results.csv", "report.html")


def check_out_dir(out: Path, force: bool) -> None:
    """A usable output folder, checked before any work: not a file, writable, and not holding
    earlier results unless --force."""
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: exists and is not a directory")
    existing = [name for name in OUTPUT_FILES if (out / name).exists()]
    if existing and not force:
        raise BadInput(
            f"--out {out} already holds {', '.join(existing)}; use --force to overwrite or choose a new folder"
        )
    # The folder itself, or the nearest existing folder it would be made in, must take a file.
    # Permission bits do not tell (root, read-only mounts, ACLs): try one, and create nothing yet.
    probe = out.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(20, f"{probe} is not a directory")
        with tempfile.TemporaryFile(dir=probe, prefix=".mlts-write-check-"):
            pass
    except OSError as e:
        raise BadInput(f"--out {out}: cannot write there: {e.strerror or e}") from None


@click.command("benchmark")
@click.option(
    "--models",
    "models_regex",
    default=None,
    metavar="REGEX",
    help="Zoo models whose name matches (default: all, unless --model is given).",
)
@click.option(
    "--model",
    "model_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE.onnx|FILE.tflite|FILE.nnm",
    help="Your own ONNX or TFLite model, or an NN graph file from mlts convert (repeatable); a .tflite model "
    "is converted as TFLite's NNAPI delegate would and compared with LiteRT; an .nnm file is timed, not "
    "scored (no reference reads it); real:NAME names a trained model of mlts[real-models].",
)
@click.option(
    "--reference",
    type=click.Choice(["auto", "litert", "onnxruntime", "both"]),
    default="auto",
    show_default=True,
    help="The CPU reference: auto is the model's own framework (LiteRT for .tflite, onnxruntime for ONNX "
    "and zoo models); both runs LiteRT and onnxruntime and needs each model as .tflite and .onnx of one "
    "name (--model net.tflite --model net.onnx).",
)
@user_model_options
@click.option(
    "--drivers",
    "drivers_regex",
    default=None,
    metavar="REGEX",
    help=f"Drivers whose name matches (default: {DEFAULT_DRIVERS_HELP}).",
)
@driver_plugin_option
@capabilities_option
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(),
    help="Folder for results.json, results.csv and report.html (default: results/<date-time>, new).",
)
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Threads for the driver's math (BLAS, in its own process) and onnxruntime's intra-op pool; both get the same.",
)
@click.option(
    "--warmup",
    "warmup_s",
    type=seconds(0, MAX_BENCHMARK_SECONDS),
    default=None,
    metavar="SECONDS",
    help="Warm-up per model × backend, discarded (default 2; 0.3 with --quick, ended earlier once stable).",
)
@click.option(
    "--duration",
    "duration_s",
    type=seconds(0, MAX_BENCHMARK_SECONDS),
    default=None,
    metavar="SECONDS",
    help="Minimum timed run per model × backend (default 10); with --early-stop an upper bound (1 with --quick).",
)
@click.option(
    "--iterations",
    "min_iterations",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10**7),
    help="Minimum timed calls per model × backend (the run lasts until both minimums are met).",
)
@click.option(
    "-q",
    "--quick",
    is_flag=True,
    help="MLTS's short run for CI: at most 0.3 s warm-up and 1 s timed (at least --iterations calls), each "
    "compilation timing at most 0.3 s, each ended early once its median is precise (--early-stop), 10 of "
    "the 50 LSTM sequences; every model, backend and accuracy verdict as in a full run (-q as in the "
    "script).",
)
@click.option(
    "--early-stop/--fixed-durations",
    "early_stop",
    default=None,
    help="Early stop (default with --quick): end each timed run once the median's 95% interval is within "
    "±2% of it (after --iterations calls and 0.1 s), each warm-up once the last 10 calls' median is within "
    "5% of the 10 before, each compilation timing once its interval is within ±5% (after 6 calls); "
    "--duration, --warmup and --compile-seconds are then upper bounds. --fixed-durations (default "
    "without --quick) runs them in full.",
)
@click.option(
    "--images",
    default=None,
    type=click.IntRange(1, 100_000),
    help="Images in the test set (default 100 of the 2000 procedural images; with --dataset, all of the folder's).",
)
@click.option(
    "--dataset",
    "dataset_dir",
    default=None,
    type=click.Path(),
    metavar="DIR",
    help="Your image folder in MLTS format (images, ground_truth_labels.txt, labels.txt); needs Pillow. "
    "'real' names the bundled set of three photographs with ImageNet labels.",
)
@click.option(
    "--sequences",
    default=None,
    type=click.IntRange(1, 50),
    help="LSTM models (asr_float, tts_float and their whole-sequence forms): how many of the 50 dataset "
    "sequences to run (default 50; 10 with --quick).",
)
@click.option(
    "--compilation/--no-compilation",
    default=True,
    show_default=True,
    help="Time compilation without cache, saving to cache and preparing from cache on drivers.",
)
@click.option(
    "--compile-iterations",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10**6),
    help="Compilation timings: at most this many per measurement.",
)
@click.option(
    "--compile-seconds",
    type=seconds(0, MAX_BENCHMARK_SECONDS),
    default=None,
    metavar="SECONDS",
    help="Compilation timings: at most this long per measurement (default 10; 0.3 with --quick).",
)
@click.option(
    "--seed", default=0, show_default=True, type=SEED, help="Seed for synthetic inputs and backend order."
)
@click.option(
    "--in-process",
    is_flag=True,
    help="Load drivers in this process instead of their own (debugging, IPC overhead).",
)
@click.option(
    "-r",
    "--include-nnapi-reference",
    "nnapi_reference",
    flag_value="include",
    default="off",
    help="Also run the device the runtime chooses itself (no driver named), as backend nnapi-reference.",
)
@click.option(
    "--nnapi-reference-only",
    "nnapi_reference",
    flag_value="only",
    help="Run only the runtime's own device choice (and onnxruntime), not each driver.",
)
@click.option(
    "--execution",
    type=click.Choice(["sync", "async", "fenced", "burst", "all"]),
    default="sync",
    show_default=True,
    help="Execution path on drivers: synchronous, asynchronous (completion callback), fenced "
    "(sync fence), burst (shared-memory message queues), or all four (one row each, labelled "
    "driver:NAME/PATH).",
)
@click.option(
    "--burst-polling-us",
    type=click.IntRange(0, 10_000),
    default=None,
    metavar="US",
    help=(
        "Burst path: microseconds each side polls before it blocks (default 50; 0 is low-power mode); "
        "the client's window also stretches over executions shorter than 1 ms (MLTS_POLLING_STRETCH_US)."
    ),
)
@click.option(
    "--state-in-driver",
    is_flag=True,
    help="LSTM models (asr_float, tts_float): also run each driver with the recurrent state kept in "
    "driver buffers (memory domains) between steps; one more row each (driver:NAME+state-in-driver) "
    "with the per-step latency saved.",
)
@click.option(
    "--profile",
    is_flag=True,
    help="After each timed run, a short profiled pass: each operation's time inside the driver and "
    "onnxruntime's own per-node times; results.json and the report show the top operations, the time "
    "by operation type and the two side by side per layer (docs/profiling.md). Timed figures are "
    "unaffected.",
)
@driver_socket_option
@trace_option
@click.option("--json", "as_json", is_flag=True, help="Print the results document to stdout (no table).")
@click.option("--quiet", is_flag=True, help="No progress and no table; errors and the exit status only.")
@report_file_options
@qos_options
@distribution_options
@click.pass_context
def benchmark(
    ctx: click.Context,
    models_regex: str | None,
    model_files: tuple[str, ...],
    reference: str,
    input_shapes: dict,
    input_values: dict,
    inputs_dir: str | None,
    drivers_regex: str | None,
    plugin_files: tuple[str, ...],
    capabilities_files: tuple[str, ...],
    out_dir: str | None,
    force: bool,
    threads: int,
    warmup_s: float | None,
    duration_s: float | None,
    min_iterations: int,
    quick: bool,
    early_stop: bool | None,
    images: int | None,
    dataset_dir: str | None,
    sequences: int | None,
    compilation: bool,
    compile_iterations: int,
    compile_seconds: float | None,
    seed: int,
    in_process: bool,
    nnapi_reference: str,
    execution: str,
    burst_polling_us: int | None,
    state_in_driver: bool,
    profile: bool,
    driver_sockets: tuple[str, ...],
    trace_file: str | None,
    as_json: bool,
    quiet: bool,
    summary_file: str | None,
    junit_file: str | None,
    qos: QosSettings,
    lab_file: str | None,
    cluster: str | None,
) -> None:
    """Run each model on each matching driver and on a CPU reference (MLTS's scoring mode).

    The reference is onnxruntime's CPU provider for ONNX and zoo models and
    TFLite's own kernels (LiteRT) for .tflite models (--reference).

    Per model × backend, in a random order per model: on drivers, the
    compilation timings (without cache, save to cache, prepare from cache,
    cache size); a time-based warm-up, discarded; a timed run lasting at
    least --duration seconds and --iterations calls (latency = wall clock
    around each execution call); then one pass over every test image for
    accuracy: top-1..top-5 against golden labels (a float64 reference run,
    or your --dataset's ground truth), errors against the golden outputs and
    against the reference. A driver whose top-1 is more than 0.05 below the
    reference's fails MLTS's validation rule. The LSTM models asr_float and
    tts_float run their dataset sequences step by step instead, scored by
    MLTS's PhoneErrorRate / MelCepLogF0.

    Your own models (--model): inputs fit each input (images, speech-like
    signals, zero recurrent state, token ids, or your --inputs files);
    symbolic dimensions beyond the batch need --input-shape, configuration
    inputs can be fixed with --input-value. A classifier is judged by top-1
    and its errors; dense maps, boxes, embeddings and regressions by their
    errors against the float64 reference relative to onnxruntime's.

    Writes OUT/results.json (after every model), OUT/results.csv and
    OUT/report.html, and --summary / --junit when given. Ctrl-C or SIGTERM
    stops the run and writes them all from what finished, the backends of
    the model in progress included, marked incomplete (planned and done).
    Every run records the machine's load (load average, CPU steal) before,
    during and after, and says whether it was noisy. Ends with the verdict:
    verdicts passed, the driver ÷ onnxruntime geometric mean with its 95%
    interval, failures, noise. Exits with status 1 when any driver failed to
    prepare or run a model, or when a run broke an accuracy limit (130, or
    128 + the signal, when interrupted).

    --lab FILE runs every model on every endpoint of a lab (the report shows
    the devices side by side); --cluster spreads the model x driver pairs over
    a Dask cluster, each measured on a quiet worker (docs/cluster.md).
    """
    from mlts.bench.run_record import RunRecord
    from mlts.bench.runner import BenchmarkConfig, run_benchmark, run_lengths
    from mlts.bench.sources import select_models
    from mlts.commands._progress import make_progress
    from mlts.commands._run_end import PlannedProgress, check_file_targets
    from mlts.crash.supervise import Terminated, interrupt_on_termination
    from mlts.report.results import write_json_atomic
    from mlts.runtime.discovery import discover, select
    from mlts.runtime.execution import EXECUTION_MODES, ExecutionMode, set_burst_polling

    set_burst_polling(burst_polling_us)

    lab, cluster = distribution(lab_file, cluster)
    if lab is not None and (drivers_regex is not None or driver_sockets):
        raise BadInput("--lab names the drivers to benchmark: leave out --drivers and --driver-socket")
    if (lab is not None or cluster is not None) and (in_process or nnapi_reference != "off"):
        raise BadInput(
            "--lab and --cluster run drivers one at a time in their own services: leave out "
            "--in-process, -r and --nnapi-reference-only"
        )
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    check_out_dir(out, force)
    check_file_targets(summary=summary_file, junit=junit_file)
    if dataset_dir is not None:
        from mlts.datasets.real import dataset_folder

        dataset_dir = dataset_folder(dataset_dir)
    if dataset_dir is not None and not Path(dataset_dir).is_dir():
        raise BadInput(f"--dataset {dataset_dir}: no such directory")
    if dataset_dir is not None:
        dataset_dir = str(Path(dataset_dir).resolve())  # a cluster's workers need the whole path
    settings = input_settings(input_shapes, input_values, inputs_dir)
    sources = select_models(models_regex, model_files, settings)
    specs = select(discover(plugin_files, driver_sockets), drivers_regex) if lab is None else []
    config = BenchmarkConfig(
        threads=threads,
        min_iterations=min_iterations,
        quick=quick,
        images=images,
        dataset_dir=dataset_dir,
        seed=seed,
        in_process=in_process,
        plugin_files=tuple(plugin_files),
        compilation=compilation,
        compile_max_iterations=compile_iterations,
        nnapi_reference=nnapi_reference,
        driver_options=capabilities_options(capabilities_files),
        executions=EXECUTION_MODES if execution == "all" else (ExecutionMode(execution),),
        qos=qos,
        state_in_driver=state_in_driver,
        profile=profile,
        reference=reference,
        **run_lengths(
            quick,
            warmup_s=warmup_s,
            duration_s=duration_s,
            compile_seconds=compile_seconds,
            sequences=sequences,
            early_stop=early_stop,
        ),
    )
    verbose = bool((ctx.find_root().obj or {}).get("verbose"))
    progress = PlannedProgress(make_progress(quiet or as_json, verbose))
    path = out / "results.json"
    record = RunRecord(own_load=threads + 1).start()
    latest: list[dict] = []

    def save(partial: dict) -> None:
        latest[:] = [partial]
        _stamp(partial)
        record.annotate(partial, progress.planned_rows(partial))
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(partial, path)

    def _stamp(doc: dict) -> None:
        from mlts.cluster.endpoints import stamp_benchmark

        stamp_benchmark(doc, {s.name: s.socket for s in specs}, in_process=config.in_process)

    try:
        with interrupt_on_termination(), tracing(trace_file, quiet or as_json):
            if lab is not None or cluster is not None:
                doc = _distributed(
                    sources, specs, config, lab, cluster, burst_polling_us, quiet or as_json, save, settings
                )
            else:
                doc = run_benchmark(sources, specs, config, progress, checkpoint=save)
    except KeyboardInterrupt as e:
        if not latest:
            raise  # interrupted before the first model began: nothing to keep
        partial = latest[0]
        how = str(e) if isinstance(e, Terminated) else "SIGINT (Ctrl-C)"
        written = _finish(partial, out, record, progress, summary_file, junit_file, interrupted=how)
        if not (quiet or as_json):
            _echo_end(partial, path, written)
        kept = len(partial["results"])
        click.echo(
            f"mlts benchmark: interrupted by {how}; {kept} of {progress.planned_rows(partial)} runs "
            f"finished and kept in {path}",
            err=True,
        )
        raise SystemExit(128 + e.signum if isinstance(e, Terminated) else 130) from None
    _stamp(doc)
    written = _finish(doc, out, record, progress, summary_file, junit_file)
    if as_json:
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    elif not quiet:
        _echo_end(doc, path, written)
    failed = [r for r in doc["results"] if r.get("status") != "ok"]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(doc['results'])} runs failed; see {path}")
    invalid = [r for r in doc["results"] if r.get("validation_errors")]
    if invalid:
        from mlts.records.benchmark import violation_message

        row = invalid[0]
        first = f"{row['model']} on {row['backend']}: {violation_message(row['validation_errors'][0])}"
        raise click.ClickException(
            f"{len(invalid)} of {len(doc['results'])} runs broke an accuracy limit ({first}); see {path}"
        )


def _finish(doc, out: Path, record, progress, summary_file, junit_file, interrupted=None) -> list:
    """The final document (load, noise, summary, completion) and every file made from it."""
    from mlts.commands._run_end import write_report_files
    from mlts.report.results import write_json_atomic

    record.annotate(doc, progress.planned_rows(doc), finished=True, interrupted=interrupted)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(doc, out / "results.json")
    return [*write_companions(doc, out), *write_report_files(doc, summary_file, junit_file)]


def _echo_end(doc: dict, path: Path, written: list) -> None:
    """The table, its legend, the files written and the verdict."""
    from mlts.commands._run_end import echo_verdict
    from mlts.records import ResultsDocument
    from mlts.report.results import format_table
    from mlts.report.run_verdict import legend_lines

    for line in format_table(doc["results"]):
        click.echo(line)
    for line in legend_lines(ResultsDocument.from_json(doc).rows):
        click.echo(line)
    click.echo(f"results: {path}")
    for extra in written:
        click.echo(f"         {extra}")
    echo_verdict(doc)


def _distributed(sources, specs, config, lab, cluster, burst_polling_us, quiet: bool, save, settings) -> dict:
    """Every model on every lab endpoint (or chosen driver), in turn or spread over --cluster."""
    from mlts.cluster import run as distributed
    from mlts.cluster.targets import lab_targets, spec_targets

    targets = lab_targets(lab, config.plugin_files) if lab is not None else spec_targets(specs)
    return distributed.benchmark(
        sources=sources,
        targets=targets,
        config=config,
        lab=lab,
        cluster=cluster,
        burst_polling_us=burst_polling_us,
        say=lambda line: None if quiet else click.echo(f"  {line}", err=True),
        quiet=quiet,
        checkpoint=save,
        settings=settings,
    )


def write_companions(doc: dict, out: Path) -> list[Path]:
    """results.csv and report.html beside results.json; returns their paths."""
    from mlts.report.csv_export import write_csv
    from mlts.report.html import write_report

    csv_path, html_path = out / "results.csv", out / "report.html"
    write_csv(doc, csv_path)
    write_report(doc, html_path)
    return [csv_path, html_path]
