"""Human-readable and JSON summaries of a Model, for `mlts inspect`.

Formatters return lines or dicts; they never print. They tolerate models that
fail validation (out-of-range indexes are shown, not followed), so a broken
file can still be inspected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlts.hal.codec import model_to_dict
from mlts.hal.enums import EXTENSION_TYPE_LOW_BITS, OperandLifeTime, OperandType, OperationType, codes
from mlts.hal.types import Model, Operand, Subgraph, SymmPerChannelQuantParams

_LOW_MASK = (1 << EXTENSION_TYPE_LOW_BITS) - 1


def _extension_name(model: Model, prefix: int) -> str:
    for e in model.extension_name_to_prefix:
        if e.prefix == prefix:
            return e.name
    return f"prefix {prefix}"


def _type_name(code: int, enum: type[OperandType] | type[OperationType], model: Model) -> str:
    if code in codes(enum):
        return enum(code).name
    prefix = code >> EXTENSION_TYPE_LOW_BITS
    if prefix:
        return f"{_extension_name(model, prefix)}:{code & _LOW_MASK}"
    return f"UNKNOWN({code})"


def operand_type_name(code: int, model: Model) -> str:
    """OperandType name, or "<extension name>:<type>" for extension codes."""
    return _type_name(code, OperandType, model)


def operation_type_name(code: int, model: Model) -> str:
    """OperationType name, or "<extension name>:<type>" for extension codes."""
    return _type_name(code, OperationType, model)


def dims_text(dims: Sequence[int]) -> str:
    """[1,224,224,3], with "?" for an unknown (0) dimension."""
    return "[" + ",".join(str(d) if d else "?" for d in dims) + "]"


def operand_dims_text(o: Operand) -> str:
    """The operand's dims; "" for a scalar, "[?]" for a tensor of unknown rank."""
    if o.dimensions:
        return dims_text(o.dimensions)
    return "" if o.is_scalar_type else "[?]"


def _consumers(sg: Subgraph) -> tuple[list[list[int]], list[int]]:
    """For each operand: the operations reading it, and its use count (NNAPI counts every input slot)."""
    ops: list[list[int]] = [[] for _ in sg.operands]
    counts = [0] * len(sg.operands)
    for j, op in enumerate(sg.operations):
        for i in op.inputs:
            if 0 <= i < len(ops):
                counts[i] += 1
                if j not in ops[i]:
                    ops[i].append(j)
    return ops, counts


def summarize(model: Model) -> dict[str, Any]:
    """Counts and byte totals of `model` (JSON-able)."""
    copy_count = ref_count = copy_bytes = ref_bytes = 0
    subgraphs = (model.main, *model.referenced)
    for sg in subgraphs:
        for o in sg.operands:
            if o.lifetime == OperandLifeTime.CONSTANT_COPY:
                copy_count, copy_bytes = copy_count + 1, copy_bytes + o.location.length
            elif o.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
                ref_count, ref_bytes = ref_count + 1, ref_bytes + o.location.length
    return {
        "subgraphs": len(subgraphs),
        "operands": sum(len(sg.operands) for sg in subgraphs),
        "operations": sum(len(sg.operations) for sg in subgraphs),
        "mainInputs": len(model.main.input_indexes),
        "mainOutputs": len(model.main.output_indexes),
        "constantCopy": {
            "count": copy_count,
            "bytes": copy_bytes,
            "operandValuesBytes": len(model.operand_values),
        },
        "constantReference": {"count": ref_count, "bytes": ref_bytes},
        "poolSizes": [int(p.size) for p in model.pools],
        "relaxComputationFloat32toFloat16": bool(model.relax_computation_float32_to_float16),
        "extensions": {e.name: int(e.prefix) for e in model.extension_name_to_prefix},
    }


def _quant_text(o: Operand) -> str:
    if isinstance(o.extra_params, SymmPerChannelQuantParams):
        return f"per-channel dim {o.extra_params.channel_dim} ({len(o.extra_params.scales)} scales)"
    if o.scale or o.zero_point:
        return f"{o.scale:g}/{o.zero_point}"
    return ""


def _location_text(o: Operand) -> str:
    loc = o.location
    if o.lifetime == OperandLifeTime.CONSTANT_COPY:
        return f"values@{loc.offset}+{loc.length}"
    if o.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
        return f"pool[{loc.pool_index}]@{loc.offset}+{loc.length}"
    if o.lifetime == OperandLifeTime.SUBGRAPH:
        return f"subgraph {loc.offset}"
    return ""


def _table(header: Sequence[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[c]) for r in [list(header), *rows]) for c in range(len(header))]
    fmt = indent + "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def _subgraph_lines(model: Model, sg: Subgraph, title: str) -> list[str]:
    inputs, outputs = set(sg.input_indexes), set(sg.output_indexes)
    readers, counts = _consumers(sg)
    rows = []
    for i, o in enumerate(sg.operands):
        ops = readers[i]
        consumers = (("op " if len(ops) == 1 else "ops ") + ",".join(map(str, ops))) if ops else "-"
        if counts[i] != o.number_of_consumers:
            consumers += f" (numberOfConsumers says {o.number_of_consumers})"
        role = "in" if i in inputs else "out" if i in outputs else ""
        dims = operand_dims_text(o)
        rows.append(
            [
                str(i),
                operand_type_name(o.type, model),
                dims,
                _quant_text(o),
                OperandLifeTime(o.lifetime).name + (f" ({role})" if role else ""),
                _location_text(o),
                consumers,
            ]
        )
    lines = [
        f"{title}: {len(sg.operands)} operands, {len(sg.operations)} operations, "
        f"inputs {list(sg.input_indexes)}, outputs {list(sg.output_indexes)}"
    ]
    lines.append("  operands:")
    lines += _table(["#", "type", "dims", "scale/zp", "lifetime", "location", "consumers"], rows, "    ")
    op_rows = [
        [
            str(j),
            operation_type_name(op.type, model),
            ",".join(map(str, op.inputs)),
            ",".join(map(str, op.outputs)),
        ]
        for j, op in enumerate(sg.operations)
    ]
    lines.append("  operations:")
    lines += _table(["#", "type", "inputs", "outputs"], op_rows, "    ")
    return lines


def describe(model: Model) -> list[str]:
    """Lines for `mlts inspect`: a summary, then each subgraph's operand and operation tables."""
    s = summarize(model)
    cc, cr = s["constantCopy"], s["constantReference"]
    pools = ", ".join(f"pool[{i}] {n} bytes" for i, n in enumerate(s["poolSizes"])) or "none"
    exts = ", ".join(f"{n} (prefix {p})" for n, p in s["extensions"].items()) or "none"
    lines = [
        f"subgraphs: {s['subgraphs']} (main + {s['subgraphs'] - 1} referenced); "
        f"operands: {s['operands']}; operations: {s['operations']}",
        f"main inputs: {s['mainInputs']}; main outputs: {s['mainOutputs']}",
        f"constants: {cc['count']} copied ({cc['bytes']} bytes, operandValues {cc['operandValuesBytes']} bytes); "
        f"{cr['count']} referenced ({cr['bytes']} bytes)",
        f"pools: {len(s['poolSizes'])}: {pools}",
        f"relaxed float32 -> float16: {'yes' if s['relaxComputationFloat32toFloat16'] else 'no'}",
        f"extensions: {exts}",
        "",
    ]
    lines += _subgraph_lines(model, model.main, "main")
    for k, sg in enumerate(model.referenced):
        lines.append("")
        lines += _subgraph_lines(model, sg, f"referenced[{k}]")
    return lines


def to_json(model: Model, metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The document of `mlts inspect --json`: the model dict, summary numbers and file metadata."""
    return {"summary": summarize(model), "metadata": dict(metadata or {}), "model": model_to_dict(model)}
