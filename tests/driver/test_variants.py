"""The sample-driver variants: support rules, refusal of partly supported models, default and calibrated capabilities."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from driver.device import SampleDevice
from driver.variants import VARIANTS
from mlts.cli import main
from mlts.hal.builder import ModelBuilder
from mlts.hal.enums import ErrorStatus, OperandType, OperationType
from mlts.hal.errors import HalError
from mlts.hal.memory import HostMemory
from mlts.hal.types import Capabilities, DataLocation, Model, PerformanceInfo, Request, RequestArgument
from mlts.runtime.discovery import BUILTIN_DRIVERS, discover, open_device, select

T, Op, P = OperandType, OperationType, PerformanceInfo
SHAPE = (1, 2, 2, 1)
X = np.array([0.5, 1.0, 1.5, 2.0], np.float32).reshape(SHAPE)
Y = np.array([0.5, 0.0, -0.5, 1.0], np.float32).reshape(SHAPE)
U8 = dict(scale=0.25, zero_point=100)
U8_SUM = dict(scale=0.5, zero_point=100)
S8 = dict(scale=0.25, zero_point=-28)
S8_SUM = dict(scale=0.5, zero_point=-28)
PARTIAL = ("sample-float-fast", "sample-float-slow", "sample-minimal", "sample-quant")
NEW_VARIANTS = {
    "sample-float-fast": "SampleFloatFast",
    "sample-float-slow": "SampleFloatSlow",
    "sample-minimal": "SampleMinimal",
    "sample-quant": "SampleQuant",
}


@pytest.fixture(autouse=True)
def empty_config_dir(tmp_path, monkeypatch) -> Path:
    """No calibrated file of the user's may change the defaults under test (drivers started here inherit it)."""
    config = tmp_path / "config"
    monkeypatch.setenv("MLTS_CONFIG_DIR", str(config))
    return config


def device(name: str, **options: str) -> SampleDevice:
    return VARIANTS[name](**options)


# ------------------------------------------------------------------ models


def _conv(mb: ModelBuilder, x: int) -> int:
    """CONV_2D with a 1x1 filter of 2.0, bias 0.5, SAME padding, stride 1: 2x + 0.5."""
    w = mb.add_constant(np.full((1, 1, 1, 1), 2.0, np.float32))
    b = mb.add_constant(np.array([0.5], np.float32))
    args = [mb.add_scalar(v, T.INT32) for v in (1, 1, 1, 0)]  # SAME, stride w, stride h, no activation
    out = mb.add_operand(T.TENSOR_FLOAT32, SHAPE)
    mb.add_operation(Op.CONV_2D, (x, w, b, *args), (out,))
    return out


def _binary(mb: ModelBuilder, op: OperationType, a: int, b: int, type: int, **quant) -> int:
    out = mb.add_operand(type, SHAPE, **quant)
    mb.add_operation(op, (a, b, mb.add_scalar(0, T.INT32)), (out,))
    return out


def _unary(mb: ModelBuilder, op: OperationType, a: int, type: int, **quant) -> int:
    out = mb.add_operand(type, SHAPE, **quant)
    mb.add_operation(op, (a,), (out,))
    return out


def _concat(mb: ModelBuilder, a: int, b: int) -> int:
    out = mb.add_operand(T.TENSOR_FLOAT32, (1, 2, 2, 2))
    mb.add_operation(Op.CONCATENATION, (a, b, mb.add_scalar(3, T.INT32)), (out,))
    return out


def mixed_model() -> Model:
    """Float and quant8 operations; the comments give each value for X and Y, computed by hand.

    0 ADD      a = x + y               = [1, 1, 1, 3]
    1 CONV_2D  c = 2a + 0.5            = [2.5, 2.5, 2.5, 6.5]
    2 MUL      m = c * x               = [1.25, 2.5, 3.75, 13]
    3 QUANTIZE q = 100 + m / 0.25      = [105, 110, 115, 152]  (uint8)
    4 ADD      q2 = q + q at scale 0.5 = [105, 110, 115, 152]  (uint8, zero point 100)
    5 DEQUANTIZE d = 0.5 (q2 - 100)    = [2.5, 5, 7.5, 26]
    6 CONCATENATION out = [d, x] on the channel axis
    7 QUANTIZE s = -28 + m / 0.25      = [-23, -18, -13, 24]   (int8)
    8 ADD      s2 = s + s at scale 0.5 = [-23, -18, -13, 24]   (int8, zero point -28)
    """
    mb = ModelBuilder()
    x = mb.add_input(T.TENSOR_FLOAT32, SHAPE)
    y = mb.add_input(T.TENSOR_FLOAT32, SHAPE)
    a = _binary(mb, Op.ADD, x, y, T.TENSOR_FLOAT32)
    c = _conv(mb, a)
    m = _binary(mb, Op.MUL, c, x, T.TENSOR_FLOAT32)
    q = _unary(mb, Op.QUANTIZE, m, T.TENSOR_QUANT8_ASYMM, **U8)
    q2 = _binary(mb, Op.ADD, q, q, T.TENSOR_QUANT8_ASYMM, **U8_SUM)
    d = _unary(mb, Op.DEQUANTIZE, q2, T.TENSOR_FLOAT32)
    out = _concat(mb, d, x)
    s = _unary(mb, Op.QUANTIZE, m, T.TENSOR_QUANT8_ASYMM_SIGNED, **S8)
    s2 = _binary(mb, Op.ADD, s, s, T.TENSOR_QUANT8_ASYMM_SIGNED, **S8_SUM)
    mb.mark_outputs(out, s2)
    return mb.build()


MIXED_OUT = np.array([[2.5, 0.5], [5.0, 1.0], [7.5, 1.5], [26.0, 2.0]]).reshape(1, 2, 2, 2)
MIXED_S2 = np.array([-23, -18, -13, 24]).reshape(SHAPE)


def minimal_model() -> Model:
    """out = [2(x + y) + 0.5, x] on the channel axis: ADD, CONV_2D, CONCATENATION only."""
    mb = ModelBuilder()
    x = mb.add_input(T.TENSOR_FLOAT32, SHAPE)
    y = mb.add_input(T.TENSOR_FLOAT32, SHAPE)
    c = _conv(mb, _binary(mb, Op.ADD, x, y, T.TENSOR_FLOAT32))
    mb.mark_outputs(_concat(mb, c, x))
    return mb.build()


MINIMAL_OUT = np.array([[2.5, 0.5], [2.5, 1.0], [2.5, 1.5], [6.5, 2.0]]).reshape(1, 2, 2, 2)


def quant_model() -> Model:
    """Operations 4, 5 and 8 of mixed_model, from q and s given as inputs."""
    mb = ModelBuilder()
    q = mb.add_input(T.TENSOR_QUANT8_ASYMM, SHAPE, **U8)
    s = mb.add_input(T.TENSOR_QUANT8_ASYMM_SIGNED, SHAPE, **S8)
    d = _unary(
        mb, Op.DEQUANTIZE, _binary(mb, Op.ADD, q, q, T.TENSOR_QUANT8_ASYMM, **U8_SUM), T.TENSOR_FLOAT32
    )
    mb.mark_outputs(d, _binary(mb, Op.ADD, s, s, T.TENSOR_QUANT8_ASYMM_SIGNED, **S8_SUM))
    return mb.build()


Q_IN = np.array([105, 110, 115, 152], np.uint8).reshape(SHAPE)
S_IN = np.array([-23, -18, -13, 24], np.int8).reshape(SHAPE)


def run(dev: SampleDevice, model: Model, *inputs: np.ndarray) -> list[np.ndarray]:
    """Prepare `model` on `dev` and execute it once on `inputs`; the outputs."""
    sub = model.main
    outs = [sub.operands[i] for i in sub.output_indexes]
    dtypes = [
        np.float32 if o.type == T.TENSOR_FLOAT32 else np.uint8 if o.type == T.TENSOR_QUANT8_ASYMM else np.int8
        for o in outs
    ]
    pools = [HostMemory(bytearray(a.tobytes())) for a in inputs]
    pools += [HostMemory(bytearray(o.byte_size())) for o in outs]
    request = Request(
        tuple(RequestArgument(False, DataLocation(k, 0, a.nbytes)) for k, a in enumerate(inputs)),
        tuple(
            RequestArgument(False, DataLocation(len(inputs) + k, 0, o.byte_size()))
            for k, o in enumerate(outs)
        ),
        tuple(pools),
    )
    dev.prepareModel(model).executeSynchronously(request)
    return [
        np.frombuffer(p.buffer, dt).reshape(o.dimensions)
        for p, dt, o in zip(pools[len(inputs) :], dtypes, outs, strict=True)
    ]


# ------------------------------------------------------------------ support rules

#: Per variant, which of mixed_model's 9 operations it supports, by hand from ARCHITECTURE §5's table.
SUPPORT = {
    #                  ADD   CONV   MUL    QUANT  qADD   DEQ    CONCAT QUANT  sADD
    "sample-all": (True, True, True, True, True, True, True, True, True),
    "sample-float-fast": (True, True, True, True, False, False, True, True, False),
    "sample-float-slow": (True, True, True, True, False, False, True, True, False),
    "sample-minimal": (True, True, False, False, False, False, True, False, False),
    "sample-quant": (False, False, False, False, True, True, False, False, True),
}
#: The first operation of mixed_model each partial variant lacks.
FIRST_UNSUPPORTED = {
    "sample-float-fast": "operation 4 (ADD)",
    "sample-float-slow": "operation 4 (ADD)",
    "sample-minimal": "operation 2 (MUL)",
    "sample-quant": "operation 0 (ADD)",
}


@pytest.mark.parametrize("name", sorted(SUPPORT))
def test_supported_operations_of_a_mixed_model(name):
    assert device(name).getSupportedOperations(mixed_model()) == SUPPORT[name]


def test_sample_all_computes_the_mixed_model():
    out, s2 = run(device("sample-all"), mixed_model(), X, Y)
    np.testing.assert_array_equal(out, MIXED_OUT)
    np.testing.assert_array_equal(s2, MIXED_S2)


@pytest.mark.parametrize("name", PARTIAL)
def test_partial_variants_refuse_to_prepare_the_mixed_model(name):
    with pytest.raises(HalError) as e:
        device(name).prepareModel(mixed_model())
    assert e.value.status == ErrorStatus.INVALID_ARGUMENT
    assert f"{name} does not support {FIRST_UNSUPPORTED[name]}" in e.value.message


@pytest.mark.parametrize("name", ["sample-float-fast", "sample-float-slow", "sample-minimal"])
def test_float_variants_run_their_own_subset(name):
    assert all(device(name).getSupportedOperations(minimal_model()))
    (out,) = run(device(name), minimal_model(), X, Y)
    np.testing.assert_array_equal(out, MINIMAL_OUT)


def test_sample_quant_runs_its_own_subset():
    dev = device("sample-quant")
    assert dev.getSupportedOperations(quant_model()) == (True, True, True)
    d, s2 = run(dev, quant_model(), Q_IN, S_IN)
    np.testing.assert_array_equal(d, MIXED_OUT[..., :1])
    np.testing.assert_array_equal(s2, MIXED_S2)
    with pytest.raises(HalError, match="sample-quant does not support operation 0 .ADD."):
        dev.prepareModel(minimal_model())


# ------------------------------------------------------------------ default capabilities

#: (relaxed, FLOAT32 and TENSOR_FLOAT32, every other entry incl. if/while), from ARCHITECTURE §5.
DEFAULT_CAPS = {
    "sample-all": (P(1.1, 1.1), P(1.1, 1.1), P(1.1, 1.1)),
    "sample-float-fast": (P(0.7, 1.1), P(0.8, 1.2), P(1.0, 1.0)),
    "sample-float-slow": (P(1.2, 0.6), P(1.3, 0.7), P(1.0, 1.0)),
    "sample-minimal": (P(0.4, 0.5), P(0.4, 0.5), P(1.0, 1.0)),
    "sample-quant": (P(50.0, 1.0), P(50.0, 1.0), P(50.0, 1.0)),
}
#: Every operand type but the OEM ones, as (code, name), written out.
TYPES = [(0, "FLOAT32"), (1, "INT32"), (2, "UINT32"), (3, "TENSOR_FLOAT32"), (4, "TENSOR_INT32"),
         (5, "TENSOR_QUANT8_ASYMM"), (6, "BOOL"), (7, "TENSOR_QUANT16_SYMM"), (8, "TENSOR_FLOAT16"),
         (9, "TENSOR_BOOL8"), (10, "FLOAT16"), (11, "TENSOR_QUANT8_SYMM_PER_CHANNEL"),
         (12, "TENSOR_QUANT16_ASYMM"), (13, "TENSOR_QUANT8_SYMM"), (14, "TENSOR_QUANT8_ASYMM_SIGNED"),
         (15, "SUBGRAPH")]  # fmt: skip


def expected_caps(relaxed: PerformanceInfo, float32: PerformanceInfo, others: PerformanceInfo) -> dict:
    entries = {name: float32 if code in (0, 3) else others for code, name in TYPES}
    return {"relaxed_scalar": relaxed, "relaxed_tensor": relaxed, "if": others, "while": others, **entries}


def flat(caps: Capabilities) -> dict:
    assert [e.type for e in caps.operand_performance] == [code for code, _ in TYPES]
    return {
        "relaxed_scalar": caps.relaxed_float32_to_float16_performance_scalar,
        "relaxed_tensor": caps.relaxed_float32_to_float16_performance_tensor,
        "if": caps.if_performance,
        "while": caps.while_performance,
        **{name: caps.operand_performance[i].info for i, (_, name) in enumerate(TYPES)},
    }


@pytest.mark.parametrize("name", sorted(DEFAULT_CAPS))
def test_default_capabilities_are_the_table(name):
    dev = device(name)
    assert flat(dev.getCapabilities()) == expected_caps(*DEFAULT_CAPS[name])
    assert dev.capabilities_source == {"kind": "default", "path": None, "created_utc": None, "error": None}


# ------------------------------------------------------------------ registration


def test_every_variant_is_registered_everywhere():
    for name, cls in NEW_VARIANTS.items():
        assert VARIANTS[name].__name__ == cls and VARIANTS[name].variant.name == name
        assert BUILTIN_DRIVERS[name] == f"driver.variants:{cls}"
    specs = discover()
    assert {name: specs[name].factory for name in BUILTIN_DRIVERS} == dict(BUILTIN_DRIVERS), (
        "the entry points differ from BUILTIN_DRIVERS; reinstall the project (pip install -e .)"
    )
    # Alternative variants run only when named, like the fault-injection driver.
    assert [s.name for s in select(specs, None)] == ["sample-all"]
    assert [s.name for s in select(specs, "^sample-(quant|minimal)$")] == ["sample-minimal", "sample-quant"]


def test_unknown_and_empty_options_are_one_line_errors():
    with pytest.raises(
        ValueError,
        match=r"^sample-quant: unknown option 'speed'; known: capabilities, max_memory_mb, buffer_budget, max_execution_mb, idle_release_ms$",
    ):
        device("sample-quant", speed="fast")
    with pytest.raises(
        ValueError, match=r"^sample-all: option buffer_budget needs a byte count >= 0, got 'lots'$"
    ):
        device("sample-all", buffer_budget="lots")
    with pytest.raises(ValueError, match=r"^sample-minimal: option capabilities needs a file path, got ''$"):
        device("sample-minimal", capabilities="")


# ------------------------------------------------------------------ calibrated capabilities


def calibrated(driver: str, **changes) -> dict:
    """A capabilities file measuring relaxed_tensor, TENSOR_FLOAT32, TENSOR_QUANT8_ASYMM and if."""
    doc = {
        "format": "mlts-capabilities",
        "version": 1,
        "driver": driver,
        "driver_version": "mlts-sample-1.3.0",
        "created_utc": "2026-11-21T20:00:00+00:00",
        "power_source": "cpu-time",
        "capabilities": {
            "relaxed_scalar": None,
            "relaxed_tensor": {"exec_time": 0.375, "power_usage": 0.875},
            "operand_performance": {
                "TENSOR_FLOAT32": {"exec_time": 0.25, "power_usage": 0.5},
                "TENSOR_QUANT8_ASYMM": {"exec_time": 3.5, "power_usage": 1.5},
            },
            "if": {"exec_time": 2.0, "power_usage": 4.0},
            "while": None,
        },
        "not_measured": ["relaxed_scalar", "while"],
    }
    doc.update(changes)
    return doc


def expected_calibrated(name: str) -> dict:
    """`name`'s table defaults with the four entries of `calibrated` replaced."""
    return {
        **expected_caps(*DEFAULT_CAPS[name]),
        "relaxed_tensor": P(0.375, 0.875),
        "TENSOR_FLOAT32": P(0.25, 0.5),
        "TENSOR_QUANT8_ASYMM": P(3.5, 1.5),
        "if": P(2.0, 4.0),
    }


def write(path: Path, doc: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_a_calibrated_file_replaces_only_its_measured_entries(tmp_path, caplog):
    path = write(tmp_path / "fast.json", calibrated("sample-float-fast"))
    with caplog.at_level(logging.INFO, logger="driver.capabilities"):
        dev = device("sample-float-fast", capabilities=str(path))
    assert flat(dev.getCapabilities()) == expected_calibrated("sample-float-fast")
    assert dev.capabilities_source["kind"] == "calibrated"
    lines = [r.getMessage() for r in caplog.records if r.name == "driver.capabilities"]
    assert lines == [
        f"sample-float-fast: capabilities: calibrated ({path}, created 2026-11-21T20:00:00+00:00)"
    ]


def test_same_numbers_after_restarting_the_driver_process(tmp_path):
    path = write(tmp_path / "quant.json", calibrated("sample-quant"))
    spec = discover()["sample-quant"]
    answers = []
    for attempt in range(2):
        log = tmp_path / f"driver-{attempt}.log"
        with open_device(spec, options={"capabilities": str(path)}, log_path=str(log)) as dev:
            answers.append(dev.getCapabilities())
        assert f"sample-quant: capabilities: calibrated ({path}" in log.read_text()
    assert answers[0] == answers[1]
    assert flat(answers[0]) == expected_calibrated("sample-quant")


def test_the_config_dir_file_is_found_without_an_option(empty_config_dir):
    write(empty_config_dir / "capabilities" / "sample-minimal.json", calibrated("sample-minimal"))
    assert flat(device("sample-minimal").getCapabilities()) == expected_calibrated("sample-minimal")
    assert flat(device("sample-all").getCapabilities()) == expected_caps(*DEFAULT_CAPS["sample-all"])


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        (calibrated("sample-all"), "the file is for driver 'sample-all', not 'sample-quant'"),
        (calibrated("sample-quant", version=3), "version: 3 is not supported"),
    ],
    ids=["malformed", "other driver", "version"],
)
def test_an_invalid_file_keeps_every_default_and_logs_why(tmp_path, caplog, content, reason):
    path = write(tmp_path / "bad.json", content)
    with caplog.at_level(logging.INFO, logger="driver.capabilities"):
        dev = device("sample-quant", capabilities=str(path))
    assert flat(dev.getCapabilities()) == expected_caps(*DEFAULT_CAPS["sample-quant"])
    (record,) = [r for r in caplog.records if r.name == "driver.capabilities"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(f"sample-quant: capabilities: default ({path} rejected: ")
    assert reason in record.getMessage() and "\n" not in record.getMessage()


# ------------------------------------------------------------------ `mlts devices`

PLUGIN = """
from mlts.hal.interface import Device
from mlts.hal.types import Capabilities, PerformanceInfo


class OwnNumbers(Device):
    name = "own-numbers"

    def getCapabilities(self):
        return Capabilities.uniform(PerformanceInfo(9.0, 9.0))

    def getSupportedOperations(self, model):
        return (False,) * len(model.main.operations)

    def prepareModel(self, model, *args, **kwargs):
        raise NotImplementedError
"""


def test_mlts_devices_shows_the_capabilities_source(tmp_path, empty_config_dir):
    folder = empty_config_dir / "capabilities"
    good = write(folder / "sample-float-slow.json", calibrated("sample-float-slow"))
    bad = write(folder / "sample-quant.json", calibrated("sample-quant", version=2))
    ignored = write(folder / "own-numbers.json", calibrated("own-numbers"))
    plugin = write(tmp_path / "own.py", PLUGIN)
    regex = "^(sample-all|sample-float-slow|sample-quant|own-numbers)$"
    args = ["devices", "--drivers", regex, "--driver-plugin", str(plugin)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    lines = [line.strip() for line in r.output.splitlines() if line.strip().startswith("capabilities:")]
    assert lines == [
        f"capabilities: default ({ignored} rejected: the driver does not apply it (it reports other numbers))",
        "capabilities: default",
        f"capabilities: calibrated ({good}, created 2026-11-21T20:00:00+00:00)",
        f"capabilities: default ({bad} rejected: version: 2 is not supported (this mlts reads version 1))",
    ]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = {d["name"]: d for d in json.loads(r.output)}
    assert doc["sample-float-slow"]["capabilities_source"] == {
        "kind": "calibrated",
        "path": str(good),
        "created_utc": "2026-11-21T20:00:00+00:00",
        "error": None,
    }
    perf = {e["type"]: e for e in doc["sample-float-slow"]["capabilities"]["operand_performance"]}
    assert (perf["TENSOR_FLOAT32"]["exec_time"], perf["FLOAT32"]["exec_time"]) == (0.25, 1.3)
    assert doc["sample-quant"]["capabilities_source"]["kind"] == "default"
    assert doc["sample-all"]["capabilities_source"]["path"] is None
