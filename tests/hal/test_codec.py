"""Codec: HAL records round-trip through JSON, and hostile dicts are rejected with the field path."""

from __future__ import annotations

import copy
import json

import pytest

from mlts.hal import codec
from mlts.hal.enums import ErrorStatus, OperandType
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.types import (
    Capabilities,
    DataLocation,
    ExecutionResult,
    Extension,
    ExtensionOperandTypeInformation,
    OperandPerformance,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    Timing,
)
from tests.hal._nnm_models import assert_models_equal, rich_model


def _through_json(d: dict) -> dict:
    return json.loads(json.dumps(d, allow_nan=False))


def test_model_round_trip_through_json():
    m = rich_model()
    d = _through_json(codec.model_to_dict(m))
    back = codec.model_from_dict(d, m.operand_values, m.pools)
    assert_models_equal(m, back)
    assert back.main.operands[3].type is OperandType.TENSOR_FLOAT32  # known codes come back as the enum
    assert type(back.main.operands[7].type) is int  # extension codes stay ints
    assert d["pools"] == [{"length": 1024}, {"length": 364}]
    assert d["main"]["operands"][7]["extraParams"] == {"extension": "AAFvcGFxdWX/"}


def test_other_records_round_trip():
    caps = Capabilities(
        PerformanceInfo(0.7, 1.1),
        PerformanceInfo(0.8, 1.2),
        (
            OperandPerformance(0, PerformanceInfo(1.0, 1.0)),
            OperandPerformance(3, PerformanceInfo(0.5, 2.0)),
            OperandPerformance((1 << 16) | 1, PerformanceInfo(3.4028234663852886e38, 0.0)),
        ),
        PerformanceInfo(1.0, 1.0),
        PerformanceInfo(2.0, 3.0),
    )
    assert codec.capabilities_from_dict(_through_json(codec.capabilities_to_dict(caps))) == caps
    uniform = Capabilities.uniform(PerformanceInfo(1.1, 1.1))
    assert codec.capabilities_from_dict(_through_json(codec.capabilities_to_dict(uniform))) == uniform

    ext = Extension("com.example.ext", (ExtensionOperandTypeInformation(5, True, 1),))
    assert codec.extension_from_dict(_through_json(codec.extension_to_dict(ext))) == ext

    t = Timing(12, 2**64 - 1)
    assert codec.timing_from_dict(_through_json(codec.timing_to_dict(t))) == t
    s = OutputShape((2, 3), False)
    assert codec.output_shape_from_dict(_through_json(codec.output_shape_to_dict(s))) == s
    r = ExecutionResult((s, OutputShape(())), t)
    assert codec.execution_result_from_dict(_through_json(codec.execution_result_to_dict(r))) == r

    mem = HostMemory(bytes(32))
    req = Request(
        (RequestArgument(False, DataLocation(0, 0, 16), (1, 4)), RequestArgument(True)),
        (RequestArgument(False, DataLocation(1, 0, 0), ()),),
        (mem, 7),
    )
    d = _through_json(codec.request_to_dict(req))
    assert d["pools"] == [{"size": 32}, {"token": 7}]
    assert codec.request_pool_descs(d) == d["pools"]
    assert codec.request_from_dict(d, (mem, 7)) == req
    custom = codec.request_to_dict(req, [{"fd": 0, "size": 32}, {"token": 7}])
    assert custom["pools"][0] == {"fd": 0, "size": 32}


def _model_dict() -> dict:
    return _through_json(codec.model_to_dict(rich_model()))


def _set(d: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


OP = ("main", "operands", 3)
HOSTILE = [
    # (where, value, expected message fragment)
    (
        OP + ("dimensions", 1),
        -3,
        "main.operands[3].dimensions[1]: expected a non-negative int below 2**31, got -3",
    ),
    (OP + ("dimensions", 1), 2**31, "main.operands[3].dimensions[1]"),
    (OP + ("dimensions", 1), 4.0, "got 4.0"),
    (OP + ("dimensions", 1), True, "got true"),
    (OP + ("dimensions",), [1] * 1025, "main.operands[3].dimensions: expected at most 1024 items"),
    (OP + ("dimensions",), "1,2", "main.operands[3].dimensions: expected a list"),
    (OP + ("type",), 2**32, "main.operands[3].type: expected an int in [0, 2**32)"),
    (OP + ("type",), -1, "main.operands[3].type"),
    (OP + ("type",), "TENSOR_FLOAT32", "main.operands[3].type"),
    (OP + ("scale",), float("nan"), "main.operands[3].scale: expected a finite float32, got nan"),
    (OP + ("scale",), float("inf"), "main.operands[3].scale"),
    (OP + ("scale",), 1e39, "main.operands[3].scale"),
    (OP + ("scale",), 10**400, "main.operands[3].scale"),
    (OP + ("scale",), "0.5", "main.operands[3].scale"),
    (OP + ("scale",), False, "main.operands[3].scale"),
    (OP + ("zeroPoint",), 2**31, "main.operands[3].zeroPoint: expected an int32"),
    (OP + ("numberOfConsumers",), -1, "main.operands[3].numberOfConsumers"),
    (OP + ("lifetime",), "FOREVER", "main.operands[3].lifetime: expected one of TEMPORARY_VARIABLE"),
    (OP + ("lifetime",), 4, "main.operands[3].lifetime"),
    (OP + ("location", "offset"), 2**32, "main.operands[3].location.offset"),
    (
        OP + ("location",),
        {"poolIndex": 0, "offset": 0},
        "main.operands[3].location: missing key(s) ['length']",
    ),
    (
        OP + ("extraParams",),
        {"channelQuant": {"scales": [float("nan")], "channelDim": 0}},
        "main.operands[3].extraParams.channelQuant.scales[0]",
    ),
    (
        OP + ("extraParams",),
        {"extension": "not base64!"},
        "main.operands[3].extraParams.extension: expected a base64",
    ),
    (OP + ("extraParams",), {"other": 1}, "main.operands[3].extraParams"),
    (OP + ("extraParams",), [], "main.operands[3].extraParams"),
    (OP + ("evil",), 1, "main.operands[3]: unknown key(s) ['evil']"),
    (("main", "operations", 1, "inputs", 0), -5, "main.operations[1].inputs[0]"),
    (("main", "operations", 1, "type"), 1.5, "main.operations[1].type"),
    (("main", "inputIndexes"), None, "main.inputIndexes: expected a list, got null"),
    (("main", "operands"), {}, "main.operands: expected a list"),
    (("referenced", 1, "operands", 0, "dimensions", 0), -1, "referenced[1].operands[0].dimensions[0]"),
    (
        ("relaxComputationFloat32toFloat16",),
        1,
        "relaxComputationFloat32toFloat16: expected true or false, got 1",
    ),
    (("extensionNameToPrefix", 0, "prefix"), 65536, "extensionNameToPrefix[0].prefix"),
    (("extensionNameToPrefix", 0, "name"), 7, "extensionNameToPrefix[0].name"),
    (("operandValues", "length"), 3, "operandValues.length: 3 but 20 bytes were supplied"),
    (("pools", 1, "length"), 10, "pools[1].length: 10 but the supplied pool has 364 bytes"),
    (("pools",), [{"length": 1024}], "pools: 1 pools described but 2 supplied"),
    (("main", "operands"), [{}] * 1_000_001, "main.operands: expected at most 1000000 items"),
]


@pytest.mark.parametrize(
    "where,value,message", HOSTILE, ids=[f"{'.'.join(map(str, h[0]))}={str(h[1])[:12]}" for h in HOSTILE]
)
def test_hostile_model_dict_is_rejected_with_field_path(where, value, message):
    m = rich_model()
    d = _model_dict()
    _set(d, where, value)
    with pytest.raises(HalError) as info:
        codec.model_from_dict(d, m.operand_values, m.pools)
    assert info.value.status == ErrorStatus.INVALID_ARGUMENT
    assert message in info.value.message


def test_model_dict_missing_and_extra_top_level_keys():
    m = rich_model()
    for mutate, message in (
        (lambda d: d.pop("referenced"), "model: missing key(s) ['referenced']"),
        (lambda d: d.update(extra=1), "model: unknown key(s) ['extra']"),
    ):
        d = _model_dict()
        mutate(d)
        with pytest.raises(HalError, match=r"model: (missing|unknown)") as info:
            codec.model_from_dict(d, m.operand_values, m.pools)
        assert message in info.value.message
    with pytest.raises(HalError, match="model: expected an object, got a list"):
        codec.model_from_dict([], b"", ())


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d["operandPerformance"].reverse(), "capabilities.operandPerformance[1].type"),
        (
            lambda d: d["ifPerformance"].update(execTime=-1.0),
            "capabilities.ifPerformance.execTime: expected a finite non-negative",
        ),
        (
            lambda d: d["whilePerformance"].update(powerUsage=float("nan")),
            "capabilities.whilePerformance.powerUsage",
        ),
        (
            lambda d: d["operandPerformance"][0].update(info=None),
            "capabilities.operandPerformance[0].info: expected an object",
        ),
    ],
)
def test_hostile_capabilities(mutate, message):
    d = codec.capabilities_to_dict(Capabilities.uniform(PerformanceInfo(1.0, 1.0)))
    d = copy.deepcopy(d)
    mutate(d)
    with pytest.raises(HalError) as info:
        codec.capabilities_from_dict(d)
    assert message in info.value.message


def test_hostile_request_timing_and_shapes():
    mem = HostMemory(bytes(8))
    good = codec.request_to_dict(Request((RequestArgument(False, DataLocation(0, 0, 8), (2,)),), (), (mem,)))
    bad = copy.deepcopy(good)
    bad["inputs"][0]["hasNoValue"] = 0
    with pytest.raises(HalError, match=r"request.inputs\[0\].hasNoValue: expected true or false, got 0"):
        codec.request_from_dict(bad, (mem,))
    with pytest.raises(HalError, match="request.pools: 1 pools described but 2 supplied"):
        codec.request_from_dict(good, (mem, mem))
    bad = copy.deepcopy(good)
    bad["pools"] = [3]
    with pytest.raises(HalError, match=r"request.pools\[0\]: expected an object, got 3"):
        codec.request_pool_descs(bad)
    with pytest.raises(HalError, match="timing.timeOnDevice: expected an int in"):
        codec.timing_from_dict({"timeOnDevice": 2**64, "timeInDriver": 0})
    with pytest.raises(HalError, match=r"outputShape.dimensions\[0\]"):
        codec.output_shape_from_dict({"dimensions": [-1], "isSufficient": True})
    with pytest.raises(HalError, match=r"extension.operandTypes\[0\].type"):
        codec.extension_from_dict(
            {"name": "x", "operandTypes": [{"type": 70000, "isTensor": True, "byteSize": 1}]}
        )
