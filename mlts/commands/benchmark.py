"""`mlts benchmark`: models on drivers and on the onnxruntime CPU reference; writes results.json."""

from __future__ import annotations

from pathlib import Path

import click

from mlts.commands._common import driver_plugin_option, progress


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
    metavar="FILE.onnx",
    help="Your own ONNX model (repeatable).",
)
@click.option(
    "--drivers",
    "drivers_regex",
    default=".*",
    show_default=True,
    metavar="REGEX",
    help="Drivers whose name matches.",
)
@driver_plugin_option
@click.option(
    "--out",
    "out_dir",
    default="results",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for results.json.",
)
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Threads for the driver's math (BLAS, in its own process) and onnxruntime's intra-op pool; both get the same.",
)
@click.option(
    "--warmup",
    default=5,
    show_default=True,
    type=click.IntRange(0, 10**6),
    help="Warm-up iterations per backend, not timed.",
)
@click.option(
    "--iterations",
    default=30,
    show_default=True,
    type=click.IntRange(1, 10**7),
    help="Timed iterations per backend.",
)
@click.option(
    "--inputs",
    "n_inputs",
    default=8,
    show_default=True,
    type=click.IntRange(1, 10**5),
    help="Distinct inputs cycled through; accuracy is computed over all of them.",
)
@click.option(
    "--sequences",
    default=50,
    show_default=True,
    type=click.IntRange(1, 50),
    help="LSTM models (asr_float, tts_float): how many of the 50 dataset sequences to run step by step.",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed for input generation and backend order."
)
@click.option(
    "--in-process",
    is_flag=True,
    help="Load drivers in this process instead of their own (debugging, IPC overhead).",
)
def benchmark(
    models_regex: str | None,
    model_files: tuple[str, ...],
    drivers_regex: str,
    plugin_files: tuple[str, ...],
    out_dir: str,
    threads: int,
    warmup: int,
    iterations: int,
    n_inputs: int,
    sequences: int,
    seed: int,
    in_process: bool,
) -> None:
    """Run each model on each matching driver and on onnxruntime's CPU provider.

    Latency is the wall clock around each whole execution call, warm-up
    excluded; accuracy compares the driver's outputs with onnxruntime's on
    the same inputs (CTS fp32 tolerance). The LSTM models asr_float and
    tts_float run their dataset sequences step by step instead (state carried
    within a sequence, reset between sequences; --iterations and --inputs do
    not apply, --warmup counts steps): latency is per step and accuracy is
    MLTS's PhoneErrorRate / MelCepLogF0 against float64 golden outputs and
    against onnxruntime. Writes OUT/results.json. Exits with status 1 when
    any driver failed to prepare or run a model, or when a run broke an
    accuracy limit (both are in the results too).
    """
    from mlts.bench.runner import BenchmarkConfig, run_benchmark
    from mlts.bench.sources import select_models
    from mlts.report.results import format_table, write_json_atomic
    from mlts.runtime.discovery import discover, select

    sources = select_models(models_regex, model_files)
    specs = select(discover(plugin_files), drivers_regex)
    config = BenchmarkConfig(
        threads, warmup, iterations, n_inputs, seed, in_process, tuple(plugin_files), sequences
    )
    doc = run_benchmark(sources, specs, config, progress)
    path = Path(out_dir) / "results.json"
    write_json_atomic(doc, path)
    for line in format_table(doc["results"]):
        click.echo(line)
    click.echo(f"results: {path}")
    failed = [r for r in doc["results"] if r.get("status") != "ok"]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(doc['results'])} runs failed; see {path}")
    invalid = [r for r in doc["results"] if r.get("validation_errors")]
    if invalid:
        first = f"{invalid[0]['model']} on {invalid[0]['backend']}: {invalid[0]['validation_errors'][0]}"
        raise click.ClickException(
            f"{len(invalid)} of {len(doc['results'])} runs broke an accuracy limit ({first}); see {path}"
        )
