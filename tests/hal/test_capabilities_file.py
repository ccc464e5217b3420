"""The capabilities file (mlts/hal/capabilities_file.py): lookup, checks, merging over defaults, writing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlts.hal import capabilities_file as cf
from mlts.hal.enums import OperandType
from mlts.hal.types import Capabilities, OperandPerformance, PerformanceInfo

P = PerformanceInfo
DEFAULTS = Capabilities.uniform(P(1.1, 1.1))
DRIVER = "sample-all"


def document(**changes) -> dict:
    """A complete, valid document for DRIVER measuring relaxed_tensor, TENSOR_FLOAT32, INT32 and while."""
    doc = {
        "format": "mlts-capabilities",
        "version": 1,
        "driver": DRIVER,
        "driver_version": "mlts-sample-1.3.0",
        "created_utc": "2026-11-21T20:00:00+00:00",
        "power_source": "cpu-time",
        "capabilities": {
            "relaxed_scalar": None,
            "relaxed_tensor": {"exec_time": 0.625, "power_usage": 0.75},
            "operand_performance": {
                "TENSOR_FLOAT32": {"exec_time": 0.5, "power_usage": 2},
                "INT32": {"exec_time": 3.25, "power_usage": 1e-3},
            },
            "if": None,
            "while": {"exec_time": 7, "power_usage": 8.5},
        },
        "not_measured": ["relaxed_scalar", "if", "FLOAT32"],
        "measurements": {"extra": [1, 2, 3]},
    }
    doc.update(changes)
    return doc


def write(tmp_path: Path, doc_or_text, name: str = "caps.json") -> Path:
    path = tmp_path / name
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    return path


def with_caps(**entries) -> dict:
    """A document whose "capabilities" object is `entries`."""
    return document(capabilities=entries, not_measured=[])


# ------------------------------------------------------------------ where the file lives


def test_config_dir_order(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLTS_CONFIG_DIR", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert cf.config_dir() == tmp_path / "home" / ".config" / "mlts"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    assert cf.config_dir() == tmp_path / "home" / ".config" / "mlts"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert cf.config_dir() == tmp_path / "xdg" / "mlts"
    monkeypatch.setenv("MLTS_CONFIG_DIR", str(tmp_path / "explicit"))
    assert cf.config_dir() == tmp_path / "explicit"


def test_locate(monkeypatch, tmp_path):
    monkeypatch.setenv("MLTS_CONFIG_DIR", str(tmp_path))
    assert cf.locate(DRIVER) is None
    expected = tmp_path / "capabilities" / f"{DRIVER}.json"
    expected.parent.mkdir()
    expected.write_text("{}")
    assert cf.locate(DRIVER) == expected == cf.default_path(DRIVER)
    # An explicit path wins even when it does not exist (loading then says why it is unusable).
    monkeypatch.chdir(tmp_path)
    assert cf.locate(DRIVER, "elsewhere.json") == tmp_path / "elsewhere.json"
    assert cf.locate("../escape") is None and cf.locate("") is None


# ------------------------------------------------------------------ loading


def test_a_valid_file_replaces_exactly_its_measured_entries(tmp_path):
    path = write(tmp_path, document())
    caps, source = cf.load_capabilities(path, DRIVER, DEFAULTS)
    assert source == {
        "kind": "calibrated",
        "path": str(path),
        "created_utc": "2026-11-21T20:00:00+00:00",
        "error": None,
    }
    assert caps.relaxed_float32_to_float16_performance_scalar == P(1.1, 1.1)
    assert caps.relaxed_float32_to_float16_performance_tensor == P(0.625, 0.75)
    assert caps.if_performance == P(1.1, 1.1)
    assert caps.while_performance == P(7.0, 8.5)
    measured = {OperandType.TENSOR_FLOAT32: P(0.5, 2.0), OperandType.INT32: P(3.25, 1e-3)}
    for t in OperandType:
        if t in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE):
            continue
        assert caps.performance_of(t) == measured.get(t, P(1.1, 1.1)), t.name
    assert [e.type for e in caps.operand_performance] == list(range(16))
    assert cf.describe_source(source) == f"calibrated ({path}, created 2026-11-21T20:00:00+00:00)"


def test_a_measured_type_the_defaults_lack_is_added_in_order(tmp_path):
    defaults = Capabilities(
        P(1, 1), P(1, 1), (OperandPerformance(0, P(1, 1)), OperandPerformance(8, P(1, 1))), P(1, 1), P(1, 1)
    )
    doc = with_caps(operand_performance={"TENSOR_INT32": {"exec_time": 2, "power_usage": 3}})
    caps, _ = cf.load_capabilities(write(tmp_path, doc), DRIVER, defaults)
    assert [(e.type, e.info) for e in caps.operand_performance] == [(0, P(1, 1)), (4, P(2, 3)), (8, P(1, 1))]


def test_no_file_means_defaults():
    caps, source = cf.load_capabilities(None, DRIVER, DEFAULTS)
    assert caps is DEFAULTS
    assert source == {"kind": "default", "path": None, "created_utc": None, "error": None}
    assert cf.describe_source(source) == "default"


INVALID = [
    ("malformed JSON", '{"format": "mlts-capabilities", ', "not valid JSON"),
    ("not an object", "[1, 2]", "not a JSON object but list"),
    ("duplicate key", '{"version": 1, "version": 1}', "duplicate key 'version'"),
    ("NaN", json.dumps(document()).replace("0.625", "NaN"), "NaN is not valid JSON"),
    ("Infinity", json.dumps(document()).replace("0.625", "Infinity"), "Infinity is not valid JSON"),
    (
        "inf by overflow",
        json.dumps(document()).replace("0.625", "1e999"),
        "relaxed_tensor.exec_time: must be a finite number > 0",
    ),
    (
        "above FLT_MAX",
        json.dumps(document()).replace("0.625", "1e39"),
        "relaxed_tensor.exec_time: must be a finite number > 0",
    ),
    (
        "other driver",
        document(driver="sample-quant"),
        "the file is for driver 'sample-quant', not 'sample-all'",
    ),
    ("wrong version", document(version=2), "version: 2 is not supported"),
    ("version as text", document(version="1"), 'version: "1" is not supported'),
    ("wrong format", document(format="other"), "format: \"other\" is not 'mlts-capabilities'"),
    (
        "no capabilities",
        {k: v for k, v in document().items() if k != "capabilities"},
        "missing key 'capabilities'",
    ),
    (
        "zero",
        with_caps(**{"if": {"exec_time": 0, "power_usage": 1}}),
        "capabilities.if.exec_time: must be a finite number > 0",
    ),
    (
        "negative",
        with_caps(relaxed_scalar={"exec_time": 1, "power_usage": -0.5}),
        "capabilities.relaxed_scalar.power_usage: must be a finite",
    ),
    (
        "bool",
        with_caps(relaxed_scalar={"exec_time": True, "power_usage": 1}),
        "relaxed_scalar.exec_time: must be a finite number > 0",
    ),
    (
        "text number",
        with_caps(relaxed_scalar={"exec_time": "1", "power_usage": 1}),
        "relaxed_scalar.exec_time: must be a finite number",
    ),
    (
        "missing half",
        with_caps(relaxed_scalar={"exec_time": 1}),
        "capabilities.relaxed_scalar: missing power_usage",
    ),
    (
        "unknown type",
        with_caps(operand_performance={"TENSOR_FLOAT64": {"exec_time": 1, "power_usage": 1}}),
        "unknown operand type 'TENSOR_FLOAT64'",
    ),
    (
        "OEM type",
        with_caps(operand_performance={"OEM": {"exec_time": 1, "power_usage": 1}}),
        "unknown operand type 'OEM'",
    ),
    (
        "unknown entry",
        with_caps(relaxed={"exec_time": 1, "power_usage": 1}),
        "capabilities: unknown entry 'relaxed'",
    ),
    ("not_measured unknown", document(not_measured=["FLOAT64"]), "not_measured: unknown entry 'FLOAT64'"),
    (
        "not_measured overlap",
        document(not_measured=["while"]),
        "not_measured: 'while' is listed but also measured",
    ),
    (
        "local time",
        document(created_utc="2026-11-21T21:00:00+01:00"),
        "created_utc: must be an ISO-8601 UTC time",
    ),
    ("power source", document(power_source="guess"), "power_source: must be one of rapl, cpu-time"),
]


@pytest.mark.parametrize(
    ("content", "reason"), [(c, r) for _, c, r in INVALID], ids=[i for i, _, _ in INVALID]
)
def test_an_invalid_file_keeps_all_defaults_and_says_why_in_one_line(tmp_path, content, reason):
    path = write(tmp_path, content)
    caps, source = cf.load_capabilities(path, DRIVER, DEFAULTS)
    assert caps is DEFAULTS
    assert source["kind"] == "default" and source["path"] == str(path) and source["created_utc"] is None
    assert reason in source["error"] and "\n" not in source["error"]
    assert cf.describe_source(source) == f"default ({path} rejected: {source['error']})"


def test_unreadable_files_are_rejected_not_raised(tmp_path):
    cases = {
        tmp_path / "missing.json": "cannot read it: No such file or directory",
        tmp_path: "not a regular file",
        write(tmp_path, "", "empty.json"): "not valid JSON",
    }
    (tmp_path / "latin1.json").write_bytes(b'{"format": "\xe9"}')
    cases[tmp_path / "latin1.json"] = "not UTF-8 text"
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    cases[tmp_path / "deep.json"] = "not valid JSON"
    for path, reason in cases.items():
        caps, source = cf.load_capabilities(path, DRIVER, DEFAULTS)
        assert caps is DEFAULTS and reason in source["error"], (path, source)


def test_reports_measured():
    doc = cf.parse_document(document(), DRIVER)
    assert not cf.reports_measured(DEFAULTS, doc.measured)
    assert cf.reports_measured(cf.merge(DEFAULTS, doc.measured), doc.measured)
    assert cf.measured_names(doc.measured) == ("relaxed_tensor", "while", "INT32", "TENSOR_FLOAT32")


# ------------------------------------------------------------------ writing


def test_write_then_load_round_trips(tmp_path):
    path = tmp_path / "sub" / "caps.json"
    cf.write_capabilities_file(path, document())
    assert json.loads(path.read_text()) == document()
    caps, source = cf.load_capabilities(path, DRIVER, DEFAULTS)
    assert source["kind"] == "calibrated" and caps.while_performance == P(7.0, 8.5)
    assert not list(path.parent.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({k: v for k, v in document().items() if k != "power_source"}, "missing key 'power_source'"),
        ({k: v for k, v in document().items() if k != "not_measured"}, "missing key 'not_measured'"),
        (document(driver_version=""), "driver_version: must be a non-empty string"),
        (
            with_caps(**{"while": {"exec_time": float("nan"), "power_usage": 1}}),
            "while.exec_time: must be a finite",
        ),
        (document(measurements={"spread": float("inf")}), "cannot be written as JSON"),
        (document(measurements={"when": object()}), "cannot be written as JSON"),
    ],
    ids=["no power source", "no not_measured", "empty version", "NaN", "inf extra", "object extra"],
)
def test_write_refuses_an_invalid_document_and_leaves_the_old_file(tmp_path, doc, reason):
    path = tmp_path / "caps.json"
    path.write_text("old")
    with pytest.raises(cf.CapabilitiesFileError, match=reason):
        cf.write_capabilities_file(path, doc)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["caps.json"]
