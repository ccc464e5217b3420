"""Strict conversion of HAL records to and from JSON-able dicts.

Used by the .nnm file format and by the driver wire protocol. Keys are the
HAL's field names (camelCase). Bytes never go into the dicts: operandValues
and pools are described by their length and travel separately. Decoding
treats its input as hostile: every field's JSON type and range is checked,
unknown and missing keys are rejected, and each failure raises
`invalid(...)` (INVALID_ARGUMENT) naming the field path, e.g.
"main.operands[7].dimensions[2]: expected a non-negative int below 2**31, got -3".

JSON has one number type, so float fields accept ints; int fields reject
floats and booleans.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any, TypeVar

from mlts.hal import operation_times
from mlts.hal.enums import OperandLifeTime, OperandType, OperationType
from mlts.hal.errors import invalid
from mlts.hal.memory import HostMemory, Memory, SharedMemory
from mlts.hal.types import (
    FLT_MAX,
    Capabilities,
    DataLocation,
    ExecutionResult,
    Extension,
    ExtensionData,
    ExtensionNameAndPrefix,
    ExtensionOperandTypeInformation,
    Model,
    Operand,
    OperandPerformance,
    Operation,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    RequestPool,
    Subgraph,
    SymmPerChannelQuantParams,
    Timing,
)

MAX_RANK = 1024
MAX_DIMENSION = 2**31 - 1
MAX_ITEMS = 1_000_000  # operands, operations, subgraphs, indexes, scales...
MAX_NAME_CHARS = 1024
UINT16_MAX = 2**16 - 1
UINT32_MAX = 2**32 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

E = TypeVar("E", bound=IntEnum)

# ------------------------------------------------------------ field checks


def _show(v: Any) -> str:
    """A short JSON-like rendering of a bad value for error messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return repr(v[:40] + ("..." if len(v) > 40 else ""))
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "a list"
    return type(v).__name__


def _fail(path: str, expected: str, v: Any) -> Exception:
    return invalid(f"{path}: expected {expected}, got {_show(v)}")


def _int(v: Any, path: str, lo: int, hi: int, what: str) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _fail(path, what, v)
    return v


def _uint32(v: Any, path: str) -> int:
    return _int(v, path, 0, UINT32_MAX, "an int in [0, 2**32)")


def _uint64(v: Any, path: str) -> int:
    return _int(v, path, 0, UINT64_MAX, "an int in [0, 2**64)")


def _size(v: Any, path: str) -> int:
    return _int(v, path, 0, INT64_MAX, "a non-negative int below 2**63")


def _bool(v: Any, path: str) -> bool:
    if type(v) is not bool:
        raise _fail(path, "true or false", v)
    return v


def _float32(v: Any, path: str, *, non_negative: bool = False) -> float:
    """A finite number that fits float32 (NaN and infinities are rejected)."""
    # Compare before any float() so a huge int cannot raise OverflowError.
    ok = type(v) in (int, float) and -FLT_MAX <= v <= FLT_MAX and (not non_negative or v >= 0)
    if not ok:
        raise _fail(path, "a finite non-negative float32" if non_negative else "a finite float32", v)
    return float(v)


def _str(v: Any, path: str, max_chars: int = MAX_NAME_CHARS) -> str:
    if type(v) is not str or len(v) > max_chars:
        raise _fail(path, f"a string of at most {max_chars} characters", v)
    return v


def _list(v: Any, path: str, max_items: int = MAX_ITEMS) -> list:
    if type(v) is not list:
        raise _fail(path, "a list", v)
    if len(v) > max_items:
        raise invalid(f"{path}: expected at most {max_items} items, got {len(v)}")
    return v


def _obj(v: Any, path: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """A JSON object with exactly `keys`, and any of `optional`."""
    if type(v) is not dict:
        raise _fail(path, "an object", v)
    if v.keys() != set(keys) and not (set(keys) <= v.keys() <= set(keys) | set(optional)):
        unknown = sorted(str(k) for k in v.keys() - set(keys) - set(optional))
        missing = sorted(set(keys) - v.keys())
        problem = f"unknown key(s) {unknown}" if unknown else f"missing key(s) {missing}"
        raise invalid(f"{path}: {problem}; expected exactly {list(keys)}")
    return v


def _enum_name(v: Any, path: str, cls: type[E]) -> E:
    if type(v) is str and v in cls.__members__:
        return cls[v]
    raise _fail(path, f"one of {', '.join(cls.__members__)}", v)


def _code(v: int, cls: type[E]) -> int:
    """Known codes become the IntEnum member (nicer names); extension codes stay ints."""
    return cls(v) if v in cls._value2member_map_ else v


def _uint32_list(v: Any, path: str) -> tuple[int, ...]:
    items = _list(v, path)
    for i, x in enumerate(items):
        if type(x) is not int or not 0 <= x <= UINT32_MAX:
            raise _fail(f"{path}[{i}]", "an int in [0, 2**32)", x)
    return tuple(items)


def _dimensions(v: Any, path: str) -> tuple[int, ...]:
    dims = _list(v, path, MAX_RANK)
    for i, d in enumerate(dims):
        if type(d) is not int or not 0 <= d <= MAX_DIMENSION:
            raise _fail(f"{path}[{i}]", "a non-negative int below 2**31", d)
    return tuple(dims)


# ------------------------------------------------------------ operands and models


def location_to_dict(loc: DataLocation) -> dict:
    """DataLocation -> {"poolIndex", "offset", "length"}."""
    return {"poolIndex": int(loc.pool_index), "offset": int(loc.offset), "length": int(loc.length)}


def location_from_dict(d: Any, path: str = "location") -> DataLocation:
    """The inverse of `location_to_dict`; every field is a uint32."""
    d = _obj(d, path, ("poolIndex", "offset", "length"))
    return DataLocation(
        _uint32(d["poolIndex"], f"{path}.poolIndex"),
        _uint32(d["offset"], f"{path}.offset"),
        _uint32(d["length"], f"{path}.length"),
    )


def _extra_to_dict(extra: Any) -> dict | None:
    if extra is None:
        return None
    if isinstance(extra, SymmPerChannelQuantParams):
        return {
            "channelQuant": {"scales": [float(s) for s in extra.scales], "channelDim": int(extra.channel_dim)}
        }
    if isinstance(extra, ExtensionData):
        return {"extension": base64.b64encode(bytes(extra.data)).decode("ascii")}
    raise invalid(
        f"extraParams: expected None, SymmPerChannelQuantParams or ExtensionData, got {type(extra).__name__}"
    )


def _extra_from_dict(v: Any, path: str) -> SymmPerChannelQuantParams | ExtensionData | None:
    if v is None:
        return None
    if type(v) is not dict or len(v) != 1 or next(iter(v)) not in ("channelQuant", "extension"):
        raise _fail(path, 'null, {"channelQuant": {...}} or {"extension": "<base64>"}', v)
    if "channelQuant" in v:
        p = f"{path}.channelQuant"
        cq = _obj(v["channelQuant"], p, ("scales", "channelDim"))
        scales = _list(cq["scales"], f"{p}.scales")
        return SymmPerChannelQuantParams(
            tuple(_float32(s, f"{p}.scales[{i}]") for i, s in enumerate(scales)),
            _uint32(cq["channelDim"], f"{p}.channelDim"),
        )
    text = v["extension"]
    if type(text) is not str:
        raise _fail(f"{path}.extension", "a base64 string", text)
    try:
        return ExtensionData(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        raise _fail(f"{path}.extension", "a base64 string", text) from None


_OPERAND_KEYS = (
    "type",
    "dimensions",
    "numberOfConsumers",
    "scale",
    "zeroPoint",
    "lifetime",
    "location",
    "extraParams",
)


def operand_to_dict(op: Operand) -> dict:
    """Operand -> dict; the lifetime is its name, the type its numeric code."""
    return {
        "type": int(op.type),
        "dimensions": [int(d) for d in op.dimensions],
        "numberOfConsumers": int(op.number_of_consumers),
        "scale": float(op.scale),
        "zeroPoint": int(op.zero_point),
        "lifetime": OperandLifeTime(op.lifetime).name,
        "location": location_to_dict(op.location),
        "extraParams": _extra_to_dict(op.extra_params),
    }


def operand_from_dict(d: Any, path: str = "operand") -> Operand:
    """The inverse of `operand_to_dict`; the type may be any uint32 (extension codes)."""
    d = _obj(d, path, _OPERAND_KEYS)
    return Operand(
        type=_code(_uint32(d["type"], f"{path}.type"), OperandType),
        dimensions=_dimensions(d["dimensions"], f"{path}.dimensions"),
        number_of_consumers=_uint32(d["numberOfConsumers"], f"{path}.numberOfConsumers"),
        scale=_float32(d["scale"], f"{path}.scale"),
        zero_point=_int(d["zeroPoint"], f"{path}.zeroPoint", INT32_MIN, INT32_MAX, "an int32"),
        lifetime=_enum_name(d["lifetime"], f"{path}.lifetime", OperandLifeTime),
        location=location_from_dict(d["location"], f"{path}.location"),
        extra_params=_extra_from_dict(d["extraParams"], f"{path}.extraParams"),
    )


def operation_to_dict(op: Operation) -> dict:
    """Operation -> {"type", "inputs", "outputs"}."""
    return {
        "type": int(op.type),
        "inputs": [int(i) for i in op.inputs],
        "outputs": [int(i) for i in op.outputs],
    }


def operation_from_dict(d: Any, path: str = "operation") -> Operation:
    """The inverse of `operation_to_dict`; the type may be any uint32 (extension codes)."""
    d = _obj(d, path, ("type", "inputs", "outputs"))
    return Operation(
        _code(_uint32(d["type"], f"{path}.type"), OperationType),
        _uint32_list(d["inputs"], f"{path}.inputs"),
        _uint32_list(d["outputs"], f"{path}.outputs"),
    )


def subgraph_to_dict(sg: Subgraph) -> dict:
    """Subgraph -> {"operands", "operations", "inputIndexes", "outputIndexes"}."""
    return {
        "operands": [operand_to_dict(o) for o in sg.operands],
        "operations": [operation_to_dict(o) for o in sg.operations],
        "inputIndexes": [int(i) for i in sg.input_indexes],
        "outputIndexes": [int(i) for i in sg.output_indexes],
    }


def subgraph_from_dict(d: Any, path: str = "subgraph") -> Subgraph:
    """The inverse of `subgraph_to_dict`."""
    d = _obj(d, path, ("operands", "operations", "inputIndexes", "outputIndexes"))
    operands = _list(d["operands"], f"{path}.operands")
    operations = _list(d["operations"], f"{path}.operations")
    return Subgraph(
        tuple(operand_from_dict(o, f"{path}.operands[{i}]") for i, o in enumerate(operands)),
        tuple(operation_from_dict(o, f"{path}.operations[{i}]") for i, o in enumerate(operations)),
        _uint32_list(d["inputIndexes"], f"{path}.inputIndexes"),
        _uint32_list(d["outputIndexes"], f"{path}.outputIndexes"),
    )


_MODEL_KEYS = (
    "main",
    "referenced",
    "operandValues",
    "pools",
    "relaxComputationFloat32toFloat16",
    "extensionNameToPrefix",
)


def model_to_dict(model: Model) -> dict:
    """Model -> dict; operandValues and each pool appear as {"length": n}."""
    return {
        "main": subgraph_to_dict(model.main),
        "referenced": [subgraph_to_dict(s) for s in model.referenced],
        "operandValues": {"length": len(model.operand_values)},
        "pools": [{"length": int(p.size)} for p in model.pools],
        "relaxComputationFloat32toFloat16": bool(model.relax_computation_float32_to_float16),
        "extensionNameToPrefix": [
            {"name": e.name, "prefix": int(e.prefix)} for e in model.extension_name_to_prefix
        ],
    }


def model_from_dict(
    d: Any, operand_values: bytes | memoryview, pools: Sequence[Memory], path: str = ""
) -> Model:
    """The inverse of `model_to_dict`, given the bytes it described by length.

    `operand_values` is copied into the Model; `pools` are used as given and
    must have exactly the lengths the dict states.
    """
    dot = f"{path}." if path else ""
    d = _obj(d, path or "model", _MODEL_KEYS)
    referenced = _list(d["referenced"], f"{dot}referenced")
    values = bytes(operand_values)
    ov = _obj(d["operandValues"], f"{dot}operandValues", ("length",))
    if _size(ov["length"], f"{dot}operandValues.length") != len(values):
        raise invalid(f"{dot}operandValues.length: {ov['length']} but {len(values)} bytes were supplied")
    pool_descs = _list(d["pools"], f"{dot}pools")
    if len(pool_descs) != len(pools):
        raise invalid(f"{dot}pools: {len(pool_descs)} pools described but {len(pools)} supplied")
    for i, (desc, pool) in enumerate(zip(pool_descs, pools, strict=True)):
        p = f"{dot}pools[{i}]"
        if _size(_obj(desc, p, ("length",))["length"], f"{p}.length") != pool.size:
            raise invalid(f"{p}.length: {desc['length']} but the supplied pool has {pool.size} bytes")
    prefixes = _list(d["extensionNameToPrefix"], f"{dot}extensionNameToPrefix")
    extensions = []
    for i, e in enumerate(prefixes):
        p = f"{dot}extensionNameToPrefix[{i}]"
        e = _obj(e, p, ("name", "prefix"))
        extensions.append(
            ExtensionNameAndPrefix(
                _str(e["name"], f"{p}.name"),
                _int(e["prefix"], f"{p}.prefix", 0, UINT16_MAX, "an int in [0, 65535]"),
            )
        )
    return Model(
        main=subgraph_from_dict(d["main"], f"{dot}main"),
        referenced=tuple(subgraph_from_dict(s, f"{dot}referenced[{i}]") for i, s in enumerate(referenced)),
        operand_values=values,
        pools=tuple(pools),
        relax_computation_float32_to_float16=_bool(
            d["relaxComputationFloat32toFloat16"], f"{dot}relaxComputationFloat32toFloat16"
        ),
        extension_name_to_prefix=tuple(extensions),
    )


# ------------------------------------------------------------ device queries


def _perf_to_dict(p: PerformanceInfo) -> dict:
    return {"execTime": float(p.exec_time), "powerUsage": float(p.power_usage)}


def _perf_from_dict(d: Any, path: str) -> PerformanceInfo:
    d = _obj(d, path, ("execTime", "powerUsage"))
    return PerformanceInfo(
        _float32(d["execTime"], f"{path}.execTime", non_negative=True),
        _float32(d["powerUsage"], f"{path}.powerUsage", non_negative=True),
    )


_CAPS_KEYS = (
    "relaxedFloat32toFloat16PerformanceScalar",
    "relaxedFloat32toFloat16PerformanceTensor",
    "operandPerformance",
    "ifPerformance",
    "whilePerformance",
)


def capabilities_to_dict(caps: Capabilities) -> dict:
    """Capabilities -> dict with HAL 1.3 field names."""
    return {
        "relaxedFloat32toFloat16PerformanceScalar": _perf_to_dict(
            caps.relaxed_float32_to_float16_performance_scalar
        ),
        "relaxedFloat32toFloat16PerformanceTensor": _perf_to_dict(
            caps.relaxed_float32_to_float16_performance_tensor
        ),
        "operandPerformance": [
            {"type": int(e.type), "info": _perf_to_dict(e.info)} for e in caps.operand_performance
        ],
        "ifPerformance": _perf_to_dict(caps.if_performance),
        "whilePerformance": _perf_to_dict(caps.while_performance),
    }


def capabilities_from_dict(d: Any, path: str = "capabilities") -> Capabilities:
    """The inverse of `capabilities_to_dict`; operandPerformance must be sorted by type, without repeats."""
    d = _obj(d, path, _CAPS_KEYS)
    entries = []
    previous = -1
    for i, e in enumerate(_list(d["operandPerformance"], f"{path}.operandPerformance")):
        p = f"{path}.operandPerformance[{i}]"
        e = _obj(e, p, ("type", "info"))
        t = _uint32(e["type"], f"{p}.type")
        if t <= previous:
            raise invalid(
                f"{p}.type: {t} is not above the previous entry's {previous}; entries must be sorted by type"
            )
        previous = t
        entries.append(OperandPerformance(_code(t, OperandType), _perf_from_dict(e["info"], f"{p}.info")))
    return Capabilities(
        _perf_from_dict(
            d["relaxedFloat32toFloat16PerformanceScalar"], f"{path}.relaxedFloat32toFloat16PerformanceScalar"
        ),
        _perf_from_dict(
            d["relaxedFloat32toFloat16PerformanceTensor"], f"{path}.relaxedFloat32toFloat16PerformanceTensor"
        ),
        tuple(entries),
        _perf_from_dict(d["ifPerformance"], f"{path}.ifPerformance"),
        _perf_from_dict(d["whilePerformance"], f"{path}.whilePerformance"),
    )


def extension_to_dict(ext: Extension) -> dict:
    """Extension -> {"name", "operandTypes": [{"type", "isTensor", "byteSize"}]}."""
    return {
        "name": ext.name,
        "operandTypes": [
            {"type": int(t.type), "isTensor": bool(t.is_tensor), "byteSize": int(t.byte_size)}
            for t in ext.operand_types
        ],
    }


def extension_from_dict(d: Any, path: str = "extension") -> Extension:
    """The inverse of `extension_to_dict`; type is a uint16, byteSize a uint32."""
    d = _obj(d, path, ("name", "operandTypes"))
    types = []
    for i, t in enumerate(_list(d["operandTypes"], f"{path}.operandTypes")):
        p = f"{path}.operandTypes[{i}]"
        t = _obj(t, p, ("type", "isTensor", "byteSize"))
        types.append(
            ExtensionOperandTypeInformation(
                _int(t["type"], f"{p}.type", 0, UINT16_MAX, "an int in [0, 65535]"),
                _bool(t["isTensor"], f"{p}.isTensor"),
                _uint32(t["byteSize"], f"{p}.byteSize"),
            )
        )
    return Extension(_str(d["name"], f"{path}.name"), tuple(types))


# ------------------------------------------------------------ executions


def argument_to_dict(a: RequestArgument) -> dict:
    """A request's input or output argument as JSON (the wire's form)."""
    return {
        "hasNoValue": bool(a.has_no_value),
        "location": location_to_dict(a.location),
        "dimensions": [int(x) for x in a.dimensions],
    }


def argument_from_dict(d: Any, path: str) -> RequestArgument:
    """The argument of `argument_to_dict`'s form at `path`; every field checked (HalError naming it)."""
    d = _obj(d, path, ("hasNoValue", "location", "dimensions"))
    return RequestArgument(
        _bool(d["hasNoValue"], f"{path}.hasNoValue"),
        location_from_dict(d["location"], f"{path}.location"),
        _dimensions(d["dimensions"], f"{path}.dimensions"),
    )


def default_pool_desc(pool: RequestPool) -> dict:
    """{"token": t} for a driver-managed buffer, {"size": n} for memory."""
    if isinstance(pool, (HostMemory, SharedMemory)):
        return {"size": int(pool.size)}
    return {"token": int(pool)}


def request_to_dict(request: Request, pool_descs: Sequence[Mapping[str, Any]] | None = None) -> dict:
    """Request -> dict; "pools" holds `pool_descs` (how the transport passes each pool), one per pool.

    Without `pool_descs` each pool is described by `default_pool_desc`.
    """
    if pool_descs is None:
        pool_descs = [default_pool_desc(p) for p in request.pools]
    if len(pool_descs) != len(request.pools):
        raise invalid(f"request pools: {len(request.pools)} pools but {len(pool_descs)} descriptions")
    d: dict[str, Any] = {
        "inputs": [argument_to_dict(a) for a in request.inputs],
        "outputs": [argument_to_dict(a) for a in request.outputs],
        "pools": [dict(p) for p in pool_descs],
    }
    if request.measure_operations:
        d["measureOperations"] = True  # protocol 1.3; absent when not asked, so older services are served
    return d


def request_pool_descs(d: Any, path: str = "request") -> list[dict]:
    """The pool descriptions of an encoded request, checked to be a list of objects (their keys are the transport's)."""
    if type(d) is not dict or "pools" not in d:
        raise _fail(path, 'an object with "pools"', d)
    descs = _list(d["pools"], f"{path}.pools")
    for i, p in enumerate(descs):
        if type(p) is not dict:
            raise _fail(f"{path}.pools[{i}]", "an object", p)
    return descs


def request_from_dict(d: Any, pools: Sequence[RequestPool], path: str = "request") -> Request:
    """The inverse of `request_to_dict`, given the pools the transport resolved from d["pools"]."""
    d = _obj(d, path, ("inputs", "outputs", "pools"), ("measureOperations",))
    descs = request_pool_descs(d, path)
    if len(descs) != len(pools):
        raise invalid(f"{path}.pools: {len(descs)} pools described but {len(pools)} supplied")
    inputs = _list(d["inputs"], f"{path}.inputs")
    outputs = _list(d["outputs"], f"{path}.outputs")
    return Request(
        tuple(argument_from_dict(a, f"{path}.inputs[{i}]") for i, a in enumerate(inputs)),
        tuple(argument_from_dict(a, f"{path}.outputs[{i}]") for i, a in enumerate(outputs)),
        tuple(pools),
        _bool(d.get("measureOperations", False), f"{path}.measureOperations"),
    )


def timing_to_dict(t: Timing) -> dict:
    """Timing -> {"timeOnDevice", "timeInDriver"} in µs (UINT64_MAX: not measured)."""
    return {"timeOnDevice": int(t.time_on_device), "timeInDriver": int(t.time_in_driver)}


def timing_from_dict(d: Any, path: str = "timing") -> Timing:
    """The inverse of `timing_to_dict`; both fields are uint64."""
    d = _obj(d, path, ("timeOnDevice", "timeInDriver"))
    return Timing(
        _uint64(d["timeOnDevice"], f"{path}.timeOnDevice"), _uint64(d["timeInDriver"], f"{path}.timeInDriver")
    )


def output_shape_to_dict(s: OutputShape) -> dict:
    """OutputShape -> {"dimensions", "isSufficient"}."""
    return {"dimensions": [int(x) for x in s.dimensions], "isSufficient": bool(s.is_sufficient)}


def output_shape_from_dict(d: Any, path: str = "outputShape") -> OutputShape:
    """The inverse of `output_shape_to_dict`."""
    d = _obj(d, path, ("dimensions", "isSufficient"))
    return OutputShape(
        _dimensions(d["dimensions"], f"{path}.dimensions"), _bool(d["isSufficient"], f"{path}.isSufficient")
    )


def execution_result_to_dict(r: ExecutionResult) -> dict:
    """ExecutionResult -> {"outputShapes", "timing"}, plus "operationTimes" when the driver measured them."""
    d: dict[str, Any] = {
        "outputShapes": [output_shape_to_dict(s) for s in r.output_shapes],
        "timing": timing_to_dict(r.timing),
    }
    if r.operation_times is not None:
        d["operationTimes"] = operation_times.to_list(r.operation_times)
    return d


def execution_result_from_dict(d: Any, path: str = "result") -> ExecutionResult:
    """The inverse of `execution_result_to_dict`."""
    d = _obj(d, path, ("outputShapes", "timing"), ("operationTimes",))
    shapes = _list(d["outputShapes"], f"{path}.outputShapes")
    times = d.get("operationTimes")
    return ExecutionResult(
        tuple(output_shape_from_dict(s, f"{path}.outputShapes[{i}]") for i, s in enumerate(shapes)),
        timing_from_dict(d["timing"], f"{path}.timing"),
        None if times is None else operation_times.from_list(times, f"{path}.operationTimes"),
    )
