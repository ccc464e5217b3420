"""`mlts stress MODE|all`: MLTS's stress modes with crash and hang detection; results.json and report.html."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mlts.commands._common import (
    DEFAULT_DRIVERS_HELP,
    MAX_GRACE_SECONDS,
    MAX_STRESS_SECONDS,
    SEED,
    BadInput,
    FiniteFloatRange,
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

DEFAULT_MODELS = "^mobilenet_v1_0.25_128(_quant)?$"
#: --duration of each test: full and --quick.
FULL_DURATION_S = 3.0
QUICK_DURATION_S = 1.0
#: --quick: the random-graph modes stop after this many graphs (unless --random-count says otherwise).
QUICK_RANDOM_COUNT = 50


def _option_pairs(ctx, param, values):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{item!r} must look like KEY=VALUE")
        out[key] = value
    return out


def format_results(records: list[dict], width: int | None = None) -> list[str]:
    """One line per test: outcome (and whether it was expected), iterations, time, then the reason,
    wrapped onto further lines rather than cut."""
    from mlts.report.run_verdict import terminal_width, wrap
    from mlts.report.terminal import escape

    width = width or terminal_width()
    w = max([30, *(len(r["test"]) for r in records)])
    header = f"{'test':<{w}} {'outcome':<8} {'expected':<8} {'iters':>7} {'time s':>7}  reason"
    lines = [header, "-" * len(header)]
    reason_at = len(header) - len("reason")
    # With less than 40 columns left for it, the reason goes on its own lines below the row.
    indent = " " * (reason_at if width - reason_at >= 40 else 4)
    for r in records:
        mark = "" if r["as_expected"] else " <-- unexpected"
        row = (
            f"{escape(r['test']):<{w}} {r['outcome']:<8} {r['expected']:<8} {r['iterations']:>7} "
            f"{r['duration_s']:>7.1f}  "
        )
        reason = (r.get("reason") or "") + mark
        if not reason:
            lines.append(row.rstrip())
            continue
        wrapped = wrap(reason, indent, width)
        if len(indent) == reason_at:
            lines.append(row + wrapped[0][len(indent) :])
            lines += wrapped[1:]
        else:
            lines.append(row.rstrip())
            lines += wrapped
    return lines


@click.command("stress")
@click.argument("mode")
@click.option(
    "--drivers",
    "drivers_regex",
    default=None,
    metavar="REGEX",
    help=f"Drivers to stress, every match a target (default: {DEFAULT_DRIVERS_HELP}).",
)
@click.option(
    "--models",
    "models_regex",
    default=None,
    metavar="REGEX",
    help=f"Zoo models the model-based modes use (default: {DEFAULT_MODELS}, unless --model is given).",
)
@click.option(
    "--model",
    "model_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE.onnx|FILE.nnm",
    help="Your own model for the model-based modes (repeatable); with --models too, both are used.",
)
@user_model_options(files=False)
@driver_plugin_option
@click.option(
    "--driver-option",
    "driver_options",
    multiple=True,
    callback=_option_pairs,
    metavar="KEY=VALUE",
    help="Option for the driver's factory (repeatable), e.g. faults of sample-faulty.",
)
@click.option(
    "--duration",
    type=seconds(0, MAX_STRESS_SECONDS, lo_open=True),
    default=None,
    metavar="SECONDS",
    help=f"How long each test runs (default {FULL_DURATION_S:g}; {QUICK_DURATION_S:g} with --quick; MLTS runs "
    "minutes to hours).",
)
@click.option(
    "-q",
    "--quick",
    is_flag=True,
    help=f"A short run for CI and a developer's loop, as the benchmark's: each test runs {QUICK_DURATION_S:g} s "
    f"(unless --duration is given) and the random-graph modes stop after {QUICK_RANDOM_COUNT} graphs "
    "(unless --random-count is given); every mode, driver and check as in a full run.",
)
@click.option(
    "--threads", default=2, show_default=True, type=click.IntRange(1, 256), help="Threads per test process."
)
@click.option(
    "--processes",
    default=2,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Client processes of the multi-process modes.",
)
@click.option(
    "--execution",
    type=click.Choice(["sync", "async", "fenced", "burst"]),
    default="sync",
    show_default=True,
    help="Execution path of the inference modes (burst: shared-memory message queues).",
)
@click.option(
    "--kill-rate",
    default=0.0,
    show_default=True,
    type=FiniteFloatRange(0, 100),
    help="Multi-process modes: percentage of client processes killed at a random time.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=SEED,
    help="Seed for kill times, kill choices and random graphs.",
)
@click.option(
    "--grace",
    "grace_s",
    type=seconds(0, MAX_GRACE_SECONDS, lo_open=True),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Time past --duration before a test counts as HANG.",
)
@click.option(
    "--degradation-limit",
    default=50.0,
    show_default=True,
    type=FiniteFloatRange(-100, 100_000),
    metavar="PERCENT",
    help="performance-degradation-stress: largest allowed growth of the median latency (MLTS: 50); FAILURE "
    "only when the 95% interval of the growth, over alternating alone and loaded phases, is wholly above it.",
)
@click.option(
    "--random-ops",
    default=10,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Random-graph modes: operations per graph (MLTS: 10 and 600).",
)
@click.option(
    "--random-count",
    default=None,
    type=click.IntRange(1, 10**9),
    help="Random-graph modes: stop after this many graphs (default: until --duration).",
)
@click.option(
    "--dump-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Random-graph modes: write each failing graph here as a .nnm file.",
)
@click.option(
    "--in-process",
    is_flag=True,
    help="Load the driver inside each test process: a driver crash then ends the test as CRASH.",
)
@click.option(
    "--out", "out_dir", default=None, type=click.Path(), help="Folder for results.json and report.html."
)
@driver_socket_option
@trace_option
@click.option("--force", is_flag=True, help="Overwrite results already in --out.")
@click.option("--json", "as_json", is_flag=True, help="Print the results document to stdout (no table).")
@click.option("--quiet", is_flag=True, help="No progress and no table.")
@report_file_options
@qos_options
@distribution_options
def stress(
    mode: str,
    drivers_regex: str | None,
    models_regex: str | None,
    model_files: tuple[str, ...],
    input_shapes: dict,
    input_values: dict,
    plugin_files: tuple[str, ...],
    driver_options: dict[str, str],
    duration: float | None,
    quick: bool,
    threads: int,
    processes: int,
    execution: str,
    kill_rate: float,
    seed: int,
    grace_s: float,
    degradation_limit: float,
    random_ops: int,
    random_count: int | None,
    dump_dir: str | None,
    in_process: bool,
    out_dir: str | None,
    driver_sockets: tuple[str, ...],
    trace_file: str | None,
    force: bool,
    as_json: bool,
    quiet: bool,
    summary_file: str | None,
    junit_file: str | None,
    qos: QosSettings,
    lab_file: str | None,
    cluster: str | None,
) -> None:
    """Run stress MODE (or `all`) on every matching driver; each test in its own supervised process.

    \b
    Modes (`all` runs every one but the priority-stress ones):
      inference-stress                      execute each model in a loop
      model-loading-stress                  compile each model in a loop
      parallel-inference-stress             --threads threads execute at once
      parallel-inference-stress-in-process  the same, in this process under a watchdog
      client-early-termination-stress       kill a compiling client; the driver must serve others
      multi-process-inference-stress        --processes clients execute on one shared service
      multi-process-model-load-stress       --processes clients compile on one shared service
      memory-mapped-model-load-stress       compile from memory-mapped model files
      model-load-random-stress              compile random valid graphs (--random-ops)
      inference-random-stress               run random graphs, results checked
      performance-degradation-stress        latency alone vs while another client compiles
      priority-stress                       HIGH against LOW priority models on one service
      priority-stress-two-clients           the same, the LOW load from another client process

    priority-stress (not part of `all`: it measures latency) times model A
    (the first matching model) at HIGH alone, then against --threads threads
    running model B (the last) at LOW on one shared service, then both at
    MEDIUM; FAILURE when priorities make no difference (A's median neither
    30% below its median when both are MEDIUM, nor within 1.5x of alone with
    the work shifted 1.5x towards A: A's and B's executions per second in
    both phases). In
    priority-stress-two-clients those threads run in another process, a
    client of its own: one client's HIGH must preempt another's LOW.

    Outcomes: SUCCESS; FAILURE (the driver could not compile or run, returned a
    wrong result, or its process died: the reason says which call); HANG (no
    result within --duration plus --grace: the test process is killed); CRASH
    (the test process died; expected for killed clients). No process is left
    running afterwards. Writes OUT/results.json and OUT/report.html (after
    every mode, so Ctrl-C or SIGTERM keeps what ran, marked incomplete with
    the tests planned and done), and --summary / --junit when given. Ends
    with the verdict (tests as expected, failures with their whole reason,
    whether the machine was noisy). Exits with status 1 when any outcome
    differs from the expected one.

    --lab FILE runs the tests on every endpoint of a lab; --cluster spreads
    them over a Dask cluster's workers (docs/cluster.md).
    """
    from mlts.bench.run_record import RunRecord
    from mlts.bench.sources import select_models
    from mlts.commands._run_end import check_file_targets, echo_verdict, write_report_files
    from mlts.commands.benchmark import check_out_dir
    from mlts.crash.suite import (
        StressConfig,
        StressConfigError,
        modes_of,
        planned_tests,
        run_stress,
        user_model_spec,
    )
    from mlts.crash.supervise import Terminated
    from mlts.report.results import write_json_atomic
    from mlts.runtime.discovery import discover, select
    from mlts.runtime.execution import ExecutionMode

    if duration is None:
        duration = QUICK_DURATION_S if quick else FULL_DURATION_S
    if random_count is None and quick:
        random_count = QUICK_RANDOM_COUNT
    config = StressConfig(
        duration_s=duration,
        threads=threads,
        processes=processes,
        kill_rate=kill_rate,
        seed=seed,
        grace_s=grace_s,
        random_ops=random_ops,
        degradation_limit=degradation_limit,
        random_count=random_count,
        dump_dir=dump_dir,
        plugin_files=tuple(plugin_files),
        driver_options=driver_options,
        in_process=in_process,
        execution=ExecutionMode(execution),
        qos=qos,
    )
    try:
        modes = modes_of(mode)
        config.check()
    except StressConfigError as e:
        raise click.UsageError(str(e)) from None
    lab, cluster = distribution(lab_file, cluster)
    if lab is not None and (drivers_regex is not None or driver_sockets):
        raise BadInput("--lab names the drivers to stress: leave out --drivers and --driver-socket")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        check_out_dir(out, force)
    check_file_targets(summary=summary_file, junit=junit_file)
    chosen = select(discover(plugin_files, driver_sockets), drivers_regex) if lab is None else []
    config = replace(config, driver_sockets={s.name: s.socket for s in chosen if s.socket is not None})
    drivers = [s.name for s in chosen]
    regex = models_regex if models_regex is not None or model_files else DEFAULT_MODELS
    sources = select_models(regex, model_files, input_settings(input_shapes, input_values, files=False))
    for s in sources:
        if s.user is not None and s.user.unreadable:
            raise BadInput(s.user.unreadable)
    models = [s.name if s.path is None else str(s.path) for s in sources]  # a file by its path
    config = replace(config, user_models={str(s.path): user_model_spec(s.user) for s in sources if s.user})

    def progress(message: str) -> None:
        if not (quiet or as_json):
            click.echo(f"  {message}", err=True)

    planned = planned_tests(modes, drivers, models, config)
    record = RunRecord(own_load=config.threads + 1).start()
    latest: list[dict] = []

    def save(doc: dict) -> None:
        from mlts.cluster.endpoints import stamp_stress

        doc = stamp_stress(doc, config.driver_sockets, in_process=config.in_process)
        latest[:] = [record.annotate(doc, planned)]
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(doc, out / "results.json")

    def finish(doc: dict, interrupted: str | None = None) -> None:
        record.annotate(doc, planned, finished=True, interrupted=interrupted)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(doc, out / "results.json")
        _write_report(doc, out)
        write_report_files(doc, summary_file, junit_file)

    try:
        with tracing(trace_file, quiet or as_json):
            if lab is not None or cluster is not None:
                doc = _distributed(
                    modes,
                    chosen,
                    models,
                    config,
                    lab,
                    cluster,
                    plugin_files,
                    progress,
                    quiet or as_json,
                    save,
                )
            else:
                doc = run_stress(modes, drivers, models, config, progress, checkpoint=save)
            save(doc)
            doc = latest[0]
    except KeyboardInterrupt as e:
        if not latest:
            raise  # nothing ran yet: nothing to keep
        how = str(e) if isinstance(e, Terminated) else "SIGINT (Ctrl-C)"
        doc = latest[0]
        finish(doc, interrupted=how)
        if not (quiet or as_json):
            for line in format_results(doc["results"]):
                click.echo(line)
            echo_verdict(doc)
        kept = len(doc["results"])
        click.echo(
            f"mlts stress: interrupted by {how}; {kept} of {planned} tests finished and kept", err=True
        )
        raise SystemExit(128 + e.signum if isinstance(e, Terminated) else 130) from None
    finish(doc)
    if as_json:
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    elif not quiet:
        for line in format_results(doc["results"]):
            click.echo(line)
        if out is not None:
            click.echo(f"results: {out / 'results.json'}\n         {out / 'report.html'}")
        for path in (summary_file, junit_file):
            if path is not None:
                click.echo(f"         {path}")
        echo_verdict(doc)
    unexpected = [r for r in doc["results"] if not r["as_expected"]]
    if unexpected:
        first = unexpected[0]
        raise click.ClickException(
            f"{len(unexpected)} of {len(doc['results'])} tests ended unexpectedly "
            f"({first['test']}: {first['outcome']}, expected {first['expected']})"
        )


def _distributed(modes, chosen, models, config, lab, cluster, plugin_files, progress, quiet, save) -> dict:
    """The tests on every lab endpoint (or each chosen driver), in turn or spread over --cluster."""
    from mlts.cluster import run as distributed
    from mlts.cluster.targets import lab_targets, spec_targets

    if lab is not None:
        targets = lab_targets(lab, plugin_files)
    else:
        targets = spec_targets(chosen)  # their options are the config's --driver-option
    return distributed.stress(
        modes=modes,
        targets=targets,
        models=models,
        config=config,
        lab=lab,
        cluster=cluster,
        say=progress,
        quiet=quiet,
        checkpoint=save,
    )


def _write_report(doc: dict, out: Path | None) -> None:
    if out is None:
        return
    from mlts.report.html import write_report

    write_report(doc, out / "report.html")
