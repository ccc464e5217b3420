"""`mlts validate` as units: each suite on each target, split into case-group shards on a cluster.

A shard runs its suite with `SuiteOptions.shard = (k, n)`: only the cases whose group (one operation
and type, one request subject, one fuzz target) hashes to k, so each group's models are built once,
and fuzz campaigns keep the seeds and budgets of the whole suite. The few cases every shard emits
(a suite's closing liveness check, skips of unclaimed operations) are kept once: from the shard their
group belongs to. Merged, the section has every case of a single-machine run, in suite order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from mlts.cluster.targets import DriverTarget
from mlts.cluster.units import Unit, UnitOutcome, absolute, scratch_out
from mlts.records.endpoint import Endpoint
from mlts.records.validate import CaseResult, ValidateSection

#: Suites split into case-group shards on a cluster (behaviour is one unit: its cases share state).
SHARDED = {"validation", "operations", "fuzz"}
MAX_SHARDS = 32


def shard_count(suite: str, workers: int) -> int:
    """How many units suite `suite` becomes on `workers` workers (1 without a cluster)."""
    if suite not in SHARDED or workers <= 1:
        return 1
    if suite == "fuzz":
        return min(workers, 4)  # four fuzz targets, each a campaign
    if suite == "validation":
        return min(MAX_SHARDS, workers)  # each shard probes the driver and starts two services first
    return min(MAX_SHARDS, 2 * workers)


def plan(
    targets: Sequence[DriverTarget],
    suites: Sequence[str],
    options: Any,
    *,
    workers: int,
    threads: int,
    plugin_files: Sequence[str],
) -> list[Unit]:
    """The units of a validate run: target x suite x shard, in the order a single run emits them."""
    units: list[Unit] = []
    for t_index, target in enumerate(targets):
        for s_index, suite in enumerate(suites):
            n = shard_count(suite, workers)
            for k in range(n):
                shard = (k, n) if n > 1 else None
                label = f"validate {suite}" + (f" shard {k + 1}/{n}" if shard else "") + f" on {target.name}"
                payload = {
                    "target": target.to_json(),
                    "suite": suite,
                    "options": {**asdict(options), "shard": list(shard) if shard else None},
                    "threads": threads,
                    "plugin_files": absolute(plugin_files),
                }
                units.append(
                    Unit(
                        id=f"v{len(units):04d}",
                        kind="validate",
                        label=label,
                        payload=payload,
                        order=(t_index, s_index, k),
                        host=target.host,
                        device=target.device,
                    )
                )
    return units


def run(payload: dict[str, Any], scratch: str) -> dict[str, Any]:
    """On the worker: one suite (or shard of it) on the unit's target; the section and the endpoint."""
    from mlts.validate.core import SuiteOptions, Target
    from mlts.validate.runner import run_suites

    target_desc = DriverTarget.from_json(payload["target"])
    raw = dict(payload["options"])
    shard = raw.pop("shard", None)
    options = SuiteOptions(**raw, shard=tuple(shard) if shard else None)
    reproducers = scratch_out(scratch, "reproducers")
    target = Target(
        target_desc.spec(payload.get("plugin_files") or ()),
        out_dir=reproducers,
        call_timeout=options.call_timeout,
        options=dict(target_desc.options),
        threads=int(payload.get("threads") or 1),
        log_dir=scratch_out(scratch, "logs"),
    )
    with target:
        section = run_suites(target, [payload["suite"]], options)
    root = os.path.join(scratch, "out")
    # Reproducer paths relative to the unit's out folder: the client puts the files under its own --out.
    cases = tuple(
        replace(c, reproducer=os.path.relpath(c.reproducer, root)) if c.reproducer else c
        for c in section.cases
    )
    return {
        "section": replace(section, cases=cases).to_json(),
        "endpoint": target_desc.endpoint().to_json(),
    }


def merge(
    units: Sequence[Unit],
    outcomes: dict[str, UnitOutcome],
    suites: Sequence[str],
    options: Any,
    *,
    driver: str,
    seconds: float,
    lab: bool,
    out_dir: str,
) -> ValidateSection:
    """One validate section from the units' sections (missing units: a suite error line each)."""
    from mlts.validate.core import case_shard

    cases: list[CaseResult] = []
    owner: dict[tuple, tuple[int, int]] = {}  # case key -> (index in cases, whether its own shard emitted it)
    errors: list[str] = []
    restarts = 0
    endpoints: list[Endpoint] = []
    for unit in sorted(units, key=lambda u: u.order):
        outcome = outcomes.get(unit.id)
        suite = unit.payload["suite"]
        if outcome is None or not outcome.ok:
            why = "not run (interrupted)" if outcome is None else f"could not run: {outcome.error}"
            errors.append(f"{suite}: {unit.label}: {why}")
            continue
        section = ValidateSection.from_json(outcome.result["section"], f"unit {unit.id}")
        endpoints.append(Endpoint.from_json(outcome.result["endpoint"], f"unit {unit.id}.endpoint"))
        restarts += section.restarts
        mark = f" [{unit.device}]" if lab and unit.device else ""
        errors += [e + mark for e in section.errors if e + mark not in errors]
        shard = unit.payload["options"].get("shard")
        prefix = os.path.join(out_dir, "reproducers", *([unit.device] if lab and unit.device else []))
        for case in section.cases:
            case = replace(
                case,
                device=unit.device if lab else None,
                reproducer=os.path.join(prefix, case.reproducer.split("/", 1)[1])
                if case.reproducer
                else None,
            )
            key = (case.device, case.suite, case.name)
            own = shard is None or case_shard(case.name, shard[1]) == shard[0]
            if key in owner:
                index, had_own = owner[key]
                if own and not had_own:
                    cases[index] = case
                    owner[key] = (index, True)
                continue
            owner[key] = (len(cases), own)
            cases.append(case)
    return ValidateSection(
        driver=driver,
        suites=tuple(suites),
        cases=tuple(cases),
        seconds=seconds,
        restarts=restarts,
        options={k: v for k, v in asdict(options).items() if k != "shard"},
        errors=tuple(errors),
        endpoint=endpoints[0] if endpoints and not lab else None,
    )
