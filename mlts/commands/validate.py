"""`mlts validate`: conformance suites (VTS/CTS-style) for one driver; results.json, report.html, JUnit XML."""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

import click

from mlts.commands._common import (
    SEED,
    BadInput,
    distribution,
    distribution_options,
    driver_plugin_option,
    input_settings,
    network_options,
    seconds,
    trace_option,
    tracing,
    user_model_options,
)

#: What the options accept; --help shows the ranges.
MAX_FUZZ_SECONDS = 7 * 86_400.0
MAX_FUZZ_CASES = 10**9


class CaseProgress:
    """A live one-line counter on a terminal; plain lines (suite starts, failing cases, totals) otherwise."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.verbose = verbose
        self.suite = ""
        self.counts: dict[str, int] = {}
        self.start = time.monotonic()

    def _line(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def on_suite(self, name: str) -> None:
        self.end_suite()
        self.suite = name
        self.counts = {}
        self.start = time.monotonic()
        self._line(f"mlts validate: suite {name}")

    def on_case(self, case) -> None:
        self.counts[case.outcome] = self.counts.get(case.outcome, 0) + 1
        if case.failed:
            self._line(f"  {case.outcome.upper()}: {case.name}: {case.reason[:300]}")
        elif self.verbose:
            self._line(f"  {case.outcome}: {case.name}")
        if self.live:
            done = sum(self.counts.values())
            bad = sum(self.counts.get(o, 0) for o in ("fail", "error", "hang"))
            width = 100
            text = f"  {self.suite}: {done} cases, {bad} failing, {time.monotonic() - self.start:.0f} s — {case.name}"
            self.stream.write("\r\x1b[K" + text[:width])
            self.stream.flush()

    def end_suite(self) -> None:
        if not self.suite:
            return
        parts = ", ".join(f"{n} {o}" for o, n in sorted(self.counts.items())) or "no cases"
        self._line(f"  {self.suite}: {parts} ({time.monotonic() - self.start:.1f} s)")
        self.suite = ""


def _suites(values: tuple[str, ...], models: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The suites named (all: the default ones), else the default ones this installation has; with
    --model and no --suite, the model suite alone."""
    from mlts.validate.core import DEFAULT_SUITES, SUITES

    if models and not values:
        return ("model",)

    names: list[str] = []
    for value in values:
        for name in (v.strip() for v in value.split(",")):
            if not name:
                continue
            if name == "all":
                names += [s for s in DEFAULT_SUITES if s not in names]
                continue
            if name not in SUITES:
                raise BadInput(f"--suite {name!r}: unknown suite; known suites: {', '.join(SUITES)}, all")
            if name not in names:
                names.append(name)
    if names:
        return tuple(names)
    # The default selection runs the suites this installation has; a named suite must exist.
    present = tuple(s for s in DEFAULT_SUITES if importlib.util.find_spec(SUITES[s]) is not None)
    for s in DEFAULT_SUITES:
        if s not in present:
            click.echo(f"mlts validate: suite {s} is not installed; skipped", err=True)
    return present


def _pick_driver(driver: str | None, plugin_files: tuple[str, ...], sockets: tuple[str, ...]):
    """The DriverSpec to validate: named, else the only one a plugin file or socket brings."""
    from mlts.runtime.discovery import DiscoveryError, discover, plugin_specs, socket_spec

    try:
        specs = discover(plugin_files, sockets)
        if driver is None:
            offered = [s.name for p in plugin_files for s in plugin_specs(p)]
            offered += [socket_spec(p).name for p in sockets]
            if len(offered) != 1:
                raise BadInput(
                    "name the driver to validate with --driver NAME"
                    + (
                        f" (offered: {', '.join(offered)})"
                        if offered
                        else f"; available: {', '.join(sorted(specs))}"
                    )
                )
            driver = offered[0]
    except DiscoveryError as e:
        raise BadInput(str(e)) from None
    if driver not in specs:
        raise BadInput(
            f"--driver {driver!r}: unknown driver; available: {', '.join(sorted(specs)) or 'none'}"
        )
    return specs[driver]


def _options(items: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{item!r} must look like KEY=VALUE", param_hint="--option")
        out[key] = value
    return out


@click.command("validate")
@click.option(
    "--driver", "driver", default=None, metavar="NAME", help="The driver to validate (see `mlts devices`)."
)
@driver_plugin_option
@click.option(
    "--driver-socket",
    "driver_sockets",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="PATH|tcp://HOST:PORT",
    help="Validate the driver served at PATH, or at tcp://HOST:PORT on another machine (`mlts driver serve "
    "NAME --no-prevalidate` lets the validation suite reach the driver's own checks).",
)
@network_options
@click.option(
    "--option",
    "driver_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option for the driver's factory (repeatable), e.g. skip_validation=1 for sample-faulty.",
)
@click.option(
    "--suite",
    "suites",
    multiple=True,
    metavar="NAME[,NAME]",
    help="validation, operations, behaviour, fuzz, model or all (repeatable; default: all but model; with "
    "--model: model).",
)
@click.option(
    "--model",
    "model_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE.onnx|FILE.nnm",
    help="Your model for the model suite (repeatable): supported operations, prepare, and every execution "
    "path's outputs against onnxruntime and the float64 reference, as the benchmark's verdict judges them.",
)
@user_model_options(files=False)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Folder for results.json, report.html and reproducers/ (default: results/validate-<date-time>).",
)
@click.option(
    "--junit", "junit_file", default=None, type=click.Path(dir_okay=False), help="Also write JUnit XML here."
)
@click.option(
    "--replay",
    "replay_file",
    default=None,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Run one saved reproducer (.json sidecar, .nnm, .frame or .ring) again instead of the suites.",
)
@click.option(
    "--fuzz-seconds",
    type=seconds(0, MAX_FUZZ_SECONDS, lo_open=True),
    default=None,
    metavar="S",
    help="How long the fuzz suite runs.",
)
@click.option(
    "--fuzz-cases",
    type=click.IntRange(1, MAX_FUZZ_CASES),
    default=None,
    metavar="N",
    help="Inputs the fuzz suite tries.",
)
@click.option(
    "--quick/--full",
    "quick",
    default=True,
    show_default=True,
    help="CI-sized run (a minute or two), or the long run (every operand type, every operand, more cases).",
)
@click.option("--filter", "case_filter", default=None, metavar="REGEX", help="Only cases whose name matches.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of generated inputs and fuzzing.")
@click.option(
    "--call-timeout",
    type=seconds(0.1, 3600),
    default=20.0,
    show_default=True,
    metavar="S",
    help="A driver call taking longer counts as a hang: the case is HANG and the driver is restarted.",
)
@click.option(
    "--threads", default=1, show_default=True, type=click.IntRange(1, 256), help="BLAS threads of the driver."
)
@distribution_options
@trace_option
@click.pass_context
def validate_cmd(
    ctx: click.Context,
    driver: str | None,
    plugin_files: tuple[str, ...],
    driver_sockets: tuple[str, ...],
    driver_options: tuple[str, ...],
    suites: tuple[str, ...],
    model_files: tuple[str, ...],
    input_shapes: dict,
    input_values: dict,
    out_dir: str | None,
    junit_file: str | None,
    replay_file: str | None,
    fuzz_seconds: float | None,
    fuzz_cases: int | None,
    quick: bool,
    case_filter: str | None,
    seed: int,
    call_timeout: float,
    threads: int,
    lab_file: str | None,
    cluster: str | None,
    trace_file: str | None,
) -> None:
    """Check that a driver obeys the NN HAL: the VTS/CTS of mlts (docs/validate.md).

    Suites: validation (invalid models and requests must get INVALID_ARGUMENT
    from the driver itself), operations (every claimed operation × type against
    float64 references, on every execution path), behaviour (stable
    capabilities, timing, deadlines, priorities, cache corruption, extensions,
    cross-client isolation) and fuzz; model (with --model: your models on
    every path against onnxruntime and the float64 reference). Every failing case saves a reproducer
    that --replay runs again. Exit status 1 when any case fails, errs or hangs.

    --lab FILE runs the suites on every endpoint of a lab (cases name their
    device); --cluster spreads suites and case groups over a Dask cluster's
    workers (docs/cluster.md).
    """
    import re

    from mlts.validate.core import SuiteOptions, Target

    verbose = bool((ctx.obj or {}).get("verbose"))
    if case_filter is not None:
        try:
            re.compile(case_filter)
        except re.error as e:
            raise BadInput(f"--filter {case_filter!r}: bad regex: {e}") from None
    lab, cluster = distribution(lab_file, cluster)
    if (lab is not None or cluster is not None) and replay_file is not None:
        raise BadInput("--replay runs one reproducer on one driver: leave out --lab and --cluster")
    if lab is not None and (driver is not None or driver_sockets):
        raise BadInput("--lab names the drivers to validate: leave out --driver and --driver-socket")
    spec = _pick_driver(driver, plugin_files, driver_sockets) if lab is None else None
    chosen = _suites(suites, model_files) if replay_file is None else ()
    if "model" in chosen and not model_files:
        raise BadInput("--suite model: name the models to validate with --model FILE")
    if model_files:
        from mlts.bench.user_model import resolve_all
        from mlts.convert.formats import is_tflite_source

        for f in model_files:
            if not Path(f).is_file():
                raise BadInput(f"--model {f}: no such file")
        # Bad files, names, shapes and values are reported now, before the driver starts (a TFLite
        # model's inputs are the file's: the options do not apply to it).
        resolved = [f for f in model_files if not is_tflite_source(f)]
        for user, _ in resolve_all(resolved, input_settings(input_shapes, input_values, files=False)):
            if user.unreadable:
                raise BadInput(user.unreadable)
    if replay_file is not None and out_dir is None:
        # A replay writes no results; the driver's logs go to a folder of their own.
        out_dir = tempfile.mkdtemp(prefix="mlts-replay-")
    out = (
        Path(out_dir) if out_dir else Path("results") / _dt.datetime.now().strftime("validate-%Y%m%d-%H%M%S")
    )
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out {out}: cannot create it: {e.strerror or e}") from None
    import numpy as np

    options = SuiteOptions(
        quick=quick,
        fuzz_seconds=fuzz_seconds,
        fuzz_cases=fuzz_cases,
        seed=seed,
        filter=case_filter,
        call_timeout=call_timeout,
        models=tuple(model_files),
        input_shapes={k: list(v) for k, v in input_shapes.items()},
        input_values={k: np.asarray(v).tolist() for k, v in input_values.items()},
    )
    if lab is not None or cluster is not None:
        _run_distributed(
            ctx, spec, lab, cluster, chosen, options, out, junit_file, threads, plugin_files, driver_options
        )
        return
    assert spec is not None  # only a lab run goes without one
    from mlts.bench.machine_load import LoadMonitor

    monitor = LoadMonitor().start()  # the machine's load before, during and after (environment.load)
    target = Target(
        spec,
        out_dir=str(out / "reproducers"),
        call_timeout=call_timeout,
        options=_options(driver_options),
        threads=threads,
        log_dir=str(out / "logs"),
    )
    with tracing(trace_file), target:
        _check_starts(target)
        if replay_file is not None:
            _replay(target, replay_file)
            return
        progress = CaseProgress(verbose=verbose)
        from mlts.validate.runner import run_suites

        section = run_suites(target, chosen, options, progress.on_case, progress.on_suite)
        progress.end_suite()
    from dataclasses import replace

    from mlts.cluster.endpoints import endpoint_of

    section = replace(section, endpoint=endpoint_of(spec.name, spec.socket))
    _write_outputs(section, out, junit_file, threads, load=monitor.stop())
    _finish(ctx, section, spec.name, out)


def _finish(ctx: click.Context, section, name: str, out: Path) -> None:
    for error in section.errors:
        click.echo(f"mlts validate: suite {error}", err=True)
    verdict = "FAILED" if section.failed else "passed"
    bad = sum(c.failed for c in section.cases)
    click.echo(
        f"{name}: {verdict}: {len(section.cases)} cases, {bad} failing, {len(section.errors)} suites could not run, "
        f"{section.seconds:.1f} s; results in {out}"
    )
    if section.restarts:
        click.echo(f"driver restarts: {section.restarts}")
        for reason in section.restart_reasons:
            click.echo(f"  {reason}")
    if section.failed:
        ctx.exit(1)


def _run_distributed(
    ctx, spec, lab, cluster, suites, options, out: Path, junit_file, threads, plugin_files, driver_options
):
    """The suites on every lab endpoint (or the one driver), in turn or spread over --cluster (mlts.cluster)."""
    from mlts.cluster import run as distributed
    from mlts.cluster.targets import lab_targets, spec_targets

    targets = (
        lab_targets(lab, plugin_files)
        if lab is not None
        else spec_targets([spec], {spec.name: _options(driver_options)})
    )

    def failing(case: dict) -> None:
        where = f"[{case['device']}] " if case.get("device") else ""
        click.echo(f"  {case['outcome'].upper()}: {where}{case['name']}: {case['reason'][:300]}", err=True)

    section, sections = distributed.validate(
        targets=targets,
        suites=suites,
        options=options,
        threads=threads,
        plugin_files=plugin_files,
        lab=lab,
        cluster=cluster,
        out_dir=str(out),
        on_failing=failing,
    )
    _write_outputs(section, out, junit_file, threads, sections)
    name = f"lab {', '.join(lab.names())}" if lab is not None else spec.name
    _finish(ctx, section, name, out)


def _check_starts(target) -> None:
    """A driver that cannot start or answer is a one-line error before any suite runs."""
    from mlts.hal.errors import HalError

    try:
        target.device().ping()
    except HalError as e:
        first = e.message.splitlines()[0] if e.message else e.status.name
        raise click.ClickException(f"driver {target.name!r} cannot be validated: {first}") from None


def _replay(target, path: str) -> None:
    from mlts.validate.core import ValidateError
    from mlts.validate.replay import replay

    if not os.path.exists(path):
        raise BadInput(f"--replay {path}: no such file")
    try:
        result = replay(target, path)
    except ValidateError as e:
        raise BadInput(f"--replay {e}") from None
    click.echo(f"{result.outcome.upper()}: {result.name}" + (f": {result.reason}" if result.reason else ""))
    if result.failed:
        raise click.exceptions.Exit(1)


def _write_outputs(
    section,
    out: Path,
    junit_file: str | None,
    threads: int,
    sections: dict | None = None,
    load: dict | None = None,
) -> None:
    """results.json (the typed results document, kind "validate"), report.html and the JUnit XML.

    `sections`: extra sections of a distributed run (lab, cluster); `load`: the machine's load around
    the run (`environment.load`).
    """
    from mlts.hal.atomic import write_atomic
    from mlts.report.html import write_report
    from mlts.validate.junit import write_junit
    from mlts.validate.results import results_document

    document = results_document(section, threads)
    for name, value in (sections or {}).items():
        document = document.with_section(name, value)
    doc = document.to_json()
    if load is not None:
        doc["environment"]["load"] = load
    write_atomic(out / "results.json", (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode())
    write_report(doc, out / "report.html")
    if junit_file is not None:
        try:
            write_junit(section, junit_file)
        except OSError as e:
            raise BadInput(f"--junit {junit_file}: cannot write it: {e.strerror or e}") from None
