"""Distributed runs of validate, stress and benchmark: plan the units, run them, merge one document.

The commands call `validate`, `stress` or `benchmark` here when given `--lab FILE` or `--cluster`.
Each outcome is merged as it arrives and handed to the command's checkpoint, so an interrupted run
keeps what finished. The `cluster` section records the engine, the workers and every unit: where it
ran, how many attempts it took, and for timing units whether its host was quiet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from mlts.cluster import benchmark_units, stress_units, validate_units
from mlts.cluster.engine import open_executor
from mlts.cluster.lab import Lab
from mlts.cluster.progress import UnitProgress, stderr_progress
from mlts.cluster.targets import DriverTarget, lab_section
from mlts.cluster.units import Unit, UnitOutcome, write_files
from mlts.records.endpoint import ClusterSection, UnitRecord

Checkpoint = Callable[[dict[str, Any]], None]


def _run(
    executor: Any,
    units: list[Unit],
    progress: UnitProgress,
    on_outcome: Callable[[UnitOutcome], None],
) -> dict[str, UnitOutcome]:
    outcomes: dict[str, UnitOutcome] = {}

    def take(outcome: UnitOutcome) -> None:
        outcomes[outcome.unit.id] = outcome
        on_outcome(outcome)

    executor.run(units, progress, take)
    return outcomes


def cluster_record(
    executor: Any, units: Sequence[Unit], outcomes: dict[str, UnitOutcome], t0: float
) -> ClusterSection:
    """The `cluster` section: workers, units in plan order, and whether each timing unit's host was quiet."""
    records = []
    for unit in units:
        o = outcomes.get(unit.id)
        if o is None:
            continue
        quiet = None
        shared: tuple[str, ...] = ()
        if unit.timing and o.ok and o.started is not None and o.ended is not None:
            shared = tuple(
                v.unit.id
                for v in outcomes.values()
                if v.unit.id != unit.id
                and v.host == o.host
                and v.started is not None
                and v.ended is not None
                and v.started < o.ended
                and o.started < v.ended
            )
            quiet = not shared
        records.append(
            UnitRecord(
                id=unit.id,
                kind=unit.kind,
                label=unit.label,
                status="done" if o.ok else "failed",
                timing=unit.timing,
                worker=o.worker,
                host=o.host,
                attempts=o.attempts,
                seconds=round(o.seconds, 3),
                start_s=None if o.started is None else round(max(0.0, o.started - t0), 3),
                quiet=quiet,
                shared_with=shared,
                error=o.error,
            )
        )
    hosts = {o.host: o.host_info for o in outcomes.values() if o.host and o.host_info}
    return ClusterSection(
        engine=executor.engine,
        scheduler=str(executor.scheduler),
        workers=tuple(executor.workers()),
        units=tuple(records),
        timing_isolation=executor.timing_isolation(),
        seconds=round(time.time() - t0, 3),
        hosts=hosts,
    )


def _sections(lab: Lab | None, targets: list[DriverTarget], cluster: str | None, cluster_part: Any) -> dict:
    out: dict[str, Any] = {}
    if lab is not None:
        out["lab"] = lab_section(lab, targets, distributed=cluster is not None).to_json()
    if cluster is not None and cluster_part is not None:
        out["cluster"] = cluster_part.to_json()
    return out


def _prebuild(zoo_names: list[str], cluster: str | None, say: Callable[[str], None]) -> None:
    """Zoo models built here first when the units run on this machine (no two workers build one model)."""
    if not zoo_names or not (cluster is None or cluster.startswith("local:")):
        return
    from mlts.models.prebuild import build_missing

    build_missing(zoo_names, lambda message: say(f"zoo models: {message.strip()}"))


def _where(cluster: str | None) -> str:
    return "this process" if cluster is None else f"the cluster ({cluster})"


# --- validate -------------------------------------------------------------------------------------------


def validate(
    *,
    targets: list[DriverTarget],
    suites: Sequence[str],
    options: Any,
    threads: int,
    plugin_files: Sequence[str],
    lab: Lab | None,
    cluster: str | None,
    out_dir: str,
    quiet: bool = False,
    on_failing: Callable[[Any], None] = lambda case: None,
) -> tuple[Any, dict[str, Any]]:
    """The merged ValidateSection and the extra sections (lab, cluster) of a distributed validate run."""
    t0 = time.time()
    driver = ", ".join(dict.fromkeys(t.driver for t in targets))
    with open_executor(cluster) as executor:
        workers = len(executor.workers())
        units = validate_units.plan(
            targets, suites, options, workers=workers, threads=threads, plugin_files=plugin_files
        )
        progress = stderr_progress(len(units), _where(cluster), quiet)
        outcomes: dict[str, UnitOutcome] = {}

        def arrived(outcome: UnitOutcome) -> None:
            outcomes[outcome.unit.id] = outcome
            device = [outcome.unit.device] if lab is not None and outcome.unit.device else []
            write_files(outcome.files, os.path.join(out_dir, "reproducers", *device), "reproducers")
            write_files(outcome.files, os.path.join(out_dir, "logs", outcome.unit.id), "logs")
            if outcome.ok:
                for case in outcome.result["section"]["cases"]:
                    if case["outcome"] in ("fail", "error", "hang"):
                        on_failing(case)

        try:
            _run(executor, units, progress, arrived)
        except KeyboardInterrupt:
            # As a single run does: what finished is kept, the units not run are suite errors.
            pass
        section = validate_units.merge(
            units,
            outcomes,
            suites,
            options,
            driver=driver,
            seconds=time.time() - t0,
            lab=lab is not None,
            out_dir=out_dir,
        )
        part = cluster_record(executor, units, outcomes, t0) if cluster is not None else None
    return section, _sections(lab, targets, cluster, part)


# --- stress ---------------------------------------------------------------------------------------------


def stress(
    *,
    modes: list[str],
    targets: list[DriverTarget],
    models: list[str],
    config: Any,
    lab: Lab | None,
    cluster: str | None,
    say: Callable[[str], None],
    quiet: bool,
    checkpoint: Checkpoint,
    progress: UnitProgress | None = None,
) -> dict[str, Any]:
    """The stress document of a distributed run (checkpointed after every unit); `progress` replaces
    the lines on stderr."""
    from mlts.crash.suite import stress_document

    t0 = time.time()
    drivers = list(dict.fromkeys(t.driver for t in targets))
    _prebuild(list(models), cluster, say)
    with open_executor(cluster) as executor:
        units = stress_units.plan(modes, targets, models, config)
        if progress is None:
            progress = stderr_progress(len(units), _where(cluster), quiet)
        progress.total = len(units)
        outcomes: dict[str, UnitOutcome] = {}

        def document(part: Any) -> dict[str, Any]:
            doc = stress_document([], config, modes, drivers, models)
            doc["results"] = stress_units.merge_records(units, outcomes, lab is not None)
            doc.update(_sections(lab, targets, cluster, part))
            return doc

        def arrived(outcome: UnitOutcome) -> None:
            outcomes[outcome.unit.id] = outcome
            if config.dump_dir is not None:
                write_files(outcome.files, config.dump_dir, "dump")
            checkpoint(document(cluster_record(executor, units, outcomes, t0) if cluster else None))

        try:
            _run(executor, units, progress, arrived)
        except KeyboardInterrupt:
            checkpoint(document(cluster_record(executor, units, outcomes, t0) if cluster else None))
            raise
        return document(cluster_record(executor, units, outcomes, t0) if cluster else None)


# --- benchmark ------------------------------------------------------------------------------------------


def benchmark(
    *,
    sources: list[Any],
    targets: list[DriverTarget],
    config: Any,
    lab: Lab | None,
    cluster: str | None,
    burst_polling_us: int | None,
    say: Callable[[str], None],
    quiet: bool,
    checkpoint: Checkpoint,
    settings: Any = None,
) -> dict[str, Any]:
    """The benchmark document of a distributed run (checkpointed after every unit); `settings` are the
    input options the user's model files were resolved with (mlts.bench.user_model.InputSettings)."""
    from mlts.records.environment import environment

    t0 = time.time()
    _prebuild([s.zoo_name for s in sources if s.zoo_name is not None], cluster, say)
    with open_executor(cluster) as executor:
        units = benchmark_units.plan(sources, targets, config, burst_polling_us, settings)
        progress = stderr_progress(len(units), _where(cluster), quiet)
        outcomes: dict[str, UnitOutcome] = {}

        def document(part: Any) -> dict[str, Any]:
            doc = benchmark_units.merge(units, outcomes, sources, targets, config, lab is not None)
            doc["environment"] = doc["environment"] or environment(config.threads)
            doc.update(_sections(lab, targets, cluster, part))
            return doc

        def arrived(outcome: UnitOutcome) -> None:
            outcomes[outcome.unit.id] = outcome
            checkpoint(document(cluster_record(executor, units, outcomes, t0) if cluster else None))

        try:
            _run(executor, units, progress, arrived)
        except KeyboardInterrupt:
            checkpoint(document(cluster_record(executor, units, outcomes, t0) if cluster else None))
            raise
        return document(cluster_record(executor, units, outcomes, t0) if cluster else None)
