"""`mlts benchmark` as units: one per model x driver target, each a timing unit.

A unit runs `mlts.bench.runner.run_benchmark` for one model on one target: the onnxruntime
reference row (each driver row's verdict is judged against it) and the target's driver rows. Merged
without a lab, a model keeps one reference row (its first target's) as a single run has; in a lab
run each device keeps its own, measured beside it, and every row names its device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlts.cluster.endpoints import stamp_benchmark
from mlts.cluster.targets import DriverTarget
from mlts.cluster.units import Unit, UnitOutcome, absolute


def config_json(config: Any) -> dict[str, Any]:
    """A BenchmarkConfig as JSON, the files it names made absolute (plugins, capabilities)."""
    data = config.to_json()
    data["plugin_files"] = absolute(config.plugin_files)
    data["driver_options"] = {
        driver: {k: os.path.abspath(v) if k == "capabilities" else v for k, v in options.items()}
        for driver, options in config.driver_options.items()
    }
    return data


def config_from_json(data: dict[str, Any]):
    from mlts.bench.backends import BenchmarkConfig

    return BenchmarkConfig.from_json(data)


def source_json(source: Any) -> dict[str, Any]:
    """A ModelSource as JSON; a user's file by its absolute path (the workers must see the same path)."""
    path = None if source.path is None else str(Path(source.path).resolve())
    twin = None if source.twin is None else str(Path(source.twin).resolve())
    shapes = [[name, list(shape)] for name, shape in getattr(source, "input_shapes", ())]
    return {
        "name": source.name,
        "path": path,
        "zoo_name": source.zoo_name,
        "twin": twin,
        "input_shapes": shapes,
    }


def user_models_json(sources: Sequence[Any], settings: Any) -> dict[str, Any] | None:
    """The user's ONNX and .nnm files of the run with the input options they were resolved with (JSON):
    a worker resolves them again the same way (--input-shape, --input-value, --inputs DIR)."""
    from mlts.bench.user_model import InputSettings

    users = [s for s in sources if s.user is not None]
    if not users:
        return None
    settings = settings or InputSettings()
    return {
        "files": [str(Path(s.path).resolve()) for s in users],
        "shapes": {k: list(v) for k, v in settings.shapes.items()},
        "values": {k: np.asarray(v).tolist() for k, v in settings.values.items()},
        "inputs_dir": None if settings.inputs_dir is None else os.path.abspath(settings.inputs_dir),
    }


def _user_source(src: dict[str, Any], users: dict[str, Any]):
    """The ModelSource of a user's file, its inputs resolved on this worker as on the client."""
    from mlts.bench.sources import select_models
    from mlts.bench.user_model import InputSettings

    settings = InputSettings(
        {k: tuple(v) for k, v in users["shapes"].items()},
        {k: np.asarray(v) for k, v in users["values"].items()},
        users["inputs_dir"],
    )
    for source in select_models(None, tuple(users["files"]), settings):
        if str(source.path) == src["path"]:
            return source
    raise FileNotFoundError(f"model file {src['path']} is not among the run's files")


def plan(
    sources: Sequence[Any],
    targets: Sequence[DriverTarget],
    config: Any,
    burst_polling_us: int | None,
    settings: Any = None,
) -> list[Unit]:
    units: list[Unit] = []
    users = user_models_json(sources, settings)
    for m_index, source in enumerate(sources):
        for t_index, target in enumerate(targets):
            payload = {
                "source": source_json(source),
                "user_models": users if source.user is not None else None,
                "target": target.to_json(),
                "config": config_json(config),
                "burst_polling_us": burst_polling_us,
            }
            units.append(
                Unit(
                    id=f"b{len(units):04d}",
                    kind="benchmark",
                    label=f"{source.name} on {target.name}",
                    payload=payload,
                    order=(m_index, t_index),
                    timing=True,
                    host=target.host,
                    device=target.device,
                )
            )
    return units


def run(payload: dict[str, Any], scratch: str) -> dict[str, Any]:
    """On the worker: one model on one target; the benchmark document of that run (rows stamped)."""
    from mlts.bench.progress import Silent
    from mlts.bench.runner import run_benchmark
    from mlts.bench.sources import ModelSource
    from mlts.runtime.execution import set_burst_polling

    set_burst_polling(payload.get("burst_polling_us"))
    target = DriverTarget.from_json(payload["target"])
    config = config_from_json(payload["config"])
    if target.options:
        config = _with_options(config, target)
    src = payload["source"]
    if src["path"] is not None and not os.path.isfile(src["path"]):
        raise FileNotFoundError(f"model file {src['path']} is not on this worker's machine")
    if payload.get("user_models") is not None:
        source = _user_source(src, payload["user_models"])
    else:
        twin = None if src.get("twin") is None else Path(src["twin"])
        path = None if src["path"] is None else Path(src["path"])
        shapes = tuple((name, tuple(shape)) for name, shape in src.get("input_shapes") or ())
        source = ModelSource(src["name"], path, src["zoo_name"], twin=twin, input_shapes=shapes)
    doc = run_benchmark([source], [target.spec(config.plugin_files)], config, Silent())
    return stamp_benchmark(
        doc, {target.driver: target.socket}, in_process=config.in_process, device=target.device
    )


def _with_options(config: Any, target: DriverTarget):
    from dataclasses import replace

    merged = {
        **config.driver_options,
        target.driver: {**config.driver_options.get(target.driver, {}), **target.options},
    }
    return replace(config, driver_options=merged)


def merge(
    units: Sequence[Unit],
    outcomes: dict[str, UnitOutcome],
    sources: Sequence[Any],
    targets: Sequence[DriverTarget],
    config: Any,
    lab: bool,
) -> dict[str, Any]:
    """The benchmark document of the whole run, in a single run's row order."""
    from mlts.bench.backends import driver_backends
    from mlts.bench.runner import error_record
    from mlts.bench.sources import family_of
    from mlts.records import SCHEMA_VERSION

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "benchmark",
        "environment": {},
        "config": {
            **config.to_json(),
            "models": [s.name for s in sources],
            "drivers": [t.driver for t in targets],
        },
        "devices": {},
        "capabilities": {},
        "results": [],
    }
    have_reference: set[str] = set()
    for unit in sorted(units, key=lambda u: u.order):
        outcome = outcomes.get(unit.id)
        if outcome is None:
            continue
        source = sources[unit.order[0]]
        target = targets[unit.order[1]]
        if outcome.ok:
            part = outcome.result
            if not doc["environment"]:
                doc["environment"] = part.get("environment", {})
            key = target.device if lab and target.device else target.driver
            for section in ("devices", "capabilities"):
                for name, value in (part.get(section) or {}).items():
                    doc[section][key if name == target.driver else name] = value
            rows = list(part.get("results") or [])
        else:
            message = f"the unit could not run on the cluster: {outcome.error}"
            family = family_of(source)
            rows = [error_record(source.name, family, "cpu:onnxruntime", config, message)]
            rows += [
                error_record(source.name, family, key.label, config, message, key.mode)
                for key in driver_backends(config, {target.driver: None})
            ]
            stamp_benchmark({"results": rows}, {target.driver: target.socket}, device=target.device)
        for row in rows:
            if row.get("backend", "").startswith("cpu:") and not lab:
                if source.name in have_reference:
                    continue  # one reference row per model, as a single run has
                have_reference.add(source.name)
            doc["results"].append(row)
    return doc
