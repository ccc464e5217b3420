"""`mlts stress` as units: one per test (a mode on a target, per model for the per-model modes).

Each unit runs `mlts.crash.suite.run_mode` for its mode, target and models on the worker, where every
test still runs in its own supervised process; the modes that start a shared service start it on
that worker. The modes that measure latency (performance degradation, priority) are timing units.
Merged, the records come in the order a single run writes them; in a lab run each test's name
carries its device (`mode/driver@device/...`) so the devices' tests stay apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mlts.cluster.targets import DriverTarget
from mlts.cluster.units import Unit, UnitOutcome, absolute, scratch_out

#: Modes that measure latency: they run on a quiet worker.
TIMING_MODES = frozenset({"performance-degradation-stress", "priority-stress", "priority-stress-two-clients"})
#: Modes with one test per model (a unit each).
PER_MODEL_MODES = frozenset({"inference-stress", "model-loading-stress"})


def config_json(config: Any) -> dict[str, Any]:
    """A StressConfig as JSON (tuples become lists, plugin files absolute paths)."""
    return {**config.to_json(), "plugin_files": absolute(config.plugin_files)}


def config_from_json(data: dict[str, Any]):
    from mlts.crash.suite import StressConfig

    return StressConfig.from_json(data)


def plan(
    modes: Sequence[str], targets: Sequence[DriverTarget], models: Sequence[str], config: Any
) -> list[Unit]:
    """The units of a stress run, in the order a single run goes through its modes and drivers."""
    units: list[Unit] = []
    for m_index, mode in enumerate(modes):
        for t_index, target in enumerate(targets):
            groups = [[m] for m in models] if mode in PER_MODEL_MODES else [list(models)]
            for g_index, group in enumerate(groups):
                label = f"{mode} on {target.name}" + (f" ({group[0]})" if mode in PER_MODEL_MODES else "")
                payload = {
                    "mode": mode,
                    "target": target.to_json(),
                    "models": group,
                    "config": config_json(config),
                }
                units.append(
                    Unit(
                        id=f"s{len(units):04d}",
                        kind="stress",
                        label=label,
                        payload=payload,
                        order=(m_index, t_index, g_index),
                        timing=mode in TIMING_MODES,
                        host=target.host,
                        device=target.device,
                    )
                )
    return units


def run(payload: dict[str, Any], scratch: str) -> dict[str, Any]:
    """On the worker: the unit's tests; their records (JSON) and the endpoint they ran against."""
    from mlts.crash.suite import run_mode

    target = DriverTarget.from_json(payload["target"])
    config = config_from_json(payload["config"])
    changes: dict[str, Any] = {}
    if target.socket is not None:
        changes["driver_sockets"] = {**config.driver_sockets, target.driver: target.socket}
    if target.options:
        changes["driver_options"] = {**config.driver_options, **target.options}
    if config.dump_dir is not None:
        changes["dump_dir"] = scratch_out(scratch, "dump")
    config = replace(config, **changes)
    results = run_mode(payload["mode"], [target.driver], list(payload["models"]), config, lambda _m: None)
    endpoint = target.endpoint(in_process=config.in_process).to_json()
    return {"records": [{**r.record().to_json(), "endpoint": endpoint} for r in results]}


def merge_records(units: Sequence[Unit], outcomes: dict[str, UnitOutcome], lab: bool) -> list[dict[str, Any]]:
    """The records of every unit, in plan order; a unit that could not run is one FAILURE record."""
    from mlts.crash.outcome import Outcome, TestResult

    out: list[dict[str, Any]] = []
    for unit in sorted(units, key=lambda u: u.order):
        outcome = outcomes.get(unit.id)
        if outcome is None:
            continue  # not run yet (an interrupted run keeps what finished)
        target = DriverTarget.from_json(unit.payload["target"])
        if outcome.ok:
            records = list(outcome.result["records"])
        else:
            mode, models = unit.payload["mode"], unit.payload["models"]
            test = f"{mode}/{target.driver}" + (f"/{models[0]}" if mode in PER_MODEL_MODES else "")
            failed = TestResult(test, mode, target.driver, list(models), Outcome.FAILURE)
            failed.reason = f"the unit could not run on the cluster: {outcome.error}"
            records = [{**failed.record().to_json(), "endpoint": target.endpoint().to_json()}]
        for record in records:
            if lab and target.device:
                parts = str(record.get("test", "")).split("/")
                if len(parts) > 1 and parts[1] == target.driver:
                    parts[1] = f"{target.driver}@{target.device}"
                    record["test"] = "/".join(parts)
            out.append(record)
    return out
