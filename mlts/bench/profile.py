"""Per-operation profiles of a results row (`mlts benchmark --profile`), and the driver/onnxruntime pairs.

A driver's profile comes from the per-operation times it returns with each
execution (`mlts.hal.operation_times`); onnxruntime's from its own profiler
(`mlts.bench.ort_profile`). Each operation's time is its median over the
profiled executions. Both are summarised the same way: the top operations by
time, the time by operation type and the time by layer, a layer being the
ONNX node the converter turned into the operation (`Conversion.origins`).
onnxruntime fuses nodes (Conv + BatchNormalization + Relu become one kernel
named after the last of them), so one of its nodes is attributed to the layer
of the nearest node upstream that the converter also kept. `pair_layers` puts
the driver's and onnxruntime's time for the same layer side by side.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from mlts.bench.ort_profile import OrtProfile
from mlts.hal.enums import OperationType
from mlts.hal.operation_times import OperationTimes

#: How many operations the top list keeps.
TOP_N = 10
#: How far upstream an onnxruntime node is followed to find a layer the converter kept.
MAX_UPSTREAM = 16

K = TypeVar("K")


def _type_name(code: int) -> str:
    try:
        return OperationType(code).name
    except ValueError:
        return f"operation type {code}"


def summarize(entries: Sequence[Mapping[str, Any]], executions: int) -> dict:
    """The profile section of a row from per-operation entries ({name, type, layer, us})."""
    total = sum(e["us"] for e in entries)

    def share(us: float) -> float:
        return us / total if total > 0 else 0.0

    top = sorted(entries, key=lambda e: -e["us"])[:TOP_N]
    types: dict[str, list[float]] = {}
    layers: dict[str, float] = {}
    for e in entries:
        types.setdefault(e["type"], []).append(e["us"])
        if e.get("layer"):
            layers[e["layer"]] = layers.get(e["layer"], 0.0) + e["us"]
    by_type: list[dict[str, Any]] = sorted(
        ({"type": t, "count": len(v), "us": sum(v), "share": share(sum(v))} for t, v in types.items()),
        key=lambda r: -r["us"],
    )
    return {
        "executions": executions,
        "operations": len(entries),
        "total_us": total,
        "top": [{**e, "share": share(e["us"])} for e in top],
        "by_type": by_type,
        "by_layer": layers,
    }


def driver_entries(
    records: Sequence[OperationTimes], operation_types: Sequence[int], origins: Sequence[str | None]
) -> list[dict]:
    """Per operation of main that a driver timed: its median µs over `records` (one per execution)."""
    samples: dict[int, list[int]] = {}
    for record in records:
        for e in record:
            samples.setdefault(e.operation, []).append(e.duration_ns)
    out = []
    for index in sorted(samples):
        kind = _type_name(operation_types[index])
        layer = origins[index] if index < len(origins) else None
        out.append(
            {
                "name": f"#{index} {kind}",
                "type": kind,
                "layer": layer,
                "us": statistics.median(samples[index]) / 1000.0,
            }
        )
    return out


class OnnxGraphIndex:
    """Node names of an ONNX graph and, for each node, the nodes producing its inputs."""

    def __init__(self, graph) -> None:
        from mlts.convert.context import node_label

        producer: dict[str, str] = {}
        self.inputs: dict[str, list[str]] = {}
        for node in graph.node:
            label = node_label(node)
            for out in node.output:
                if out:
                    producer[out] = label
        for node in graph.node:
            self.inputs[node_label(node)] = [producer[i] for i in node.input if i in producer]
        self.producer = producer

    def node_of(self, ort_name: str) -> str | None:
        """The ONNX node an onnxruntime node name comes from: a node's name or the name of the tensor
        it produces (onnxruntime's transformers name new nodes either way), possibly followed by a
        suffix they added (`conv0/relu6_nchwc` -> `conv0/relu6`)."""
        name = ort_name
        while True:
            if name in self.inputs:
                return name
            if name in self.producer:
                return self.producer[name]
            cut = name.rfind("_")
            if cut <= 0:
                return None
            name = name[:cut]

    def layer_of(self, ort_name: str, layers: Iterable[str]) -> str | None:
        """The layer (one of `layers`) an onnxruntime node belongs to: its ONNX node or the nearest
        node upstream (first inputs first) that is a layer."""
        wanted = set(layers)
        node = self.node_of(ort_name)
        for _ in range(MAX_UPSTREAM):
            if node is None:
                return None
            if node in wanted:
                return node
            ups = self.inputs.get(node, [])
            node = ups[0] if ups else None
        return None


def reference_entries(profile: OrtProfile, graph, origins: Sequence[str | None]) -> list[dict]:
    """onnxruntime's nodes as profile entries, each given the converter's layer it belongs to."""
    index = OnnxGraphIndex(graph)
    layers = {o for o in origins if o}
    return [
        {"name": n.name, "type": n.op_type, "layer": index.layer_of(n.name, layers), "us": n.us}
        for n in profile.nodes
    ]


def pair_layers(driver: Mapping[str, float], reference: Mapping[str, float]) -> dict:
    """The layers both profiles timed, side by side, largest excess of the driver first.

    `ratio` is driver ÷ onnxruntime; `slowest` names the layer where the driver loses the most time
    (the kernel to look at first); `coverage` is the share of each side's time the pairs account for.
    """
    rows: list[dict[str, Any]] = []
    for layer, us in driver.items():
        ref = reference.get(layer)
        if ref is None:
            continue
        rows.append(
            {"layer": layer, "driver_us": us, "reference_us": ref, "ratio": us / ref if ref > 0 else None}
        )
    rows.sort(key=lambda r: -(r["driver_us"] - r["reference_us"]))
    d_total, r_total = sum(driver.values()), sum(reference.values())
    return {
        "pairs": rows,
        "slowest": rows[0]["layer"] if rows and rows[0]["driver_us"] > rows[0]["reference_us"] else None,
        "coverage": {
            "driver": sum(r["driver_us"] for r in rows) / d_total if d_total > 0 else 0.0,
            "reference": sum(r["reference_us"] for r in rows) / r_total if r_total > 0 else 0.0,
        },
    }


def overhead(unprofiled_s: Sequence[float], profiled_s: Sequence[float]) -> dict | None:
    """Median wall-clock latency without and with profiling (ms) and their ratio."""
    if not unprofiled_s or not profiled_s:
        return None
    plain, prof = statistics.median(unprofiled_s) * 1e3, statistics.median(profiled_s) * 1e3
    return {
        "unprofiled_median_ms": plain,
        "profiled_median_ms": prof,
        "ratio": prof / plain if plain > 0 else None,
    }


def attach_layer_pairs(rows: Mapping[K, dict], reference_key: K) -> None:
    """Give every driver row with a profile its `layers` against the profile of the reference row,
    `rows[reference_key]`."""
    ref = (rows.get(reference_key) or {}).get("profile") or {}
    if not ref.get("by_layer"):
        return
    for key, row in rows.items():
        prof = row.get("profile")
        if key == reference_key or not prof or not prof.get("by_layer"):
            continue
        prof["layers"] = pair_layers(prof["by_layer"], ref["by_layer"])
